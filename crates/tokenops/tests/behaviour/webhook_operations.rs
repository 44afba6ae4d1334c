//! What the webhooks area does beyond the spec, with real HTTPS receivers on both stores: the
//! `webhook.failing` and `webhook.suspended` events told to an organisation's other
//! registrations, the bound on attempts in flight per destination (a held receiver delays no
//! other organisation), and the rotation of the JWS_ES256 signing key through the published
//! JWKS; and a chaos run (a receiver answering at random) after which every delivery has
//! settled exactly as the rules say. Retries follow the manual clock
//! (`TOKENOPS_WEBHOOK_RETRY_BASE_MS` = 100 ms).

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokenops_domain::clock::Clock;
use tokenops_testkit::Tenant;
use tokenops_testkit::webhook_receiver::{ALLOW_CIDRS, ReceivedRequest, Receiver, Response};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use tokenops_webhooks::verify::{JwsExpectations, verify_jws};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::webhooks::{WAIT, app_with_receiver, assert_hmac_delivery, now_secs, register};

const RETRY_BASE_MS: &str = "100";

backends!(
    failing_and_suspension_are_told_to_the_other_registrations,
    a_failing_registration_nobody_watches_adds_no_event_to_the_history,
    a_held_destination_delays_no_other_organisation,
    the_jws_key_rotates_through_the_published_jwks,
    the_jws_key_is_never_rotated_unless_the_operator_sets_an_age,
    under_chaos_every_delivery_settles_by_the_rules
);

/// A new customer of `tenant` set INACTIVE: one customer.status_changed event (not dispatched).
async fn status_change_as(app: &TestApp, tenant: &Tenant) {
    let reference = format!("c-{}", Uuid::now_v7().simple());
    app.post_as(tenant, "/api/customers", &json!({ "customerRef": reference })).await.expect(201);
    app.patch_as(tenant, &format!("/api/customers/{reference}"), &json!({ "status": "INACTIVE" })).await.expect(200);
}

fn types(requests: &[ReceivedRequest]) -> Vec<String> {
    requests.iter().map(|r| r.json()["type"].as_str().unwrap_or_default().to_owned()).collect()
}

/// With no registration subscribed to them, a failing registration's health makes no event:
/// the history keeps to the types its clients subscribe to; the audit record stays.
async fn a_failing_registration_nobody_watches_adds_no_event_to_the_history(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS)]).await;
    let failing = register(&app, &receiver.url("/down"), &["customer.status_changed"], None).await;
    let failing_id = failing["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/down", 1, WAIT).await;
    receiver.respond("/down", Response::Status(500));
    for _ in 0..10 {
        status_change_as(&app, &app.tenant).await;
    }
    app.drain_jobs().await;
    // Ten events, each failing once: ten consecutive failures, the mark of `webhook.failing`.
    receiver.wait_for_path("/down", 11, WAIT).await;
    let audit_path = format!("/api/audit/events?action=webhook.failing&resourceId={failing_id}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let record = loop {
        app.drain_jobs().await;
        let audit = app.get(&audit_path).await;
        if audit.body["totalItems"] == 1 {
            break audit.body["data"][0].clone();
        }
        assert!(std::time::Instant::now() < deadline, "no webhook.failing record: {}", audit.body);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(record["detail"]["eventId"].is_null(), "{record}");
    let events = app.get("/api/webhook-events?type=webhook.failing").await;
    events.expect(200);
    assert_eq!(events.body["items"], json!([]), "{}", events.body);
    let all = app.get("/api/webhook-events?limit=100").await;
    let types: Vec<&str> =
        all.body["items"].as_array().map(|i| i.iter().filter_map(|e| e["type"].as_str()).collect()).unwrap_or_default();
    assert!(types.iter().all(|t| *t == "webhook.test" || *t == "customer.status_changed"), "{types:?}");
}

async fn failing_and_suspension_are_told_to_the_other_registrations(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS)]).await;
    let health = ["webhook.failing", "webhook.suspended"];
    let watcher = register(&app, &receiver.url("/watch"), &health, None).await;
    // The failing registration subscribes to its own health too: it must never hear of it.
    let failing = register(
        &app,
        &receiver.url("/down"),
        &["customer.status_changed", "webhook.failing", "webhook.suspended"],
        None,
    )
    .await;
    let failing_id = failing["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/watch", 1, WAIT).await;
    receiver.wait_for_path("/down", 1, WAIT).await;
    receiver.respond("/down", Response::Status(500));

    // One event at a time: eleven attempts park the first delivery, the second takes the run of
    // failures on to twenty. After each failed attempt the watcher has heard exactly what is due.
    status_change_as(&app, &app.tenant).await;
    app.drain_jobs().await;
    for failures in 1..=20usize {
        receiver.wait_for_path("/down", 1 + failures, WAIT).await;
        let due = 1 + usize::from(failures >= 10) + usize::from(failures >= 20);
        receiver.wait_for_path("/watch", due, WAIT).await;
        assert_eq!(receiver.requests_to("/watch").len(), due, "after {failures} failed attempts");
        if failures == 11 {
            // The first delivery is parked now: a second event carries on the run.
            status_change_as(&app, &app.tenant).await;
            app.drain_jobs().await;
        } else if failures < 20 {
            app.clock.advance_millis(15_000);
            app.drain_jobs().await;
        }
    }
    let watched = receiver.requests_to("/watch");
    assert_eq!(types(&watched), vec!["webhook.test", "webhook.failing", "webhook.suspended"]);
    let secret = watcher["secret"].as_str().expect("secret");
    for (request, status, count) in [(&watched[1], "ACTIVE", 10), (&watched[2], "SUSPENDED", 20)] {
        assert_hmac_delivery(&app, request, secret);
        let body = request.json();
        assert_eq!(body["resource"], json!({ "type": "webhook", "id": failing_id }));
        assert_eq!(body["data"]["id"], failing_id.as_str(), "data is the registration");
        assert_eq!(body["data"]["url"], receiver.url("/down"));
        assert_eq!(body["data"]["status"], status);
        assert_eq!(body["data"]["consecutiveFailures"], count);
        assert!(body["data"].get("secret").is_none(), "never the secret: {body}");
    }
    let down = receiver.requests_to("/down");
    assert!(
        types(&down).iter().all(|t| t == "webhook.test" || t == "customer.status_changed"),
        "the failing registration never hears of its own health: {:?}",
        types(&down)
    );
    let registration = app.get(&format!("/api/webhooks/{failing_id}")).await;
    assert_eq!(registration.body["status"], "SUSPENDED");
    app.clock.advance_millis(15_000);
    app.drain_jobs().await;
    assert_eq!(receiver.requests_to("/down").len(), 21, "no attempt while SUSPENDED");

    // The history shows each event once, delivered to the watcher alone.
    for event_type in health {
        let events = app.get(&format!("/api/webhook-events?type={event_type}")).await;
        events.expect(200);
        let items = events.body["items"].as_array().expect("items");
        assert_eq!(items.len(), 1, "{event_type}: {}", events.body);
        let deliveries = items[0]["deliveries"].as_array().expect("deliveries");
        assert_eq!(deliveries.len(), 1, "{event_type}");
        assert_eq!(deliveries[0]["webhookId"], watcher["id"]);
        assert_eq!(deliveries[0]["status"], "DELIVERED");
        // And a WORKER audit record of the registration.
        let audit = app.get(&format!("/api/audit/events?action={event_type}&resourceId={failing_id}")).await;
        audit.expect(200);
        assert_eq!(audit.body["totalItems"], 1, "{event_type}: {}", audit.body);
        let record = &audit.body["data"][0];
        assert_eq!(record["source"], "WORKER", "{record}");
        assert_eq!(record["category"], "WEBHOOKS", "{record}");
        assert_eq!(record["resourceType"], "webhook", "{record}");
    }

    // Back to ACTIVE by way of INACTIVE: the suspension is cleared all the same (the count
    // reset), so the next failure does not suspend it again.
    let path = format!("/api/webhooks/{failing_id}");
    let off = app.patch(&path, &json!({ "status": "INACTIVE" })).await;
    off.expect(200);
    assert_eq!(off.body["consecutiveFailures"], 20);
    let on = app.patch(&path, &json!({ "status": "ACTIVE" })).await;
    on.expect(200);
    assert_eq!((on.body["status"].clone(), on.body["consecutiveFailures"].clone()), (json!("ACTIVE"), json!(0)));
    let before = receiver.requests_to("/down").len();
    status_change_as(&app, &app.tenant).await;
    app.drain_jobs().await;
    receiver.wait_for_path("/down", before + 1, WAIT).await;
    let deadline = Instant::now() + WAIT;
    let after = loop {
        let after = app.get(&path).await;
        if after.body["consecutiveFailures"].as_u64().unwrap_or(0) > 0 || Instant::now() > deadline {
            break after;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(after.body["consecutiveFailures"].as_u64().unwrap_or(0) > 0, "the failure counted: {}", after.body);
    assert_eq!(after.body["status"], "ACTIVE", "one failure after the reset: {}", after.body);
}

/// An app that may reach two receivers (two destinations), with `extra` settings.
async fn app_with_two_receivers(backend: Backend, extra: &[(&str, &str)]) -> (TestApp, Receiver, Receiver) {
    let (first, second) = (Receiver::start().await, Receiver::start().await);
    let dir = std::env::temp_dir().join(format!("tokenops-webhook-ca-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("CA directory");
    let ca = dir.join("both.pem");
    std::fs::write(&ca, format!("{}{}", first.ca_pem(), second.ca_pem())).expect("CA file");
    let mut settings = BTreeMap::from([
        ("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), ALLOW_CIDRS.to_owned()),
        ("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca.display().to_string()),
    ]);
    for (name, value) in extra {
        settings.insert((*name).to_owned(), (*value).to_owned());
    }
    (TestApp::spawn_with(backend, settings).await, first, second)
}

async fn a_held_destination_delays_no_other_organisation(backend: Backend) {
    // Four workers and two attempts per destination: without the bound, organisation A's six
    // held deliveries would take every worker until the five-second read timeout.
    let (app, slow, fast) = app_with_two_receivers(
        backend,
        &[
            ("TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION", "2"),
            ("TOKENOPS_WORKER_CONCURRENCY", "4"),
            ("TOKENOPS_WORKER_POLL_MS", "100"),
            ("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS),
        ],
    )
    .await;
    let a = app.tenant.clone();
    let b = app.new_tenant();
    let created = app
        .post_as(&a, "/api/webhooks", &json!({ "url": slow.url("/held"), "eventTypes": ["customer.status_changed"] }))
        .await;
    created.expect(201);
    app.post_as(&b, "/api/webhooks", &json!({ "url": fast.url("/b"), "eventTypes": ["customer.status_changed"] }))
        .await
        .expect(201);
    app.drain_jobs().await;
    slow.wait_for_path("/held", 1, WAIT).await;
    fast.wait_for_path("/b", 1, WAIT).await;

    slow.respond("/held", Response::Hold);
    for _ in 0..6 {
        status_change_as(&app, &a).await;
    }
    let shutdown = CancellationToken::new();
    let workers = tokio::spawn(app.app.jobs.clone().run(shutdown.clone()));
    // Two attempts reach the held destination; the other four go back to the queue, due a
    // second or so later on the manual clock, which does not move meanwhile.
    slow.wait_for_path("/held", 3, WAIT).await;

    let began = Instant::now();
    status_change_as(&app, &b).await;
    let got = fast.wait_for_path("/b", 2, Duration::from_secs(3)).await;
    let took = began.elapsed();
    assert_eq!(got[1].json()["type"], "customer.status_changed");
    assert_eq!(slow.requests_to("/held").len(), 3, "never more than two attempts in flight at one destination");
    assert_eq!(slow.answered(), 1, "A's two attempts are still held");
    eprintln!("organisation B's delivery took {took:?} while A's destination held two attempts");

    // Released, A's deliveries all go out, each at its first attempt: being put back is not a
    // failed attempt.
    slow.release("/held");
    let deadline = Instant::now() + WAIT;
    loop {
        let delivered = app.get_as(&a, "/api/webhook-events?type=customer.status_changed&status=DELIVERED").await;
        let count = delivered.body["items"].as_array().map_or(0, Vec::len);
        if count == 6 {
            break;
        }
        assert!(Instant::now() < deadline, "A's deliveries: {}", delivered.body);
        app.clock.advance_millis(2_000);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    workers.await.expect("workers");
    let events = app.get_as(&a, "/api/webhook-events?type=customer.status_changed").await;
    for event in events.body["items"].as_array().expect("items") {
        let delivery = &event["deliveries"][0];
        assert_eq!((delivery["status"].clone(), delivery["attempts"].clone()), (json!("DELIVERED"), json!(1)));
    }
    assert_eq!(slow.requests_to("/held").len(), 7, "each once, and the test delivery");
}

/// The `kid` of a compact JWS's header.
/// Part `index` of a compact JWS (0 the header, 1 the claims), as JSON.
fn jws_part(token: &str, index: usize) -> Value {
    let part = token.split('.').nth(index).expect("a JWS part");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("JSON")
}

fn kid_of(token: &str) -> String {
    jws_part(token, 0)["kid"].as_str().expect("kid").to_owned()
}

async fn jwks(app: &TestApp) -> Value {
    let reply = Reply::read(app.raw(Method::GET, "/.well-known/webhook-jwks.json").send().await.expect("jwks")).await;
    reply.expect(200);
    reply.body
}

fn kids(jwks: &Value) -> Vec<String> {
    jwks["keys"].as_array().expect("keys").iter().map(|k| k["kid"].as_str().expect("kid").to_owned()).collect()
}

/// A token of the app's organisation at the clock's time (the clock moves by days here).
fn refresh_token(app: &mut TestApp) {
    let claims = app.issuer.claims(&app.clock, &app.tenant.subject, Some(app.tenant.id), 3_600);
    app.tenant.token = app.issuer.sign(&claims);
}

async fn rotation_job(app: &TestApp) {
    app.app.jobs.schedule_periodic("webhooks.rotate_key").await.expect("schedule");
    app.drain_jobs().await;
}

#[track_caller]
fn verify(app: &TestApp, request: &ReceivedRequest, jwks: &Value, id: &str, url: &str) -> Result<(), String> {
    let token = request.header("x-jws-signature").expect("X-JWS-Signature");
    let timestamp: i64 = request.header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    let expect = JwsExpectations {
        issuer: &app.base_url,
        registration_id: id,
        url,
        timestamp,
        now: now_secs(app),
        body: &request.body,
    };
    verify_jws(token, jwks, &expect).map(|_| ()).map_err(|e| e.to_string())
}

/// The spec has no rotation for JWS_ES256, so a receiver may pin the key: without an age set by
/// the operator, the key a year on is the first one.
async fn the_jws_key_is_never_rotated_unless_the_operator_sets_an_age(backend: Backend) {
    const DAY_MS: i64 = 24 * 3_600_000;
    let (mut app, receiver) = app_with_receiver(backend, &[("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS)]).await;
    let url = receiver.url("/jws");
    register(&app, &url, &["customer.status_changed"], Some("JWS_ES256")).await;
    app.drain_jobs().await;
    let first = receiver.wait_for_path("/jws", 1, WAIT).await.remove(0);
    let kid = kid_of(first.header("x-jws-signature").expect("JWS"));
    app.clock.advance_millis(400 * DAY_MS);
    refresh_token(&mut app);
    rotation_job(&app).await;
    assert_eq!(kids(&jwks(&app).await), vec![kid]);
}

async fn the_jws_key_rotates_through_the_published_jwks(backend: Backend) {
    const DAY_MS: i64 = 24 * 3_600_000;
    let (mut app, receiver) = app_with_receiver(
        backend,
        &[("TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS", "30"), ("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS)],
    )
    .await;
    let url = receiver.url("/jws");
    let created = register(&app, &url, &["customer.status_changed"], Some("JWS_ES256")).await;
    let id = created["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    let first = receiver.wait_for_path("/jws", 1, WAIT).await.remove(0);
    let old_kid = kid_of(first.header("x-jws-signature").expect("JWS"));
    assert_eq!(kids(&jwks(&app).await), vec![old_kid.clone()]);
    // The claim spelt as the spec's claims table spells it.
    assert_eq!(jws_part(first.header("x-jws-signature").expect("JWS"), 1)["body_hash_alg"], "SHA-256");

    // Younger than the rotation age: the job changes nothing.
    app.clock.advance_millis(29 * DAY_MS);
    rotation_job(&app).await;
    assert_eq!(kids(&jwks(&app).await), vec![old_kid.clone()]);

    // A delivery signed just before the key reaches its age...
    app.clock.advance_millis(DAY_MS - 20_000);
    refresh_token(&mut app);
    status_change_as(&app, &app.tenant).await;
    app.drain_jobs().await;
    let before = receiver.wait_for_path("/jws", 2, WAIT).await.remove(1);
    assert_eq!(kid_of(before.header("x-jws-signature").expect("JWS")), old_kid);

    // ...then the rotation: a new key signs, both are published, newest first.
    app.clock.advance_millis(30_000);
    rotation_job(&app).await;
    let both = jwks(&app).await;
    let published = kids(&both);
    assert_eq!(published.len(), 2, "{both}");
    let new_kid = published[0].clone();
    assert_ne!(new_kid, old_kid);
    assert_eq!(published[1], old_kid, "the old key stays published");
    verify(&app, &before, &both, &id, &url).expect("a signature made before the rotation still verifies");

    status_change_as(&app, &app.tenant).await;
    app.drain_jobs().await;
    let after = receiver.wait_for_path("/jws", 3, WAIT).await.remove(2);
    assert_eq!(kid_of(after.header("x-jws-signature").expect("JWS")), new_kid, "signed with the new key");
    verify(&app, &after, &both, &id, &url).expect("the new key's signature verifies");
    let audit = app.get(&format!("/api/audit/events?action=webhook.signing_key.rotate&resourceId={new_kid}")).await;
    audit.expect(200);
    // A platform record, outside any organisation's log.
    assert_eq!(audit.body["totalItems"], 0, "{}", audit.body);

    // Past the overlap the old key is withdrawn (and the job deletes it).
    app.clock.advance_millis(10 * 60_000 + 1_000);
    refresh_token(&mut app);
    assert_eq!(kids(&jwks(&app).await), vec![new_kid.clone()]);
    rotation_job(&app).await;
    assert_eq!(kids(&jwks(&app).await), vec![new_kid.clone()]);
    status_change_as(&app, &app.tenant).await;
    app.drain_jobs().await;
    let later = receiver.wait_for_path("/jws", 4, WAIT).await.remove(3);
    assert_eq!(kid_of(later.header("x-jws-signature").expect("JWS")), new_kid);
    assert_eq!(app.db.count("webhook_signing_keys", "true").await, 1, "the withdrawn key is deleted");
}

/// What the delivery rules make of the answers one delivery's attempts got, in order: the
/// attempt it settled at and whether it was delivered; `None` while it should still be queued.
pub(crate) fn settles_at(answers: &[Response]) -> Option<(usize, bool)> {
    for (i, answer) in answers.iter().enumerate() {
        let attempt = i + 1;
        match answer {
            Response::Status(200..=299) => return Some((attempt, true)),
            // Slow, but within the five-second read timeout.
            Response::Delay(d) if *d < Duration::from_secs(5) => return Some((attempt, true)),
            // Other 4xx park after two attempts.
            Response::Status(status)
                if (400..500).contains(status) && *status != 408 && *status != 429 && attempt >= 2 =>
            {
                return Some((attempt, false));
            }
            _ => {}
        }
        if attempt >= 11 {
            return Some((attempt, false));
        }
    }
    None
}

/// Checks that `delivery`, as the service lists it, settled as the delivery rules make of
/// `answers` (its attempts' answers, in order): at its last attempt, with that attempt count and
/// the status it calls for. Whether it was delivered (else parked); `what` names it on failure.
#[track_caller]
pub(crate) fn assert_settled_by_the_rules(delivery: &Value, answers: &[Response], what: &str) -> bool {
    let (at, ok) = settles_at(answers).unwrap_or_else(|| panic!("{what} should still be queued: {answers:?}"));
    assert_eq!(at, answers.len(), "{what}: no attempt after it settled ({answers:?})");
    assert_eq!(delivery["attempts"], at, "{what}: {answers:?}");
    let status = if ok { "DELIVERED" } else { "PARKED" };
    assert_eq!(delivery["status"], status, "{what}: {answers:?}");
    ok
}

async fn under_chaos_every_delivery_settles_by_the_rules(backend: Backend) {
    const EVENTS: usize = 24;
    // A lease far longer than the manual clock moves while an attempt is in flight: the clock
    // leaps 15 s at a time here, and a lease it passed would hand the job to a second worker.
    let (mut app, receiver) = app_with_receiver(
        backend,
        &[
            ("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS),
            ("TOKENOPS_WORKER_CONCURRENCY", "16"),
            ("TOKENOPS_WORKER_POLL_MS", "100"),
            ("TOKENOPS_JOB_LEASE_MS", "3600000"),
        ],
    )
    .await;
    let created = register(&app, &receiver.url("/chaos"), &["customer.status_changed"], None).await;
    let id = created["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/chaos", 1, WAIT).await;
    // A failed run's seed (printed below) replays its answers: TOKENOPS_TEST_CHAOS_SEED.
    let seed = std::env::var("TOKENOPS_TEST_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::try_from(Uuid::now_v7().as_u128() & u128::from(u64::MAX)).unwrap_or(1));
    eprintln!("chaos seed {seed}");
    receiver.respond("/chaos", Response::Chaos(seed));
    for _ in 0..EVENTS {
        status_change_as(&app, &app.tenant).await;
    }
    let shutdown = CancellationToken::new();
    let workers = tokio::spawn(app.app.jobs.clone().run(shutdown.clone()));
    let began = Instant::now();
    // Generous: an attempt that times out takes its five real seconds, and a loaded CI machine
    // (the whole suite beside it) has taken a round of this loop up to four seconds.
    let deadline = began + Duration::from_secs(300);
    let events = loop {
        let page = app.get("/api/webhook-events?type=customer.status_changed&limit=100").await;
        page.expect(200);
        let items = page.body["items"].as_array().expect("items").clone();
        let settled = items.len() == EVENTS
            && items.iter().all(|e| {
                e["deliveries"]
                    .as_array()
                    .is_some_and(|d| d.len() == 1 && (d[0]["status"] == "DELIVERED" || d[0]["status"] == "PARKED"))
            });
        if settled {
            break items;
        }
        assert!(Instant::now() < deadline, "not settled within 300 s (seed {seed}): {}", page.body);
        // Seven answers in ten fail, so twenty failures in a row happen in a few runs in a
        // hundred: the registration is SUSPENDED, by the rules, and its deliveries wait. The
        // operator's answer, setting it ACTIVE, sends them on.
        let registration = app.get(&format!("/api/webhooks/{id}")).await;
        if registration.body["status"] == "SUSPENDED" {
            app.patch(&format!("/api/webhooks/{id}"), &json!({ "status": "ACTIVE" })).await.expect(200);
        }
        // To the next retry that is due (at most 15 s: past any retry, 12 s cap + 20 %), and at
        // least 2 s (past any attempt put back for a slot), never leaping far beyond what is
        // waiting: a slow run must not move the manual clock past the jobs' one-hour lease,
        // whose real-time heartbeat is far slower than the manual clock. A slow run may still
        // pass the access token's hour, so the token follows the clock.
        let now = app.clock.now();
        let next_retry = items
            .iter()
            .flat_map(|e| e["deliveries"].as_array().cloned().unwrap_or_default())
            .filter_map(|d| d["nextRetryAt"].as_str().map(|t| format!("{}Z", t.replace(' ', "T"))))
            .filter_map(|t| tokenops_domain::Timestamp::parse_iso8601(&t).ok())
            .filter(|due| *due > now)
            .min();
        app.clock.advance_millis(next_retry.map_or(2_000, |due| now.millis_until(due) + 1).clamp(2_000, 15_000));
        refresh_token(&mut app);
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    shutdown.cancel();
    workers.await.expect("workers");

    let mut by_event: HashMap<String, Vec<ReceivedRequest>> = HashMap::new();
    for request in receiver.requests_to("/chaos").into_iter().skip(1) {
        by_event.entry(request.header("webhook-event-id").expect("event id").to_owned()).or_default().push(request);
    }
    let (mut delivered, mut parked) = (0, 0);
    for event in &events {
        let event_id = event["id"].as_str().expect("id");
        let delivery = &event["deliveries"][0];
        assert_eq!(delivery["webhookId"], id.as_str());
        let mut requests = by_event.remove(event_id).unwrap_or_default();
        requests.sort_by_key(|r| r.header("webhook-delivery-attempt").and_then(|a| a.parse::<usize>().ok()));
        let numbers: Vec<usize> = requests
            .iter()
            .map(|r| r.header("webhook-delivery-attempt").and_then(|a| a.parse().ok()).expect("n"))
            .collect();
        assert_eq!(numbers, (1..=requests.len()).collect::<Vec<_>>(), "each attempt once, none lost ({event_id})");
        let first = requests[0].body.clone();
        assert!(requests.iter().all(|r| r.body == first), "byte-identical bodies ({event_id})");
        let answers: Vec<Response> = requests.iter().map(|r| r.answer.clone()).collect();
        if assert_settled_by_the_rules(delivery, &answers, &format!("{event_id} (seed {seed})")) {
            delivered += 1
        } else {
            parked += 1
        }
    }
    assert!(by_event.is_empty(), "requests for no event: {:?}", by_event.keys());
    eprintln!(
        "chaos: {EVENTS} events, {} attempts, {delivered} delivered, {parked} parked, in {:?}",
        receiver.requests_to("/chaos").len() - 1,
        began.elapsed()
    );
}
