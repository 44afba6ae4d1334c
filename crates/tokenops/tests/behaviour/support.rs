//! What several areas of the suite check the same way: a fresh Idempotency-Key, the ISO 8601
//! timestamp, the error envelope, a write whose key is in flight and its 409's Retry-After, the
//! empty style A list of the resource areas (customers, contracts, accounts, transactions), and
//! the jobs that run out of attempts.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::{Reply, TestApp};
use uuid::Uuid;

/// A fresh Idempotency-Key: time-ordered, so that no two writes of a test share one.
pub fn key() -> String {
    Uuid::now_v7().to_string()
}

/// `2026-01-31T12:00:00.123Z`: ISO 8601 UTC with a trailing Z.
#[track_caller]
pub fn assert_iso_utc(value: &Value) {
    let text = value.as_str().unwrap_or_else(|| panic!("timestamp is not a string: {value}"));
    assert!(text.ends_with('Z'), "timestamp {text:?} lacks the trailing Z");
    assert_eq!(text.as_bytes().get(10), Some(&b'T'), "timestamp {text:?} is not ISO 8601");
    assert!(tokenops_domain::Timestamp::parse_iso8601(text).is_ok(), "timestamp {text:?} does not parse");
}

/// The error envelope with `status`: timestamp, status, error, message.
#[track_caller]
pub fn assert_error(reply: &Reply, status: u16) {
    reply.expect(status);
    assert_eq!(reply.body["status"], status, "envelope status; body: {}", reply.body);
    assert!(reply.body["error"].as_str().is_some_and(|e| !e.is_empty()), "envelope error; body: {}", reply.body);
    assert!(reply.body["message"].as_str().is_some_and(|m| !m.is_empty()), "envelope message; body: {}", reply.body);
    assert_iso_utc(&reply.body["timestamp"]);
}

/// The error envelope with `status`, naming the `case` when the status is another.
#[track_caller]
pub fn assert_refused(reply: &Reply, status: u16, case: &str) {
    assert_eq!(reply.status, status, "{case}; got {}", reply.body);
    assert_error(reply, status);
}

/// `body` written with `method` to `path` under a fresh key that another request of `operation`
/// holds in flight (seeded as that request would have claimed it).
pub async fn write_in_flight(app: &TestApp, operation: &str, method: Method, path: &str, body: &Value) -> Reply {
    let key = key();
    app.seed_claim(operation, &key, method.as_str(), path, body).await;
    app.write(method, path, &key, body).await
}

/// A Retry-After of at least one whole second, as a 409 for a key in flight carries.
#[track_caller]
pub fn assert_retry_after(reply: &Reply) {
    let seconds: u64 = reply.header("retry-after").expect("Retry-After").parse().expect("whole seconds");
    assert!(seconds >= 1, "Retry-After {seconds}");
}

/// A style A list with nothing in it yet: the first page, of the default size, and no pages.
pub async fn assert_empty_style_a(app: &TestApp, path: &str) {
    let empty = app.get(path).await;
    empty.expect(200);
    assert_eq!(
        empty.body,
        json!({ "content": [], "page": 0, "size": 20, "totalElements": 0, "totalPages": 0 }),
        "{path}"
    );
}

/// Each of `bodies`, written to `path` with `method` and a fresh key, refused with a 400 and the
/// error envelope.
pub async fn assert_bodies_refused(app: &TestApp, method: Method, path: &str, bodies: &[Value]) {
    for body in bodies {
        let reply = app.write_as(&app.tenant, method.clone(), path, &key(), body).await;
        assert_refused(&reply, 400, &format!("{body} should be refused"));
    }
}

/// Each of `texts`, POSTed to `path` as a JSON body with a fresh key, refused with a 400 and the
/// error envelope: bodies that are not a JSON object, or not JSON at all.
pub async fn assert_body_texts_refused(app: &TestApp, path: &str, texts: &[&str]) {
    for text in texts {
        let response = app
            .request(Method::POST, path)
            .header("Idempotency-Key", key())
            .header("Content-Type", "application/json")
            .body(text.to_string())
            .send()
            .await
            .expect("POST");
        let reply = Reply::read(response).await;
        assert_refused(&reply, 400, &format!("body {text:?} should be refused"));
    }
}

/// `body` written to `path` without an Idempotency-Key, and with a blank one, one over 255
/// characters or one with a control character: each refused with a 400 and the error envelope.
pub async fn assert_bad_keys_refused(app: &TestApp, method: Method, path: &str, body: &Value) {
    let missing = Reply::read(app.request(method.clone(), path).json(body).send().await.expect("send")).await;
    assert_error(&missing, 400);
    for bad in ["", "   ", &"k".repeat(256), "a\tb"] {
        let reply = app.write(method.clone(), path, bad, body).await;
        assert_eq!(reply.status, 400, "{method} key of {} characters; got {}", bad.len(), reply.body);
        assert_error(&reply, 400);
    }
}

/// The `field` of each item of a JSON array (a page's `content`, `data` or `items`), in its
/// order, as text ("" where the item has none).
#[track_caller]
pub fn strings(items: &Value, field: &str) -> Vec<String> {
    let items = items.as_array().unwrap_or_else(|| panic!("not an array: {items}"));
    items.iter().map(|i| i[field].as_str().unwrap_or_default().to_owned()).collect()
}

/// A GET of `path` refused with the error envelope and `status`.
pub async fn assert_get_refused(app: &TestApp, path: &str, status: u16) {
    assert_refused(&app.get(path).await, status, &format!("GET {path}"));
}

/// A VALIDATION_FAILED 400 whose details name `field`.
#[track_caller]
pub fn assert_invalid(reply: &Reply, field: &str) {
    reply.expect(400);
    assert_eq!(reply.body["code"], "VALIDATION_FAILED", "body: {}", reply.body);
    let details = reply.body["details"].as_array().unwrap_or_else(|| panic!("details: {}", reply.body));
    assert!(details.iter().any(|d| d["field"] == field), "details name {field}: {}", reply.body);
}

/// A JSON write with an Idempotency-Key and an X-Correlation-Id, which the events it causes
/// carry.
pub async fn write_correlated(
    app: &TestApp,
    method: Method,
    path: &str,
    key: &str,
    correlation: &str,
    body: &Value,
) -> Reply {
    let request =
        app.request(method, path).header("Idempotency-Key", key).header("X-Correlation-Id", correlation).json(body);
    Reply::read(request.send().await.expect("write")).await
}

/// The settings of an app whose jobs give up after three attempts.
pub fn three_attempts() -> BTreeMap<String, String> {
    BTreeMap::from([("TOKENOPS_JOB_MAX_ATTEMPTS".to_owned(), "3".to_owned())])
}

/// Runs the due jobs five times, a minute of the app's clock apart: past every backoff of a
/// job that gives up after three attempts, so each job due now has run or given up.
pub async fn drain_past_three_attempts(app: &TestApp) {
    for _ in 0..5 {
        app.drain_jobs().await;
        app.clock.advance_millis(60_000);
    }
}

/// Polls `count` until it reaches `at_least`, for at most 20 seconds: how a race test waits
/// for its requests to stand where it holds them (`TestDb::waiting_on` and the like).
pub async fn until_waiting(what: &str, at_least: i64, count: impl AsyncFn() -> i64) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while count().await < at_least {
        assert!(std::time::Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
