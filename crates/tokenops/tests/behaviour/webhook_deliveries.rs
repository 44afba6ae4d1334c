//! Deliveries, history and replay over HTTP with a real HTTPS receiver (spec: the Webhook
//! delivery and registration state tables; Delivery behaviour 1–3; Webhooks and delivery
//! history, replay rules 1–4; the Webhooks error rows; Limits: replay budget; supplement §7),
//! on both stores. Retry timing follows the manual clock (`TOKENOPS_WEBHOOK_RETRY_BASE_MS` is
//! 100 ms here, so the one-hour cap is 12 s); events come from customers changing status.

use reqwest::Method;
use serde_json::{Value, json};
use tokenops_app::clock::Clock;
use tokenops_domain::event::{Event, ResourceRef};
use tokenops_testkit::webhook_receiver::{ReceivedRequest, Receiver, Response};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::{key, write_in_flight};
use crate::webhooks::{WAIT, app_with_receiver, assert_hmac_delivery, assert_spaced, assert_status, register};

const RETRY_BASE_MS: &str = "100";

async fn app(backend: Backend, extra: &[(&str, &str)]) -> (TestApp, Receiver) {
    let mut settings = vec![("TOKENOPS_WEBHOOK_RETRY_BASE_MS", RETRY_BASE_MS)];
    settings.extend_from_slice(extra);
    app_with_receiver(backend, &settings).await
}

/// Registers `path` for customer.status_changed and lets its webhook.test delivery go out
/// (answered 200 whatever the path is set to later). Returns (id, secret).
async fn subscribe(app: &TestApp, receiver: &Receiver, path: &str) -> (String, String) {
    let created = register(app, &receiver.url(path), &["customer.status_changed"], None).await;
    app.drain_jobs().await;
    receiver.wait_for_path(path, 1, WAIT).await;
    (created["id"].as_str().expect("id").to_owned(), created["secret"].as_str().expect("secret").to_owned())
}

/// Makes one customer.status_changed event (a new customer set INACTIVE) and dispatches it;
/// returns the event's id.
async fn status_change(app: &TestApp) -> String {
    let id = undispatched_status_change(app).await;
    app.drain_jobs().await;
    id
}

/// As `status_change`, leaving the event to its dispatcher (no job run).
async fn undispatched_status_change(app: &TestApp) -> String {
    let reference = format!("c-{}", Uuid::now_v7().simple());
    app.post("/api/customers", &json!({ "customerRef": reference })).await.expect(201);
    app.patch(&format!("/api/customers/{reference}"), &json!({ "status": "INACTIVE" })).await.expect(200);
    let events = app.get("/api/webhook-events?type=customer.status_changed&limit=100").await;
    events.expect(200);
    let items = events.body["items"].as_array().expect("items");
    let found = items.iter().find(|e| e["resource"]["id"] == reference.as_str()).expect("the customer's event");
    found["id"].as_str().expect("the event").to_owned()
}

async fn event(app: &TestApp, id: &str) -> Value {
    let reply = app.get(&format!("/api/webhook-events/{id}")).await;
    reply.expect(200);
    reply.body
}

async fn deliveries(app: &TestApp, id: &str) -> Vec<Value> {
    event(app, id).await["deliveries"].as_array().expect("deliveries").clone()
}

async fn registration(app: &TestApp, id: &str) -> Value {
    let reply = app.get(&format!("/api/webhooks/{id}")).await;
    reply.expect(200);
    reply.body
}

/// Moves the clock past any retry (12 s cap, +20 %) and runs what fell due.
async fn next_round(app: &TestApp) {
    app.clock.advance_millis(15_000);
    app.drain_jobs().await;
}

async fn redeliver(app: &TestApp, event_id: &str, body: Option<&Value>) -> Reply {
    let mut request = app
        .request(Method::POST, &format!("/api/webhook-events/{event_id}/redeliver"))
        .header("Idempotency-Key", key());
    if let Some(body) = body {
        request = request.json(body);
    }
    Reply::read(request.send().await.expect("redeliver")).await
}

fn bodies(requests: &[ReceivedRequest]) -> Vec<Vec<u8>> {
    requests.iter().map(|r| r.body.to_vec()).collect()
}

backends!(
    a_subscribed_event_is_delivered_signed_and_shown_in_the_history,
    a_failed_attempt_is_retried_on_the_clock_with_identical_bytes,
    a_client_error_parks_after_two_attempts_and_others_after_eleven,
    twenty_failures_suspend_and_activation_sends_what_waited,
    activation_sends_each_waiting_attempt_once_whether_its_retry_was_due_or_not,
    deletion_cancels_queued_deliveries,
    an_event_goes_to_the_subscriptions_of_the_moment_it_happened,
    a_replay_racing_the_deletion_of_its_destination_leaves_nothing_queued,
    replay_is_strict_for_one_event_and_lenient_for_a_filter,
    a_truncated_filtered_replay_continues_from_its_cursor,
    the_replay_budget_refuses_with_nothing_queued,
    concurrent_replays_take_turns_within_the_budget_and_the_filtered_ones_skip,
    a_delivery_whose_job_dies_is_parked_and_can_be_replayed,
    an_event_waiting_for_its_dispatch_outlives_many_subscription_changes
);

async fn a_subscribed_event_is_delivered_signed_and_shown_in_the_history(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    // An event before any subscription is never backfilled (Delivery behaviour 3).
    let before = status_change(&app).await;
    let (id, secret) = subscribe(&app, &receiver, "/d").await;
    let inactive = register(&app, &receiver.url("/off"), &["customer.status_changed"], None).await;
    let off_id = inactive["id"].as_str().expect("id");
    app.drain_jobs().await;
    receiver.wait_for_path("/off", 1, WAIT).await;
    app.patch(&format!("/api/webhooks/{off_id}"), &json!({ "status": "INACTIVE" })).await.expect(200);
    let other = register(&app, &receiver.url("/other"), &["account.provisioned"], None).await;
    app.drain_jobs().await;
    receiver.wait_for_path("/other", 1, WAIT).await;

    let event_id = status_change(&app).await;
    let got = receiver.wait_for_path("/d", 2, WAIT).await;
    let request = &got[1];
    assert_hmac_delivery(&app, request, &secret);
    let body = request.json();
    assert_eq!(body["id"], event_id.as_str());
    assert_eq!(body["type"], "customer.status_changed");
    assert_spaced(&body["occurredAt"]);
    assert_eq!(body["resource"]["type"], "customer");
    assert_eq!(body["data"]["status"], "INACTIVE", "data is the customer as the API returns it");
    assert!(body.get("idempotencyKey").is_some(), "the originating request's key");
    assert_eq!(request.header("webhook-delivery-attempt"), Some("1"));

    let history = deliveries(&app, &event_id).await;
    assert_eq!(history.len(), 1, "only the ACTIVE subscriber: {history:?}");
    let delivery = &history[0];
    assert_eq!(delivery["webhookId"], id.as_str());
    assert_eq!(delivery["status"], "DELIVERED");
    assert_eq!((delivery["attempts"].clone(), delivery["generation"].clone()), (json!(1), json!(1)));
    assert_spaced(&delivery["createdAt"]);
    assert!(delivery["nextRetryAt"].is_null() && delivery["failureClass"].is_null() && delivery["parkedAt"].is_null());
    assert!(
        receiver.requests_to("/off").len() == 1 && receiver.requests_to("/other").len() == 1,
        "no delivery to an INACTIVE or unsubscribed registration"
    );
    assert_eq!(deliveries(&app, &before).await, Vec::<Value>::new(), "[] when none");

    // The history's filters.
    let by_hook = app.get(&format!("/api/webhook-events?webhookId={id}&type=customer.status_changed")).await;
    by_hook.expect(200);
    let ids: Vec<&Value> = by_hook.body["items"].as_array().expect("items").iter().map(|e| &e["id"]).collect();
    assert_eq!(ids, vec![&json!(event_id)]);
    let delivered = app.get("/api/webhook-events?status=DELIVERED&type=customer.status_changed").await;
    assert_eq!(delivered.body["items"].as_array().expect("items").len(), 1);
    let parked = app.get("/api/webhook-events?status=PARKED").await;
    assert_eq!(parked.body["items"], json!([]));
    assert_status(&app.get("/api/webhook-events?status=LOST").await, 400, "unknown status");
    assert_status(&app.get("/api/webhook-events?webhookId=nope").await, 400, "webhookId not a UUID");
    let page = app.get(&format!("/api/webhook-events?limit=1&webhookId={id}")).await;
    let cursor = page.body["nextCursor"].as_str().expect("more").to_owned();
    assert_status(
        &app.get(&format!("/api/webhook-events?limit=1&cursor={cursor}")).await,
        400,
        "a cursor with other filters",
    );
    assert_status(&app.get(&format!("/api/webhook-events/{}", Uuid::now_v7())).await, 404, "no such event");
    let _ = other;
}

async fn a_failed_attempt_is_retried_on_the_clock_with_identical_bytes(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (_, secret) = subscribe(&app, &receiver, "/r").await;
    receiver.respond("/r", Response::Status(503));
    let event_id = status_change(&app).await;
    receiver.wait_for_path("/r", 2, WAIT).await;
    let first = deliveries(&app, &event_id).await.remove(0);
    assert_eq!(first["status"], "RETRY_PENDING");
    assert_eq!(first["attempts"], 1);
    assert_eq!(first["failureClass"], "REJECTED");
    assert_spaced(&first["nextRetryAt"]);
    // Not before nextRetryAt: a drain now sends nothing.
    app.drain_jobs().await;
    assert_eq!(receiver.requests_to("/r").len(), 2);

    receiver.respond("/r", Response::Status(200));
    next_round(&app).await;
    let got = receiver.wait_for_path("/r", 3, WAIT).await;
    assert_eq!(got[2].header("webhook-delivery-attempt"), Some("2"));
    assert_eq!(bodies(&got[1..]), vec![got[1].body.to_vec(); 2], "byte-identical across attempts");
    assert_hmac_delivery(&app, &got[2], &secret);
    let delivered = deliveries(&app, &event_id).await.remove(0);
    assert_eq!(delivered["status"], "DELIVERED");
    assert_eq!(delivered["attempts"], 2);
    assert!(delivered["nextRetryAt"].is_null());
    // Delivered in the end: the earlier attempt's failure no longer describes it.
    assert!(delivered["failureClass"].is_null() && delivered["failureReason"].is_null(), "{delivered}");
    assert_eq!(delivered["lastStatusCode"], 200);
}

async fn a_client_error_parks_after_two_attempts_and_others_after_eleven(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    subscribe(&app, &receiver, "/gone").await;
    subscribe(&app, &receiver, "/down").await;
    receiver.respond("/gone", Response::Status(410));
    receiver.respond("/down", Response::Status(500));
    let event_id = status_change(&app).await;
    next_round(&app).await;
    let gone = receiver.wait_for_path("/gone", 3, WAIT).await;
    assert_eq!(gone.len(), 3, "the test delivery and two attempts");
    let history = deliveries(&app, &event_id).await;
    let parked = history.iter().find(|d| d["status"] == "PARKED").expect("the 410 delivery parked");
    assert_eq!(parked["attempts"], 2);
    assert_eq!(parked["failureClass"], "REJECTED");
    assert!(parked["failureReason"].as_str().is_some_and(|r| !r.is_empty()));
    assert_spaced(&parked["parkedAt"]);
    assert!(parked["nextRetryAt"].is_null());

    for _ in 0..10 {
        next_round(&app).await;
    }
    let down = receiver.wait_for_path("/down", 12, WAIT).await;
    assert_eq!(down.len(), 12, "the test delivery and eleven attempts");
    assert_eq!(down[11].header("webhook-delivery-attempt"), Some("11"));
    let history = deliveries(&app, &event_id).await;
    assert!(history.iter().all(|d| d["status"] == "PARKED"), "{history:?}");
    assert!(history.iter().any(|d| d["attempts"] == 11));
    next_round(&app).await;
    assert_eq!(receiver.requests_to("/down").len(), 12, "nothing after parking");
}

async fn twenty_failures_suspend_and_activation_sends_what_waited(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (id, _) = subscribe(&app, &receiver, "/s").await;
    receiver.respond("/s", Response::Status(404));
    for _ in 0..10 {
        status_change(&app).await;
        next_round(&app).await;
    }
    receiver.wait_for_path("/s", 21, WAIT).await;
    let suspended = registration(&app, &id).await;
    assert_eq!(suspended["status"], "SUSPENDED", "after twenty consecutive failed attempts: {suspended}");
    assert_eq!(suspended["consecutiveFailures"], 20);

    // Events still make deliveries, which wait unattempted, and without a job: a suspended
    // destination takes no worker per event.
    receiver.respond("/s", Response::Status(200));
    let deliver_jobs = || app.db.count("jobs", "kind = 'webhook.deliver'");
    let jobs_before = deliver_jobs().await;
    let waiting = status_change(&app).await;
    next_round(&app).await;
    assert_eq!(receiver.requests_to("/s").len(), 21, "no attempt while SUSPENDED");
    let pending = deliveries(&app, &waiting).await.remove(0);
    assert_eq!((pending["status"].clone(), pending["attempts"].clone()), (json!("PENDING"), json!(0)));
    assert_eq!(deliver_jobs().await, jobs_before, "no delivery job while SUSPENDED");

    let resumed = app.patch(&format!("/api/webhooks/{id}"), &json!({ "status": "ACTIVE" })).await;
    resumed.expect(200);
    assert_eq!(resumed.body["status"], "ACTIVE");
    assert_eq!(resumed.body["consecutiveFailures"], 0);
    assert_eq!(deliver_jobs().await, jobs_before + 1, "the resumption queues what waited");
    app.drain_jobs().await;
    let got = receiver.wait_for_path("/s", 22, WAIT).await;
    assert_eq!(got[21].json()["id"], waiting.as_str());
    assert_eq!(deliveries(&app, &waiting).await[0]["status"], "DELIVERED");
}

/// Twenty events whose first attempts fail (500, retried) suspend the registration; returns
/// their event ids. Their retries are queued, not yet due on the clock.
async fn suspend_with_retries_queued(app: &TestApp, receiver: &Receiver, id: &str) -> Vec<String> {
    receiver.respond("/r", Response::Status(500));
    let before = receiver.requests_to("/r").len();
    let mut events = Vec::new();
    for _ in 0..20 {
        events.push(status_change(app).await);
    }
    receiver.wait_for_path("/r", before + 20, WAIT).await;
    assert_eq!(registration(app, id).await["status"], "SUSPENDED");
    events
}

/// The received requests of each event among `events`, by event id.
fn received_per_event(receiver: &Receiver, events: &[String]) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for request in receiver.requests_to("/r") {
        let id = request.json()["id"].as_str().unwrap_or_default().to_owned();
        if events.contains(&id) {
            *counts.entry(id).or_insert(0) += 1;
        }
    }
    counts
}

/// Setting a SUSPENDED registration ACTIVE queues the attempt of each delivery that waited,
/// and never a second job beside one still queued: no attempt goes out twice (the spec allows
/// repeats by retry, timeout and replay only), whether the retries had fallen due while it was
/// suspended or not.
async fn activation_sends_each_waiting_attempt_once_whether_its_retry_was_due_or_not(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (id, _) = subscribe(&app, &receiver, "/r").await;
    let live_jobs = || app.db.count("jobs", "kind = 'webhook.deliver' AND status IN ('queued', 'running')");
    let activate = async || {
        let resumed = app.patch(&format!("/api/webhooks/{id}"), &json!({ "status": "ACTIVE" })).await;
        resumed.expect(200);
        assert_eq!(resumed.body["status"], "ACTIVE");
    };

    // Activated before the retries fall due: each delivery keeps the one job it had.
    let first = suspend_with_retries_queued(&app, &receiver, &id).await;
    assert_eq!(live_jobs().await, 20, "one retry queued per delivery");
    receiver.respond("/r", Response::Status(200));
    activate().await;
    assert_eq!(live_jobs().await, 20, "no second job beside a queued one");
    next_round(&app).await;
    let counts = received_per_event(&receiver, &first);
    assert!(counts.values().all(|n| *n == 2), "each event twice: its failed attempt and its retry: {counts:?}");
    assert_eq!(counts.len(), 20);
    for event_id in &first {
        let delivery = deliveries(&app, event_id).await.remove(0);
        assert_eq!((delivery["status"].clone(), delivery["attempts"].clone()), (json!("DELIVERED"), json!(2)));
    }

    // Suspended again, and the retries fall due while it is: their jobs end without an
    // attempt, and the activation queues each attempt anew, once.
    let second = suspend_with_retries_queued(&app, &receiver, &id).await;
    receiver.respond("/r", Response::Status(200));
    next_round(&app).await;
    assert!(received_per_event(&receiver, &second).values().all(|n| *n == 1), "no attempt while SUSPENDED");
    assert_eq!(live_jobs().await, 0, "a suspended destination's deliveries wait without jobs");
    activate().await;
    assert_eq!(live_jobs().await, 20, "the activation queues what waited");
    next_round(&app).await;
    let counts = received_per_event(&receiver, &second);
    assert!(counts.values().all(|n| *n == 2), "{counts:?}");
    assert_eq!(counts.len(), 20);
}

async fn deletion_cancels_queued_deliveries(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (id, _) = subscribe(&app, &receiver, "/x").await;
    receiver.respond("/x", Response::Status(502));
    let event_id = status_change(&app).await;
    receiver.wait_for_path("/x", 2, WAIT).await;
    assert_eq!(deliveries(&app, &event_id).await[0]["status"], "RETRY_PENDING");
    let deleted = Reply::read(
        app.request(Method::DELETE, &format!("/api/webhooks/{id}"))
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .send()
            .await
            .expect("delete"),
    )
    .await;
    deleted.expect(204);
    let cancelled = deliveries(&app, &event_id).await.remove(0);
    assert_eq!(cancelled["status"], "CANCELLED");
    assert_eq!(cancelled["attempts"], 1, "the history stays");
    next_round(&app).await;
    assert_eq!(receiver.requests_to("/x").len(), 2, "nothing sent after deletion");
    // A deleted destination cannot be replayed to (404).
    assert_status(&redeliver(&app, &event_id, None).await, 404, "destination deleted");
}

/// An event goes to the registrations subscribed to its type when it happened, whatever
/// changed before its dispatch a moment later (spec, Delivery behaviour 3): none to one
/// subscribed, set ACTIVE or registered after it; one to a registration unsubscribed or set
/// INACTIVE after it, which waits for it as its queued deliveries do.
async fn an_event_goes_to_the_subscriptions_of_the_moment_it_happened(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (dropping, _) = subscribe(&app, &receiver, "/dropping").await;
    let (pausing, _) = subscribe(&app, &receiver, "/pausing").await;
    let (resuming, _) = subscribe(&app, &receiver, "/resuming").await;
    app.patch(&format!("/api/webhooks/{resuming}"), &json!({ "status": "INACTIVE" })).await.expect(200);
    let joining = register(&app, &receiver.url("/joining"), &["account.provisioned"], None).await;
    let joining = joining["id"].as_str().expect("id").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/joining", 1, WAIT).await;

    app.clock.advance_millis(1);
    let event_id = undispatched_status_change(&app).await;
    app.clock.advance_millis(1);
    let change = |id: &str, body: Value| {
        let (app, path) = (&app, format!("/api/webhooks/{id}"));
        async move {
            app.patch(&path, &body).await.expect(200);
        }
    };
    change(&dropping, json!({ "eventTypes": ["account.provisioned"] })).await;
    change(&pausing, json!({ "status": "INACTIVE" })).await;
    change(&resuming, json!({ "status": "ACTIVE" })).await;
    change(&joining, json!({ "eventTypes": ["customer.status_changed"] })).await;
    let late = register(&app, &receiver.url("/late"), &["customer.status_changed"], None).await;
    app.drain_jobs().await;

    let mut went_to: Vec<String> =
        deliveries(&app, &event_id).await.iter().map(|d| d["webhookId"].as_str().expect("id").to_owned()).collect();
    went_to.sort();
    let mut expected = vec![dropping.clone(), pausing.clone()];
    expected.sort();
    assert_eq!(went_to, expected, "late registered {}", late["id"]);
    receiver.wait_for_path("/dropping", 2, WAIT).await;
    for path in ["/resuming", "/joining", "/late"] {
        assert!(receiver.requests_to(path).len() <= 1, "{path} got the event: only its test");
    }
    // The INACTIVE one's delivery waits, unattempted, until it is ACTIVE again.
    let waiting = deliveries(&app, &event_id).await.into_iter().find(|d| d["webhookId"] == pausing.as_str());
    let waiting = waiting.expect("the paused registration's delivery");
    assert_eq!((waiting["status"].as_str(), waiting["attempts"].as_u64()), (Some("PENDING"), Some(0)), "{waiting}");
    change(&pausing, json!({ "status": "ACTIVE" })).await;
    app.drain_jobs().await;
    receiver.wait_for_path("/pausing", 2, WAIT).await;
}

/// A replay and the DELETE of its destination at the same instant: whichever order they take,
/// no delivery stays queued on the deleted registration and nothing more is sent to it. (The
/// DELETE cancels the deliveries it sees; one the replay commits after it looked is cancelled
/// by its own delivery job.)
async fn a_replay_racing_the_deletion_of_its_destination_leaves_nothing_queued(backend: Backend) {
    const ROUNDS: usize = 8;
    let (app, receiver) = app(backend, &[]).await;
    for round in 0..ROUNDS {
        let path = format!("/race{round}");
        let (id, _) = subscribe(&app, &receiver, &path).await;
        let event_id = status_change(&app).await;
        receiver.wait_for_path(&path, 2, WAIT).await;
        let (webhook, delete_key) = (format!("/api/webhooks/{id}"), key());
        let (deleted, replayed) = tokio::join!(
            app.write(Method::DELETE, &webhook, &delete_key, &Value::Null),
            redeliver(&app, &event_id, None)
        );
        deleted.expect(204);
        assert!(matches!(replayed.status, 202 | 404), "round {round}: {} {}", replayed.status, replayed.body);
        app.drain_jobs().await;
        for delivery in deliveries(&app, &event_id).await.iter().filter(|d| d["webhookId"] == id.as_str()) {
            assert!(
                matches!(delivery["status"].as_str(), Some("DELIVERED" | "CANCELLED")),
                "round {round}: replay {}: a delivery left on the deleted registration: {delivery}",
                replayed.status
            );
        }
        assert_eq!(receiver.requests_to(&path).len(), 2, "round {round}: nothing sent after the deletion");
    }
}

async fn replay_is_strict_for_one_event_and_lenient_for_a_filter(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (a, _) = subscribe(&app, &receiver, "/a").await;
    let (b, _) = subscribe(&app, &receiver, "/b").await;
    let delivered = status_change(&app).await;
    receiver.wait_for_path("/a", 2, WAIT).await;

    // Rule 1: to every destination that received it; generation 2, PENDING, 0 attempts.
    let replay_key = key();
    let path = format!("/api/webhook-events/{delivered}/redeliver");
    let replay = Reply::read(
        app.request(Method::POST, &path).header("Idempotency-Key", &replay_key).send().await.expect("post"),
    )
    .await;
    replay.expect(202);
    // The body is optional: sent as `{}` under the same key, it is the same request.
    let again = Reply::read(
        app.request(Method::POST, &path)
            .header("Idempotency-Key", &replay_key)
            .json(&json!({}))
            .send()
            .await
            .expect("post"),
    )
    .await;
    again.expect(202);
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "{}", again.body);
    assert_eq!(again.body, replay.body);
    assert_eq!(replay.header("location"), Some(format!("/api/webhook-events/{delivered}").as_str()));
    app.get(replay.header("location").unwrap_or_default()).await.expect(200);
    let queued = replay.body["queued"].as_array().expect("queued");
    assert_eq!(queued.len(), 2);
    for q in queued {
        assert_eq!(
            (q["generation"].clone(), q["status"].clone(), q["attempts"].clone()),
            (json!(2), json!("PENDING"), json!(0))
        );
        assert!(q["id"].is_string() && q["webhookId"].is_string());
        assert_spaced(&q["createdAt"]);
    }
    // Still queued: the same delivery is already being replayed (409), nothing else changes.
    assert_status(&redeliver(&app, &delivered, None).await, 409, "latest generation still queued");
    app.drain_jobs().await;
    receiver.wait_for_path("/a", 3, WAIT).await;
    let history = deliveries(&app, &delivered).await;
    assert_eq!(history.len(), 4);
    assert!(
        history.iter().filter(|d| d["generation"] == 1).all(|d| d["status"] == "DELIVERED" && d["attempts"] == 1),
        "originals unchanged"
    );
    assert!(history.iter().filter(|d| d["generation"] == 2).all(|d| d["status"] == "DELIVERED"));

    // Only the named destination.
    let only = redeliver(&app, &delivered, Some(&json!({ "webhookId": b }))).await;
    only.expect(202);
    assert_eq!(only.body["queued"].as_array().expect("queued").len(), 1);
    assert_eq!(only.body["queued"][0]["webhookId"], b.as_str());
    assert_eq!(only.body["queued"][0]["generation"], 3);
    app.drain_jobs().await;

    // 404s and 409s of the single replay.
    assert_status(&redeliver(&app, &Uuid::now_v7().to_string(), None).await, 404, "no such event");
    let no_delivery = redeliver(&app, &delivered, Some(&json!({ "webhookId": Uuid::now_v7() }))).await;
    assert_status(&no_delivery, 404, "no delivery to the named destination");
    app.patch(&format!("/api/webhooks/{a}"), &json!({ "status": "INACTIVE" })).await.expect(200);
    assert_status(&redeliver(&app, &delivered, None).await, 409, "destination INACTIVE");
    let no_key = Reply::read(
        app.request(Method::POST, &format!("/api/webhook-events/{delivered}/redeliver")).send().await.expect("post"),
    )
    .await;
    assert_status(&no_key, 400, "Idempotency-Key missing");
    let k = key();
    let path = format!("/api/webhook-events/{delivered}/redeliver");
    app.seed_claim("webhook_event.redeliver", &k, "POST", &path, &json!({})).await;
    let in_flight =
        Reply::read(app.request(Method::POST, &path).header("Idempotency-Key", &k).send().await.expect("post")).await;
    assert_status(&in_flight, 409, "key in flight");
    app.patch(&format!("/api/webhooks/{a}"), &json!({ "status": "ACTIVE" })).await.expect(200);

    // Rule 4: status PARKED within a window replays what ran out of attempts.
    receiver.respond("/a", Response::Status(400));
    receiver.respond("/b", Response::Status(500));
    // A window of its own: the earlier events happened at an earlier instant.
    app.clock.advance_millis(1_000);
    let from = app.clock.now().to_iso8601();
    let failed = status_change(&app).await;
    next_round(&app).await;
    let to = app.clock.now().plus_millis(1).to_iso8601();
    let states: Vec<Value> = deliveries(&app, &failed).await.iter().map(|d| d["status"].clone()).collect();
    assert!(states.contains(&json!("PARKED")) && states.contains(&json!("RETRY_PENDING")), "{states:?}");
    receiver.respond("/a", Response::Status(200));
    let filtered =
        app.post("/api/webhook-events/redeliver", &json!({ "status": "PARKED", "from": from, "to": to })).await;
    filtered.expect(202);
    assert_eq!(filtered.body["truncated"], false);
    let queued = filtered.body["queued"].as_array().expect("queued");
    assert_eq!(queued.len(), 1, "{}", filtered.body);
    assert_eq!(queued[0]["webhookId"], a.as_str());
    assert_eq!(queued[0]["generation"], 2);
    // Lenient: what is not replayable is listed with its reason.
    let all = app.post("/api/webhook-events/redeliver", &json!({ "from": from, "to": to })).await;
    all.expect(202);
    assert_eq!(all.header("location"), Some("/api/webhook-events"));
    app.get("/api/webhook-events").await.expect(200);
    let skipped = all.body["skipped"].as_array().expect("skipped");
    assert_eq!(all.body["queued"], json!([]), "{}", all.body);
    assert_eq!(skipped.len(), 2, "{}", all.body);
    assert!(skipped.iter().all(|s| s["eventId"] == failed.as_str() && s["reason"] == "LATEST_DELIVERY_QUEUED"));
    assert_status(&app.post("/api/webhook-events/redeliver", &json!({})).await, 400, "no filter");
    assert_status(
        &app.post("/api/webhook-events/redeliver", &json!({ "from": to, "to": from })).await,
        400,
        "from not before to",
    );
    let body = json!({ "type": "customer.status_changed" });
    let path = "/api/webhook-events/redeliver";
    let in_flight = write_in_flight(&app, "webhook_event.redeliver_filtered", Method::POST, path, &body).await;
    assert_status(&in_flight, 409, "filtered key in flight");
}

/// The filtered replay's examination bound (Limits).
const MAX_EXAMINED: i64 = 2_000;

/// Beyond the spec: a truncated filtered replay hands out `nextCursor`, and a call with it
/// continues after the last event examined. 2,000 newer events without any delivery (each one
/// examined, never replayable) stand before an older replayable one, which a loop restarting
/// from the newest event would never reach.
async fn a_truncated_filtered_replay_continues_from_its_cursor(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (webhook_id, _) = subscribe(&app, &receiver, "/k").await;
    let oldest = status_change(&app).await;
    receiver.wait_for_path("/k", 2, WAIT).await;
    assert_eq!(deliveries(&app, &oldest).await[0]["status"], "DELIVERED");
    app.clock.advance_millis(1_000);
    let start = app.clock.now();
    let mut tx = app.app.store.write().await.expect("begin");
    let mut newest = None;
    for i in 0..MAX_EXAMINED {
        let event = Event {
            id: Uuid::now_v7(),
            tenant_id: app.tenant.id,
            event_type: "customer.status_changed".into(),
            occurred_at: start.plus_millis(i),
            correlation_id: None,
            idempotency_key: None,
            resource: ResourceRef { kind: "customer".into(), id: format!("seeded-{i}") },
            data: json!({}),
            dispatched_at: Some(start),
        };
        tx.events().append(&event).await.expect("seed an event");
        newest = Some(event.id.to_string());
    }
    tx.commit().await.expect("commit the events");
    let newest = newest.expect("seeded");

    let path = "/api/webhook-events/redeliver";
    let filters = json!({ "type": "customer.status_changed" });
    let first = app.post(path, &filters).await;
    first.expect(202);
    assert_eq!((first.body["truncated"].clone(), first.body["queued"].clone()), (json!(true), json!([])));
    let skipped = first.body["skipped"].as_array().expect("skipped");
    assert_eq!(skipped.len(), 2_000);
    assert_eq!(skipped[0]["eventId"], newest.as_str(), "newest first");
    assert!(skipped.iter().all(|s| s["reason"] == "NO_DELIVERY"));
    let cursor = first.body["nextCursor"].as_str().expect("a cursor while truncated").to_owned();

    let next = app.post(path, &json!({ "type": "customer.status_changed", "cursor": cursor })).await;
    next.expect(202);
    assert_eq!(next.body["truncated"], false, "{}", next.body);
    assert!(next.body["nextCursor"].is_null(), "null once not truncated: {}", next.body);
    assert_eq!(next.body["skipped"], json!([]), "nothing examined twice");
    let queued = next.body["queued"].as_array().expect("queued");
    assert_eq!(queued.len(), 1, "{}", next.body);
    assert_eq!((queued[0]["webhookId"].clone(), queued[0]["generation"].clone()), (json!(webhook_id), json!(2)));
    assert!(deliveries(&app, &oldest).await.iter().any(|d| d["id"] == queued[0]["id"]), "the oldest event's replay");

    // Without a cursor, the newest event again.
    let again = app.post(path, &filters).await;
    again.expect(202);
    assert_eq!(again.body["truncated"], true);
    assert_eq!(again.body["skipped"][0]["eventId"], newest.as_str());

    // The cursor is bound to its filters and to this endpoint.
    let other_filters = json!({ "type": "customer.status_changed", "webhookId": webhook_id, "cursor": cursor });
    let refused = app.post(path, &other_filters).await;
    assert_status(&refused, 400, "a cursor with other filters");
    assert_eq!(refused.body["code"], "INVALID_CURSOR");
    let page = app.get("/api/webhook-events?type=customer.status_changed&limit=1").await;
    let list_cursor = page.body["nextCursor"].as_str().expect("more");
    let foreign = app.post(path, &json!({ "type": "customer.status_changed", "cursor": list_cursor })).await;
    assert_status(&foreign, 400, "the list's cursor");
    let other = app.new_tenant();
    let elsewhere = app
        .write_as(&other, Method::POST, path, &key(), &json!({ "type": "customer.status_changed", "cursor": cursor }))
        .await;
    assert_status(&elsewhere, 400, "another organisation's cursor");
}

async fn the_replay_budget_refuses_with_nothing_queued(backend: Backend) {
    let (app, receiver) = app(backend, &[("TOKENOPS_WEBHOOK_REPLAY_BUDGET", "3")]).await;
    subscribe(&app, &receiver, "/q").await;
    let first = status_change(&app).await;
    let second = status_change(&app).await;
    receiver.wait_for_path("/q", 3, WAIT).await;
    redeliver(&app, &first, None).await.expect(202);
    redeliver(&app, &second, None).await.expect(202);
    app.drain_jobs().await;
    let filtered = app.post("/api/webhook-events/redeliver", &json!({ "type": "customer.status_changed" })).await;
    assert_status(&filtered, 429, "two more would pass the budget of 3");
    assert!(
        filtered.body["message"].as_str().is_some_and(|m| m.contains('3') && m.contains("hour")),
        "{}",
        filtered.body
    );
    assert!(filtered.header("retry-after").is_none(), "no Retry-After");
    redeliver(&app, &first, None).await.expect(202);
    let same_key = key();
    let redeliver_second = || async {
        let path = format!("/api/webhook-events/{second}/redeliver");
        let request = app.request(Method::POST, &path).header("Idempotency-Key", &same_key);
        Reply::read(request.send().await.expect("redeliver")).await
    };
    let refused = redeliver_second().await;
    assert_status(&refused, 429, "the budget is spent");
    assert!(refused.header("retry-after").is_none());
    assert_eq!(deliveries(&app, &second).await.len(), 2, "nothing queued");
    // Nothing happened, so the key is not bound to the refusal: once the hour has passed the
    // same request, with the same key, is replayed.
    app.drain_jobs().await;
    app.clock.advance_millis(3_600 * 1_000 + 1);
    let later = redeliver_second().await;
    assert_eq!(later.status, 202, "the same key once the budget has room again: {}", later.body);
    assert_eq!(deliveries(&app, &second).await.len(), 3, "queued now");
}

/// Replays sent at once take turns per organisation: thirty single replays against a budget of
/// twenty-five queue twenty-five (the rest 429), and two filtered replays of the same deliveries
/// both answer 202, the second listing them as skipped (replay rule 2: lenient), never a 409.
async fn concurrent_replays_take_turns_within_the_budget_and_the_filtered_ones_skip(backend: Backend) {
    let (app, receiver) = app(backend, &[("TOKENOPS_WEBHOOK_REPLAY_BUDGET", "25")]).await;
    subscribe(&app, &receiver, "/t").await;
    let mut events = Vec::new();
    for _ in 0..30 {
        events.push(status_change(&app).await);
    }
    receiver.wait_for_path("/t", 31, WAIT).await;
    let answers = futures::future::join_all(events.iter().map(|id| redeliver(&app, id, None))).await;
    let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 202).count(), 25, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 5, "{statuses:?}");
    assert_eq!(app.db.count("webhook_deliveries", "generation > 1").await, 25, "the budget holds");

    // Three events to a second registration, replayed by two filtered calls at once.
    let (second, _) = subscribe(&app, &receiver, "/u").await;
    for _ in 0..3 {
        status_change(&app).await;
    }
    receiver.wait_for_path("/u", 4, WAIT).await;
    app.clock.advance_millis(3_600 * 1_000 + 1);
    app.drain_jobs().await;
    let filtered = || async {
        let request = app
            .request(Method::POST, "/api/webhook-events/redeliver")
            .header("Idempotency-Key", key())
            .json(&json!({ "type": "customer.status_changed", "webhookId": second }));
        Reply::read(request.send().await.expect("redeliver")).await
    };
    let (one, two) = futures::future::join(filtered(), filtered()).await;
    one.expect(202);
    two.expect(202);
    let listed = |r: &Reply, part: &str| r.body[part].as_array().map_or(0, Vec::len);
    let queued = (listed(&one, "queued"), listed(&two, "queued"));
    assert!(queued == (3, 0) || queued == (0, 3), "one call queues the three: {} / {}", one.body, two.body);
    let later = if queued.0 == 0 { &one } else { &two };
    assert_eq!(listed(later, "skipped"), 3, "the other skips them, queued: {}", later.body);
    assert!(
        later.body["skipped"].as_array().is_some_and(|s| s.iter().all(|d| d["reason"] == "LATEST_DELIVERY_QUEUED"))
    );
}

/// A delivery job that dies (here: each record of its attempt failed, until its two tries ran
/// out) parks its delivery, TIMEOUT with the reason: settled, so a replay sends it, where it was
/// left PENDING with no job ever to send it (a crash probe made one with ten SIGKILLs, each
/// during its attempt, and no replay could free it).
async fn a_delivery_whose_job_dies_is_parked_and_can_be_replayed(backend: Backend) {
    let (app, receiver) = app(backend, &[("TOKENOPS_JOB_MAX_ATTEMPTS", "2")]).await;
    subscribe(&app, &receiver, "/dies").await;
    app.db.fail_updates_of_where("webhook_deliveries", "NEW.status = 'DELIVERED'").await;
    let event_id = status_change(&app).await;
    receiver.wait_for_path("/dies", 2, WAIT).await;
    for _ in 0..3 {
        next_round(&app).await;
    }
    app.db.heal_inserts_into("webhook_deliveries").await;
    let parked = deliveries(&app, &event_id).await.remove(0);
    assert_eq!(parked["status"], "PARKED", "{parked}");
    assert_eq!(parked["generation"], 1);
    assert_eq!(parked["failureClass"], "TIMEOUT", "{parked}");
    assert!(parked["failureReason"].as_str().is_some_and(|r| r.contains("replay")), "{parked}");
    assert_spaced(&parked["parkedAt"]);
    let sent_before = receiver.requests_to("/dies").len();

    redeliver(&app, &event_id, None).await.expect(202);
    app.drain_jobs().await;
    let got = receiver.wait_for_path("/dies", sent_before + 1, WAIT).await;
    assert_eq!(got.last().and_then(|r| r.header("webhook-event-id")), Some(event_id.as_str()));
    let history = deliveries(&app, &event_id).await;
    let replayed = history.iter().find(|d| d["generation"] == 2).expect("the replay's generation");
    assert_eq!(replayed["status"], "DELIVERED", "{replayed}");
}

/// An event waits for its dispatch while its registration's subscription changes twenty times
/// (to other types and back): it still goes to the registration, which was subscribed when it
/// happened. A registration kept only its last sixteen past subscriptions, and a race probe
/// lost such an event behind a backlog.
async fn an_event_waiting_for_its_dispatch_outlives_many_subscription_changes(backend: Backend) {
    let (app, receiver) = app(backend, &[]).await;
    let (id, _) = subscribe(&app, &receiver, "/busy").await;
    let event_id = undispatched_status_change(&app).await;
    for round in 0..20 {
        app.clock.advance_millis(1);
        let types = if round % 2 == 0 { json!(["account.status_changed"]) } else { json!(["approval.requested"]) };
        let body = json!({ "eventTypes": types });
        app.write(Method::PATCH, &format!("/api/webhooks/{id}"), &key(), &body).await.expect(200);
    }
    app.drain_jobs().await;
    let sent = deliveries(&app, &event_id).await;
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0]["webhookId"], id.as_str());
    assert_eq!(sent[0]["status"], "DELIVERED", "{sent:?}");
}
