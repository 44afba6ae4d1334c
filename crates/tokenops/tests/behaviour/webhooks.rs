//! Webhook registrations over HTTP with a real HTTPS receiver (spec: Webhook registration;
//! Webhooks and delivery history, registration rules 1–7; the Webhooks error rows; HMAC_SHA256
//! and JWS_ES256 signatures; supplement §1 and §7), on both stores. The receiver is reached
//! through `TOKENOPS_WEBHOOK_ALLOW_CIDRS=127.0.0.0/8` and trusted through
//! `TOKENOPS_WEBHOOK_CA_FILE`; jobs run by `drain_jobs` at the manual clock's time.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tokenops_app::clock::Clock;
use tokenops_testkit::webhook_receiver::{ALLOW_CIDRS, ReceivedRequest, Receiver, Response};
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use tokenops_webhooks::verify::{JwsExpectations, verify_hmac, verify_jws};
use uuid::Uuid;

use crate::support::{assert_retry_after, key, until_waiting, write_in_flight};

pub const WAIT: Duration = Duration::from_secs(10);

/// An app that may reach `receiver`, with `extra` settings.
pub async fn app_with_receiver(backend: Backend, extra: &[(&str, &str)]) -> (TestApp, Receiver) {
    let receiver = Receiver::start().await;
    let dir = std::env::temp_dir().join(format!("tokenops-webhook-ca-{}", Uuid::now_v7()));
    std::fs::create_dir_all(&dir).expect("CA directory");
    let ca = receiver.write_ca_file(&dir);
    let mut settings = BTreeMap::from([
        ("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), ALLOW_CIDRS.to_owned()),
        ("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca.display().to_string()),
    ]);
    for (name, value) in extra {
        settings.insert((*name).to_owned(), (*value).to_owned());
    }
    (TestApp::spawn_with(backend, settings).await, receiver)
}

/// Registers `url` for `types` (HMAC_SHA256 unless `scheme`); asserts 201.
pub async fn register(app: &TestApp, url: &str, types: &[&str], scheme: Option<&str>) -> Value {
    let mut body = json!({ "url": url, "eventTypes": types });
    if let Some(scheme) = scheme {
        body["signatureScheme"] = json!(scheme);
    }
    let created = app.post("/api/webhooks", &body).await;
    created.expect(201);
    created.body
}

/// The manual clock's time in Unix seconds: the receiver's "now" for signature checks.
pub fn now_secs(app: &TestApp) -> i64 {
    app.clock.now().as_micros().div_euclid(1_000_000)
}

/// Asserts the headers every delivery carries and its HMAC signature under `secret`.
#[track_caller]
pub fn assert_hmac_delivery(app: &TestApp, request: &ReceivedRequest, secret: &str) {
    assert_eq!(request.method, "POST");
    assert_eq!(request.header("content-type"), Some("application/json"));
    let digest = tokenops_webhooks::signing::content_digest(&request.body);
    assert_eq!(request.header("content-digest"), Some(digest.as_str()), "Content-Digest over the exact bytes");
    let body = request.json();
    assert_eq!(request.header("webhook-event-id"), body["id"].as_str(), "Webhook-Event-Id is the event id");
    let timestamp: i64 = request.header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("Webhook-Timestamp");
    let signature = request.header("webhook-signature").expect("Webhook-Signature");
    assert!(signature.starts_with("v1,"), "{signature}");
    verify_hmac(signature, secret, timestamp, now_secs(app), &request.body).expect("the HMAC signature verifies");
    assert!(request.header("x-jws-signature").is_none());
}

/// `yyyy-MM-dd HH:mm:ss.SSS`.
#[track_caller]
pub fn assert_spaced(value: &Value) {
    let text = value.as_str().unwrap_or_else(|| panic!("not a timestamp: {value}"));
    assert_eq!(text.len(), 23, "{text}");
    assert_eq!(&text[10..11], " ", "{text}");
    assert_eq!(&text[19..20], ".", "{text}");
}

async fn write(app: &TestApp, method: Method, path: &str, body: &Value) -> Reply {
    app.write(method, path, &key(), body).await
}

async fn unkeyed(app: &TestApp, method: Method, path: &str, body: Option<&Value>) -> Reply {
    let mut request = app.request(method, path);
    if let Some(body) = body {
        request = request.json(body);
    }
    Reply::read(request.send().await.expect("request")).await
}

/// The webhook API's error envelope with `status`, naming the `case` when the status is another.
#[track_caller]
pub fn assert_status(reply: &Reply, status: u16, case: &str) {
    assert_eq!(reply.status, status, "{case}: {}", reply.body);
    assert_eq!(reply.body["status"], status, "{case}: the envelope");
    assert_spaced(&reply.body["timestamp"]);
}

backends!(
    registration_sends_a_signed_test_delivery_and_never_shows_the_secret_again,
    registration_refusals,
    changes_deletion_and_their_refusals,
    rotation_signs_with_both_secrets_during_the_overlap,
    jws_deliveries_verify_against_the_published_keys,
    the_test_endpoint_answers_the_attempt,
    a_test_whose_key_is_in_flight_sends_nothing,
    unknown_paths_of_the_webhook_areas_answer_in_their_form,
    each_endpoint_needs_its_permission
);

/// Two registrations of one URL at once: the one whose insert waited for the other's answers the
/// 409 a later registration gets, naming the registration that holds the URL (it had answered
/// without `existingWebhookId`). Both are held at the webhooks table until both reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_concurrent_registrations_of_one_url_name_the_one_that_won() {
    let (app, receiver) = app_with_receiver(Backend::Postgres, &[]).await;
    let body = json!({ "url": receiver.url("/same"), "eventTypes": ["webhook.test"] });
    let held = app.db.hold_table("webhooks").await;
    let both = futures::future::join(
        write(&app, Method::POST, "/api/webhooks", &body),
        write(&app, Method::POST, "/api/webhooks", &body),
    );
    let release = async {
        until_waiting("both registrations at the table", 2, async || app.db.waiting_on("webhooks").await).await;
        held.release().await;
    };
    let ((first, second), ()) = futures::future::join(both, release).await;
    let (created, refused) = if first.status == 201 { (first, second) } else { (second, first) };
    created.expect(201);
    assert_status(&refused, 409, "the registration that lost");
    assert_eq!(refused.body["code"], "WEBHOOK_URL_TAKEN", "{}", refused.body);
    assert_eq!(refused.body["existingWebhookId"], created.body["id"], "{}", refused.body);
}

async fn registration_sends_a_signed_test_delivery_and_never_shows_the_secret_again(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let url = receiver.url("/hooks/a");
    let upper = url.replace("https://", "HTTPS://");
    let created = app.post("/api/webhooks", &json!({ "url": upper, "eventTypes": ["customer.status_changed"] })).await;
    created.expect(201);
    let body = &created.body;
    let id = body["id"].as_str().expect("id").to_owned();
    assert_eq!(created.header("location"), Some(format!("/api/webhooks/{id}").as_str()));
    app.get(&format!("/api/webhooks/{id}")).await.expect(200);
    assert_eq!(body["url"], url, "scheme lowercased");
    assert_eq!(body["signatureScheme"], "HMAC_SHA256", "the default scheme");
    assert_eq!(body["status"], "ACTIVE");
    assert_eq!(body["eventTypes"], json!(["customer.status_changed"]));
    assert_spaced(&body["createdAt"]);
    assert_spaced(&body["updatedAt"]);
    let secret = body["secret"].as_str().expect("the secret, once").to_owned();
    assert_eq!(secret.len(), 43, "32 bytes, base64url unpadded");
    assert!(secret.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{secret}");

    let read = app.get(&format!("/api/webhooks/{id}")).await;
    read.expect(200);
    assert!(read.body.get("secret").is_none(), "never the secret: {}", read.body);
    let listed = app.get("/api/webhooks").await;
    listed.expect(200);
    assert!(listed.body["items"][0].get("secret").is_none());

    // Rule 5: a webhook.test delivery, signed, recorded in the history.
    app.drain_jobs().await;
    let got = receiver.wait_for_path("/hooks/a", 1, WAIT).await;
    assert_hmac_delivery(&app, &got[0], &secret);
    let event = got[0].json();
    assert_eq!(event["type"], "webhook.test");
    assert_eq!(event["resource"], json!({ "type": "webhook", "id": id }));
    assert_eq!(event["data"]["id"], id.as_str());
    assert!(event["data"].get("secret").is_none(), "the event's data never carries the secret");
    assert_spaced(&event["occurredAt"]);
    assert_eq!(got[0].header("webhook-delivery-attempt"), Some("1"));
    let history = app.get(&format!("/api/webhook-events/{}", event["id"].as_str().expect("event id"))).await;
    history.expect(200);
    let deliveries = history.body["deliveries"].as_array().expect("deliveries");
    assert_eq!(deliveries.len(), 1);
    assert_eq!(deliveries[0]["webhookId"], id.as_str());
    assert_eq!(deliveries[0]["status"], "DELIVERED");
    assert_eq!(deliveries[0]["attempts"], 1);
    assert_eq!(deliveries[0]["generation"], 1);

    // A test sent on request carries that request's Idempotency-Key and correlation id, as any
    // event does.
    let tested = Reply::read(
        app.request(Method::POST, &format!("/api/webhooks/{id}/test"))
            .header("Idempotency-Key", "test-key-1")
            .header("X-Correlation-Id", "corr-test-1")
            .send()
            .await
            .expect("test"),
    )
    .await;
    tested.expect(200);
    let got = receiver.wait_for_path("/hooks/a", 2, WAIT).await;
    let tested_event = got[1].json();
    assert_eq!(tested_event["id"], tested.body["eventId"], "{tested_event}");
    assert_eq!(tested_event["idempotencyKey"], "test-key-1", "{tested_event}");
    assert_eq!(tested_event["correlationId"], "corr-test-1", "{tested_event}");

    // Style D, newest first; limit bounds.
    let second = register(&app, &receiver.url("/hooks/b"), &["webhook.test"], None).await;
    let page = app.get("/api/webhooks?limit=1").await;
    page.expect(200);
    assert_eq!(page.body["items"][0]["id"], second["id"]);
    assert_eq!(page.body["limit"], 1);
    let cursor = page.body["nextCursor"].as_str().expect("a next page").to_owned();
    let next = app.get(&format!("/api/webhooks?limit=1&cursor={cursor}")).await;
    next.expect(200);
    assert_eq!(next.body["items"][0]["id"], id.as_str());
    assert!(next.body["nextCursor"].is_null());
    for bad in ["/api/webhooks?limit=0", "/api/webhooks?limit=101", "/api/webhooks?cursor=forged"] {
        assert_status(&app.get(bad).await, 400, bad);
    }
    let foreign = app.get(&format!("/api/webhook-events?limit=1&cursor={cursor}")).await;
    assert_status(&foreign, 400, "another endpoint's cursor");
    // from and to select by createdAt, half-open; the error table's "from not before to" is 400.
    let registered_by = app.clock.now();
    app.clock.advance_millis(1_000);
    let (before, after) = (registered_by.plus_millis(-3_600_000).to_iso8601(), app.clock.now().to_iso8601());
    let created = |query: String| {
        let app = &app;
        async move {
            let page = app.get(&format!("/api/webhooks?{query}")).await;
            page.expect(200);
            page.body["items"].as_array().expect("items").len()
        }
    };
    assert_eq!(created(format!("to={after}")).await, 2);
    assert_eq!(created(format!("from={after}")).await, 0, "from is inclusive of later registrations only");
    assert_eq!(created(format!("from={before}&to={after}")).await, 2);
    for bad in [
        format!("/api/webhooks?from={after}&to={before}"),
        format!("/api/webhooks?from={after}&to={after}"),
        "/api/webhooks?from=yesterday".to_owned(),
        format!("/api/webhooks?limit=1&from={before}&cursor={cursor}"),
    ] {
        assert_status(&app.get(&bad).await, 400, &bad);
    }

    // Another organisation sees none of it.
    let other = app.new_tenant();
    assert_status(&app.get_as(&other, &format!("/api/webhooks/{id}")).await, 404, "another organisation's");
}

async fn registration_refusals(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let url = receiver.url("/r");
    let cases: Vec<(&str, Value)> = vec![
        ("http", json!({ "url": url.replace("https://", "http://"), "eventTypes": ["webhook.test"] })),
        ("private address", json!({ "url": "https://10.1.2.3/hook", "eventTypes": ["webhook.test"] })),
        ("link-local", json!({ "url": "https://169.254.169.254/latest", "eventTypes": ["webhook.test"] })),
        ("carrier-grade NAT", json!({ "url": "https://100.64.0.1/h", "eventTypes": ["webhook.test"] })),
        ("no url", json!({ "eventTypes": ["webhook.test"] })),
        ("unknown scheme", json!({ "url": url, "eventTypes": ["webhook.test"], "signatureScheme": "RSA" })),
        ("no eventTypes", json!({ "url": url })),
        ("empty eventTypes", json!({ "url": url, "eventTypes": [] })),
    ];
    for (case, body) in cases {
        assert_status(&app.post("/api/webhooks", &body).await, 400, case);
    }
    let unknown =
        app.post("/api/webhooks", &json!({ "url": url, "eventTypes": ["webhook.test", "nope.one", "nope.two"] })).await;
    assert_status(&unknown, 400, "unknown event types");
    let details = unknown.body["details"].as_array().expect("details");
    assert_eq!(details.len(), 2, "every offender named: {}", unknown.body);
    let message = unknown.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("nope.one") && message.contains("nope.two"), "the message names both: {message}");
    assert!(!message.contains("webhook.test"), "{message}");
    assert!(details[0]["message"].as_str().is_some_and(|m| m.contains("nope.one")));
    assert!(details[1]["message"].as_str().is_some_and(|m| m.contains("nope.two")));
    // Every field found wrong at once: the URL, the scheme and each unknown type.
    let all_wrong = app
        .post(
            "/api/webhooks",
            &json!({ "url": "ftp://x", "signatureScheme": "RSA", "eventTypes": ["nope.one", "nope.two"] }),
        )
        .await;
    assert_status(&all_wrong, 400, "three fields wrong");
    let fields: Vec<&str> =
        all_wrong.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    assert_eq!(fields.len(), 4, "{}", all_wrong.body);
    assert_eq!((fields[0], fields[1]), ("url", "signatureScheme"), "{}", all_wrong.body);
    assert!(fields[2..].iter().all(|f| f.starts_with("eventTypes")), "{}", all_wrong.body);
    let no_key =
        unkeyed(&app, Method::POST, "/api/webhooks", Some(&json!({ "url": url, "eventTypes": ["webhook.test"] })))
            .await;
    assert_status(&no_key, 400, "Idempotency-Key missing");
    assert_eq!(app.db.count("webhooks", "").await, 0, "nothing registered");

    // Rule 4: one registration per URL (its normal form) per organisation.
    register(&app, &url, &["webhook.test"], None).await;
    let again = app
        .post("/api/webhooks", &json!({ "url": url.replace("https", "HTTPS"), "eventTypes": ["webhook.test"] }))
        .await;
    assert_status(&again, 409, "URL already registered");
    let other = app.new_tenant();
    let theirs = app.post_as(&other, "/api/webhooks", &json!({ "url": url, "eventTypes": ["webhook.test"] })).await;
    theirs.expect(201);

    // The key: in flight (409), reused with another payload (422), replayed.
    let body = json!({ "url": receiver.url("/k"), "eventTypes": ["webhook.test"] });
    let in_flight = write_in_flight(&app, "webhook.create", Method::POST, "/api/webhooks", &body).await;
    assert_status(&in_flight, 409, "key in flight");
    let k = key();
    let first = app.write(Method::POST, "/api/webhooks", &k, &body).await;
    first.expect(201);
    let replay = app.write(Method::POST, "/api/webhooks", &k, &body).await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body["id"], first.body["id"]);
    let secret = first.body["secret"].as_str().expect("secret");
    assert_eq!(replay.body["secret"], secret, "the replay answers the secret, opened from its sealed form");
    let clear = format!("CAST(response_body AS TEXT) LIKE '%{secret}%'");
    assert_eq!(app.db.count("idempotency_records", &clear).await, 0, "no secret in clear in the key's record");
    let id = first.body["id"].as_str().expect("id");
    app.post(&format!("/api/webhooks/{id}/secret/rotate"), &json!({})).await.expect(200);
    let after = app.write(Method::POST, "/api/webhooks", &k, &body).await;
    after.expect(201);
    assert!(after.body.get("secret").is_none(), "a rotated-out secret is not answered again: {}", after.body);
    let other_body = json!({ "url": receiver.url("/k2"), "eventTypes": ["webhook.test"] });
    assert_status(&app.write(Method::POST, "/api/webhooks", &k, &other_body).await, 422, "key reused");
}

async fn changes_deletion_and_their_refusals(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let url = receiver.url("/c");
    let created = register(&app, &url, &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id").to_owned();
    let path = format!("/api/webhooks/{id}");

    let changed =
        write(&app, Method::PATCH, &path, &json!({ "eventTypes": ["customer.status_changed", "account.provisioned"] }))
            .await;
    changed.expect(200);
    assert_eq!(changed.body["eventTypes"], json!(["customer.status_changed", "account.provisioned"]));
    assert!(changed.body.get("secret").is_none());
    let nothing = write(&app, Method::PATCH, &path, &json!({ "eventTypes": [] })).await;
    nothing.expect(200);
    assert_eq!(nothing.body["eventTypes"], json!([]), "[] subscribes to nothing");
    let off = write(&app, Method::PATCH, &path, &json!({ "status": "INACTIVE" })).await;
    off.expect(200);
    assert_eq!(off.body["status"], "INACTIVE");

    let cases: Vec<(&str, Value)> = vec![
        ("no field", json!({})),
        ("SUSPENDED", json!({ "status": "SUSPENDED" })),
        ("unknown status", json!({ "status": "PAUSED" })),
        ("unknown event type", json!({ "eventTypes": ["nope"] })),
        ("url cannot change", json!({ "url": receiver.url("/other") })),
    ];
    for (case, body) in cases {
        assert_status(&write(&app, Method::PATCH, &path, &body).await, 400, case);
    }
    assert_status(
        &unkeyed(&app, Method::PATCH, &path, Some(&json!({ "status": "ACTIVE" }))).await,
        400,
        "PATCH without key",
    );
    assert_status(&app.post(&format!("{path}/test"), &json!({})).await, 409, "test on INACTIVE (rule 6)");
    assert_status(&unkeyed(&app, Method::POST, &format!("{path}/test"), None).await, 400, "test without key");
    assert_status(
        &unkeyed(&app, Method::POST, &format!("{path}/secret/rotate"), None).await,
        400,
        "rotate without key",
    );
    let in_flight = write_in_flight(&app, "webhook.update", Method::PATCH, &path, &json!({ "status": "ACTIVE" })).await;
    assert_status(&in_flight, 409, "PATCH key in flight");
    let k = key();
    app.seed_claim("webhook.secret_rotate", &k, "POST", &format!("{path}/secret/rotate"), &Value::Null).await;
    let rotate = app.request(Method::POST, &format!("{path}/secret/rotate")).header("Idempotency-Key", &k).send().await;
    assert_status(&Reply::read(rotate.expect("rotate")).await, 409, "rotate key in flight");
    let k = key();
    app.seed_claim("webhook.test", &k, "POST", &format!("{path}/test"), &Value::Null).await;
    let test = app.request(Method::POST, &format!("{path}/test")).header("Idempotency-Key", &k).send().await;
    assert_status(&Reply::read(test.expect("test")).await, 409, "test key in flight");

    let unknown = format!("/api/webhooks/{}", Uuid::now_v7());
    assert_status(&app.get(&unknown).await, 404, "GET unknown");
    assert_status(&write(&app, Method::PATCH, &unknown, &json!({ "status": "ACTIVE" })).await, 404, "PATCH unknown");
    assert_status(&app.post(&format!("{unknown}/test"), &json!({})).await, 404, "test unknown");
    assert_status(&app.post(&format!("{unknown}/secret/rotate"), &json!({})).await, 404, "rotate unknown");
    assert_status(&write(&app, Method::DELETE, &unknown, &Value::Null).await, 404, "DELETE unknown");
    assert_status(&app.get("/api/webhooks/not-a-uuid").await, 400, "a path id that is not a UUID");

    // A webhook write like the others (the spec's common rule): the key is required.
    assert_status(&unkeyed(&app, Method::DELETE, &path, None).await, 400, "DELETE without key");
    app.get(&path).await.expect(200);
    let deleted = write(&app, Method::DELETE, &path, &Value::Null).await;
    deleted.expect(204);
    assert_status(&app.get(&path).await, 404, "gone");
    // The URL is free again: a new id and a new secret.
    let again = register(&app, &url, &["webhook.test"], None).await;
    assert_ne!(again["id"], created["id"]);
    assert_ne!(again["secret"], created["secret"]);
}

async fn rotation_signs_with_both_secrets_during_the_overlap(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/rot"), &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id");
    let first = created["secret"].as_str().expect("secret").to_owned();
    app.drain_jobs().await;
    receiver.wait_for_path("/rot", 1, WAIT).await;

    let rotate_key = key();
    let rotate_path = format!("/api/webhooks/{id}/secret/rotate");
    let rotate = || app.request(Method::POST, &rotate_path).header("Idempotency-Key", &rotate_key).send();
    let rotated = Reply::read(rotate().await.expect("rotate")).await;
    rotated.expect(200);
    let replayed = Reply::read(rotate().await.expect("rotate again")).await;
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    assert_eq!(replayed.body, rotated.body, "a replay answers the same new secret");
    let second = rotated.body["secret"].as_str().expect("the new secret, once").to_owned();
    assert_eq!(second.len(), 43);
    assert_ne!(second, first);
    let expected = app.clock.now().plus_millis(24 * 3_600_000).to_spaced_utc();
    assert_eq!(rotated.body["previousSecretExpiresAt"], expected.as_str(), "24 hours of overlap");
    let read = app.get(&format!("/api/webhooks/{id}")).await;
    assert!(read.body.get("secret").is_none());
    assert_eq!(read.body["previousSecretExpiresAt"], expected.as_str());

    // A test delivery now carries v1,<new>,v1,<previous>: both verify.
    let outcome = app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await;
    outcome.expect(200);
    let got = receiver.wait_for_path("/rot", 2, WAIT).await;
    let header = got[1].header("webhook-signature").expect("signature").to_owned();
    assert_eq!(header.matches("v1,").count(), 2, "{header}");
    assert_hmac_delivery(&app, &got[1], &second);
    assert_hmac_delivery(&app, &got[1], &first);
    let timestamp: i64 = got[1].header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    let newest = tokenops_webhooks::signing::hmac_signature(&second, timestamp, &got[1].body);
    assert!(header.starts_with(&format!("v1,{newest},")), "newest first: {header}");

    // A second rotation inside the overlap retires the first secret at once.
    let again = app.post(&format!("/api/webhooks/{id}/secret/rotate"), &json!({})).await;
    again.expect(200);
    let third = again.body["secret"].as_str().expect("secret").to_owned();
    app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await.expect(200);
    let got = receiver.wait_for_path("/rot", 3, WAIT).await;
    assert_hmac_delivery(&app, &got[2], &third);
    assert_hmac_delivery(&app, &got[2], &second);
    let signature = got[2].header("webhook-signature").expect("signature");
    let timestamp: i64 = got[2].header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    assert!(verify_hmac(signature, &first, timestamp, now_secs(&app), &got[2].body).is_err(), "the oldest is retired");
}

async fn jws_deliveries_verify_against_the_published_keys(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/jws"), &["webhook.test"], Some("JWS_ES256")).await;
    assert!(created.get("secret").is_none(), "no secret for JWS_ES256: {created}");
    let id = created["id"].as_str().expect("id");
    assert_status(
        &app.post(&format!("/api/webhooks/{id}/secret/rotate"), &json!({})).await,
        404,
        "rotation of JWS_ES256 (rule 7)",
    );

    app.drain_jobs().await;
    let got = receiver.wait_for_path("/jws", 1, WAIT).await;
    assert!(got[0].header("webhook-signature").is_none());
    let token = got[0].header("x-jws-signature").expect("X-JWS-Signature").to_owned();
    let jwks = Reply::read(app.raw(Method::GET, "/.well-known/webhook-jwks.json").send().await.expect("jwks")).await;
    jwks.expect(200);
    let timestamp: i64 = got[0].header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    let url = receiver.url("/jws");
    let expect = JwsExpectations {
        issuer: &app.base_url,
        registration_id: id,
        url: &url,
        timestamp,
        now: now_secs(&app),
        body: &got[0].body,
    };
    let claims = verify_jws(&token, &jwks.body, &expect).expect("the JWS verifies with the published key");
    let wrong = JwsExpectations { registration_id: "another", ..expect };
    assert!(verify_jws(&token, &jwks.body, &wrong).is_err(), "aud is the registration");

    // A second attempt (the test endpoint) carries a fresh jti.
    app.post(&format!("/api/webhooks/{id}/test"), &json!({})).await.expect(200);
    let got = receiver.wait_for_path("/jws", 2, WAIT).await;
    let token = got[1].header("x-jws-signature").expect("X-JWS-Signature");
    let timestamp: i64 = got[1].header("webhook-timestamp").and_then(|t| t.parse().ok()).expect("timestamp");
    let expect = JwsExpectations { timestamp, body: &got[1].body, ..expect };
    let again = verify_jws(token, &jwks.body, &expect).expect("verifies");
    assert_ne!(again.jti, claims.jti, "a fresh jti per attempt");
}

async fn the_test_endpoint_answers_the_attempt(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/t"), &["customer.status_changed"], None).await;
    let id = created["id"].as_str().expect("id");
    let secret = created["secret"].as_str().expect("secret");
    app.drain_jobs().await;
    receiver.wait_for_path("/t", 1, WAIT).await;

    let k = key();
    let test_path = format!("/api/webhooks/{id}/test");
    let ok = app.request(Method::POST, &test_path).header("Idempotency-Key", &k).send().await;
    let ok = Reply::read(ok.expect("test")).await;
    ok.expect(200);
    assert_eq!(ok.body["delivered"], true);
    assert_eq!(ok.body["statusCode"], 200);
    let got = receiver.wait_for_path("/t", 2, WAIT).await;
    assert_hmac_delivery(&app, &got[1], secret);
    assert_eq!(got[1].json()["type"], "webhook.test", "a test event, whatever the subscription");
    // The same key answers the recorded outcome without sending again.
    let replay =
        Reply::read(app.request(Method::POST, &test_path).header("Idempotency-Key", &k).send().await.expect("replay"))
            .await;
    replay.expect(200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, ok.body);
    assert_eq!(receiver.requests_to("/t").len(), 2, "no second test sent");

    receiver.respond("/t", Response::Status(500));
    let failed = app.post(&test_path, &json!({})).await;
    failed.expect(200);
    assert_eq!(failed.body["delivered"], false);
    assert_eq!(failed.body["statusCode"], 500);
    assert_eq!(failed.body["failureClass"], "REJECTED");
    receiver.respond("/t", Response::Redirect("https://127.0.0.1:1/elsewhere".into()));
    let redirected = app.post(&test_path, &json!({})).await;
    assert_eq!(redirected.body["delivered"], false, "a 302 is a failed attempt: {}", redirected.body);
    assert_eq!(redirected.body["statusCode"], 302);
    assert!(receiver.requests_to("/elsewhere").is_empty(), "redirects are never followed");
    // Slower than the five-second read timeout: TIMEOUT.
    receiver.respond("/t", Response::Delay(Duration::from_secs(6)));
    let slow = app.post(&test_path, &json!({})).await;
    slow.expect(200);
    assert_eq!(slow.body["delivered"], false);
    assert_eq!(slow.body["failureClass"], "TIMEOUT", "{}", slow.body);
    assert!(slow.body["statusCode"].is_null());
}

/// Errors > Webhooks: a test whose key is in flight is 409, and the second call sends nothing
/// (the first call's attempt is held at the receiver meanwhile).
async fn a_test_whose_key_is_in_flight_sends_nothing(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/h"), &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id");
    app.drain_jobs().await;
    receiver.wait_for_path("/h", 1, WAIT).await;
    receiver.respond("/h", Response::Hold);

    let k = key();
    let test_path = format!("/api/webhooks/{id}/test");
    let call = || async {
        let sent = app.request(Method::POST, &test_path).header("Idempotency-Key", &k).send().await;
        Reply::read(sent.expect("test")).await
    };
    let second = async {
        receiver.wait_for_path("/h", 2, WAIT).await;
        let second = call().await;
        receiver.release("/h");
        second
    };
    let (first, second) = tokio::join!(call(), second);
    first.expect(200);
    assert_eq!(first.body["delivered"], true, "{}", first.body);
    assert_status(&second, 409, "test key in flight");
    assert_eq!(second.body["code"], "IDEMPOTENCY_CONFLICT", "{}", second.body);
    assert_retry_after(&second);
    assert_eq!(receiver.requests_to("/h").len(), 2, "one attempt for the key");
    // Once the first call completed, the key replays its outcome, still sending nothing.
    let replay = call().await;
    replay.expect(200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, first.body);
    assert_eq!(receiver.requests_to("/h").len(), 2, "no attempt on a replay");
}

/// Errors > Envelope: an unknown path under the webhook prefixes is a 404 in the webhook areas'
/// timestamp form, as every real webhook endpoint's errors are; elsewhere, ISO 8601.
async fn unknown_paths_of_the_webhook_areas_answer_in_their_form(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = Uuid::now_v7();
    for path in [
        "/api/webhooks/".to_owned(),
        format!("/api/webhooks/{id}/nope"),
        "/api/webhook-events/abc/redeliver/x".to_owned(),
        "/api/webhook-events/".to_owned(),
    ] {
        assert_status(&app.get(&path).await, 404, &path);
    }
    let elsewhere = app.get("/api/customers/x/nope").await;
    assert_eq!(elsewhere.status, 404);
    crate::support::assert_iso_utc(&elsewhere.body["timestamp"]);
}

async fn each_endpoint_needs_its_permission(backend: Backend) {
    let (app, receiver) = app_with_receiver(backend, &[]).await;
    let created = register(&app, &receiver.url("/p"), &["webhook.test"], None).await;
    let id = created["id"].as_str().expect("id");
    let token = |scope: &str| {
        let subject = Uuid::now_v7().to_string();
        let claims = app.issuer.claims_with_scope(&app.clock, &subject, Some(app.tenant.id), 3_600, Some(scope));
        app.issuer.sign(&claims)
    };
    let reader = token("webhook:read");
    let manager = token("webhook:manage");
    let call = |token: &str, method: Method, path: String| {
        app.raw(method, &path)
            .header("API-Version", tokenops_testkit::API_VERSION)
            .bearer_auth(token)
            .header("Idempotency-Key", key())
            .json(&json!({}))
            .send()
    };
    let event = Uuid::now_v7();
    let refused: Vec<(&str, Method, String)> = vec![
        (&manager, Method::GET, "/api/webhooks".to_owned()),
        (&manager, Method::GET, format!("/api/webhooks/{id}")),
        (&manager, Method::GET, "/api/webhook-events".to_owned()),
        (&reader, Method::POST, "/api/webhooks".to_owned()),
        (&reader, Method::PATCH, format!("/api/webhooks/{id}")),
        (&reader, Method::DELETE, format!("/api/webhooks/{id}")),
        (&reader, Method::POST, format!("/api/webhooks/{id}/test")),
        (&reader, Method::POST, format!("/api/webhooks/{id}/secret/rotate")),
        (&manager, Method::POST, format!("/api/webhook-events/{event}/redeliver")),
        (&manager, Method::POST, "/api/webhook-events/redeliver".to_owned()),
    ];
    for (token, method, path) in refused {
        let case = format!("{method} {path}");
        let reply = Reply::read(call(token, method, path).await.expect("request")).await;
        assert_status(&reply, 403, &case);
    }
    let unauthenticated = Reply::read(
        app.raw(Method::GET, "/api/webhooks").header("API-Version", "1.0.0").send().await.expect("request"),
    )
    .await;
    assert_status(&unauthenticated, 401, "no token");
}
