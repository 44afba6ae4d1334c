//! The API's cross-cutting conventions, driven over HTTP on both stores: API-Version, the error
//! envelope and its two timestamp forms, X-Request-Id, body rules (JSON, size, media type), path
//! ids, bearer authentication, tenant scope, unexpected failures and the operational endpoints.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::ecdsa::SigningKey;
use p256::pkcs8::EncodePrivateKey;
use regex::Regex;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

const ISO_8601: &str = r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$";
const SPACED_UTC: &str = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$";

#[derive(Debug, Clone, Copy)]
enum Stamp {
    Iso,
    Spaced,
}

/// Asserts the error envelope: timestamp in the given form, status, reason phrase, a message,
/// the stable code, and requestId equal to the X-Request-Id header.
#[track_caller]
fn assert_error(reply: &Reply, status: u16, code: &str, stamp: Stamp) {
    reply.expect(status);
    let body = &reply.body;
    let pattern = match stamp {
        Stamp::Iso => ISO_8601,
        Stamp::Spaced => SPACED_UTC,
    };
    let timestamp = body["timestamp"].as_str().unwrap_or_else(|| panic!("timestamp missing: {body}"));
    assert!(Regex::new(pattern).expect("regex").is_match(timestamp), "timestamp {timestamp:?} is not {stamp:?}");
    assert_eq!(body["status"], json!(status), "{body}");
    let reason = StatusCode::from_u16(status).expect("status").canonical_reason().expect("reason phrase");
    assert_eq!(body["error"], reason, "{body}");
    assert!(body["message"].as_str().is_some_and(|m| !m.is_empty()), "message missing: {body}");
    assert_eq!(body["code"], code, "{body}");
    let header = reply.header("x-request-id").expect("X-Request-Id header on an error");
    assert_eq!(body["requestId"], header, "{body}");
}

fn message(reply: &Reply) -> &str {
    reply.body["message"].as_str().unwrap_or("")
}

async fn send(request: reqwest::RequestBuilder) -> Reply {
    Reply::read(request.send().await.expect("send")).await
}

/// A GET with the default tenant's token and the given API-Version (or none).
async fn get_with_version(app: &TestApp, path: &str, version: Option<&str>) -> Reply {
    let mut request = app.raw(Method::GET, path).bearer_auth(&app.tenant.token);
    if let Some(v) = version {
        request = request.header("API-Version", v);
    }
    send(request).await
}

async fn get_with_auth(app: &TestApp, path: &str, authorization: Option<&str>) -> Reply {
    let mut request = app.raw(Method::GET, path).header("API-Version", "1.0.0");
    if let Some(a) = authorization {
        request = request.header("Authorization", a);
    }
    send(request).await
}

async fn get_with_token(app: &TestApp, path: &str, token: &str) -> Reply {
    get_with_auth(app, path, Some(&format!("Bearer {token}"))).await
}

/// A fresh ES256 key the issuer does not publish.
fn foreign_key() -> EncodingKey {
    let signing = SigningKey::random(&mut rand::rngs::OsRng);
    let pem = signing.to_pkcs8_pem(Default::default()).expect("PKCS#8 PEM");
    EncodingKey::from_ec_pem(pem.as_bytes()).expect("EC key")
}

fn default_claims(app: &TestApp) -> Value {
    app.issuer.claims(&app.clock, &Uuid::now_v7().to_string(), Some(app.tenant.id), 3_600)
}

async fn create_customer(app: &TestApp, customer_ref: &str) {
    app.post("/api/customers", &json!({ "customerRef": customer_ref })).await.expect(201);
}

async fn set_status(app: &TestApp, customer_ref: &str, status: &str) {
    app.patch(&format!("/api/customers/{customer_ref}"), &json!({ "status": status })).await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// API-Version

async fn missing_api_version_is_400_naming_supported_versions(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/api/customers", "/api/audit/events"] {
        let reply = get_with_version(&app, path, None).await;
        assert_error(&reply, 400, "UNSUPPORTED_API_VERSION", Stamp::Iso);
        assert!(message(&reply).contains("1.0.0"), "{path}: {}", reply.body);
    }
    let reply = get_with_version(&app, "/api/webhook-events", None).await;
    assert_error(&reply, 400, "UNSUPPORTED_API_VERSION", Stamp::Spaced);
    assert!(message(&reply).contains("1.0.0"), "{}", reply.body);
}

async fn malformed_api_version_is_400_naming_supported_versions(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for version in ["1.0", "latest", "1.0.0.0", "v1.0.0", "1.0.x", "1..0", ""] {
        let reply = get_with_version(&app, "/api/customers", Some(version)).await;
        assert_error(&reply, 400, "UNSUPPORTED_API_VERSION", Stamp::Iso);
        assert!(message(&reply).contains("1.0.0"), "{version:?}: {}", reply.body);
    }
    // Two header lines are one comma-joined value, whichever comes first.
    for (first, second) in [("1.0.0", "latest"), ("1.0.0", "1.0.0"), ("2.0.0", "1.0.0")] {
        let request = app
            .raw(Method::GET, "/api/customers")
            .bearer_auth(&app.tenant.token)
            .header("API-Version", first)
            .header("API-Version", second);
        assert_error(&send(request).await, 400, "UNSUPPORTED_API_VERSION", Stamp::Iso);
    }
}

async fn unsupported_api_version_is_400_naming_supported_versions(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for version in ["2.0.0", "1.0.1", "1.1.0", "0.9.0"] {
        let reply = get_with_version(&app, "/api/customers", Some(version)).await;
        assert_error(&reply, 400, "UNSUPPORTED_API_VERSION", Stamp::Iso);
        assert!(message(&reply).contains("1.0.0"), "{version}: {}", reply.body);
    }
}

async fn supported_api_version_is_served(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    get_with_version(&app, "/api/customers", Some("1.0.0")).await.expect(200);
    get_with_version(&app, "/api/audit/events", Some("1.0.0")).await.expect(200);
    get_with_version(&app, "/api/webhook-events", Some("1.0.0")).await.expect(200);
}

async fn a_write_without_api_version_changes_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(
        app.raw(Method::POST, "/api/customers")
            .bearer_auth(&app.tenant.token)
            .header("Idempotency-Key", "k-1")
            .json(&json!({ "customerRef": "c-1" })),
    )
    .await;
    assert_error(&reply, 400, "UNSUPPORTED_API_VERSION", Stamp::Iso);
    app.get("/api/customers/c-1").await.expect(404);
    assert_eq!(app.get("/api/audit/events").await.body["totalItems"], 0);
}

async fn operational_endpoints_need_no_api_version_and_no_token(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/healthz", "/readyz", "/openapi.json", "/metrics", "/docs"] {
        let reply = send(app.raw(Method::GET, path)).await;
        reply.expect(200);
        assert!(reply.header("x-request-id").is_some(), "{path}");
    }
}

// ---------------------------------------------------------------------------------------------
// Envelope and timestamps

async fn errors_on_customers_use_the_envelope_with_iso_timestamps(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_error(&app.get("/api/customers/nobody").await, 404, "NOT_FOUND", Stamp::Iso);
    assert_error(&app.get("/api/customers?size=0").await, 400, "VALIDATION_FAILED", Stamp::Iso);
    assert_error(&get_with_auth(&app, "/api/customers", None).await, 401, "UNAUTHORIZED", Stamp::Iso);
    let unknown_status = app.patch("/api/customers/nobody", &json!({ "status": "SLEEPING" })).await;
    assert_error(&unknown_status, 400, "VALIDATION_FAILED", Stamp::Iso);
}

async fn errors_on_webhook_events_use_spaced_timestamps(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_error(&app.get("/api/webhook-events?limit=0").await, 400, "VALIDATION_FAILED", Stamp::Spaced);
    assert_error(&app.get("/api/webhook-events/123").await, 400, "VALIDATION_FAILED", Stamp::Spaced);
    let missing = app.get(&format!("/api/webhook-events/{}", Uuid::now_v7())).await;
    assert_error(&missing, 404, "NOT_FOUND", Stamp::Spaced);
    let anonymous = get_with_auth(&app, "/api/webhook-events", None).await;
    assert_error(&anonymous, 401, "UNAUTHORIZED", Stamp::Spaced);
    let wrong_method = send(app.request(Method::DELETE, "/api/webhook-events")).await;
    assert_error(&wrong_method, 405, "METHOD_NOT_ALLOWED", Stamp::Spaced);
}

async fn error_request_id_equals_the_response_header(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(app.request(Method::GET, "/api/customers/nobody").header("X-Request-Id", "trace-42")).await;
    reply.expect(404);
    assert_eq!(reply.header("x-request-id"), Some("trace-42"));
    assert_eq!(reply.body["requestId"], "trace-42");
    let minted = app.get("/api/customers/nobody").await;
    let header = minted.header("x-request-id").expect("minted id");
    assert_eq!(minted.body["requestId"], header);
}

// ---------------------------------------------------------------------------------------------
// X-Request-Id

async fn every_response_carries_a_request_id(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let replies = [
        app.get("/api/customers").await,
        app.get("/api/customers?size=0").await,
        app.get("/api/no-such-route").await,
        send(app.raw(Method::GET, "/healthz")).await,
        app.post("/api/customers", &json!({ "customerRef": "c-1" })).await,
    ];
    let mut seen = Vec::new();
    for reply in &replies {
        let id = reply.header("x-request-id").unwrap_or_else(|| panic!("no X-Request-Id: {}", reply.body));
        assert!(!id.is_empty());
        seen.push(id.to_owned());
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), replies.len(), "each request gets its own id");
}

async fn a_well_formed_request_id_is_echoed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let longest = "a".repeat(128);
    for id in ["abc-123_x.y:z", "0b5c6d2e-8f1a-4b7c-9d3e-1f2a3b4c5d6e", longest.as_str()] {
        let reply = send(app.request(Method::GET, "/api/customers").header("X-Request-Id", id)).await;
        reply.expect(200);
        assert_eq!(reply.header("x-request-id"), Some(id));
    }
    let health = send(app.raw(Method::GET, "/healthz").header("X-Request-Id", "probe-1")).await;
    assert_eq!(health.header("x-request-id"), Some("probe-1"));
}

async fn a_malformed_request_id_is_replaced(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let too_long = "a".repeat(200);
    let just_too_long = "b".repeat(129);
    let well_formed = Regex::new(r"^[A-Za-z0-9._:-]{1,128}$").expect("regex");
    for id in ["has spaces in it", too_long.as_str(), just_too_long.as_str(), "semi;colon", "quote\"d"] {
        let reply = send(app.request(Method::GET, "/api/customers/nobody").header("X-Request-Id", id)).await;
        reply.expect(404);
        let assigned = reply.header("x-request-id").expect("a new id");
        assert_ne!(assigned, id);
        assert!(well_formed.is_match(assigned), "assigned id {assigned:?} is not well formed");
        assert_eq!(reply.body["requestId"], assigned);
    }
}

async fn the_request_id_is_recorded_on_the_audit_record(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(
        app.request(Method::POST, "/api/customers")
            .header("Idempotency-Key", "k-1")
            .header("X-Request-Id", "integrator-trace-7")
            .json(&json!({ "customerRef": "c-1" })),
    )
    .await;
    reply.expect(201);
    let records = app.get("/api/audit/events?requestId=integrator-trace-7").await;
    records.expect(200);
    assert_eq!(records.body["totalItems"], 1, "{}", records.body);
    assert_eq!(records.body["data"][0]["requestId"], "integrator-trace-7");
}

// ---------------------------------------------------------------------------------------------
// Request bodies, routes and methods

async fn malformed_json_is_400_malformed_json_request(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for body in [r#"{"customerRef": "c-1""#, "not json", r#"{"customerRef": 'c-1'}"#] {
        let reply = send(
            app.request(Method::POST, "/api/customers")
                .header("Idempotency-Key", Uuid::now_v7().to_string())
                .header("Content-Type", "application/json")
                .body(body),
        )
        .await;
        assert_error(&reply, 400, "MALFORMED_JSON", Stamp::Iso);
        assert_eq!(message(&reply), "Malformed JSON request");
    }
    app.get("/api/customers/c-1").await.expect(404);
}

async fn a_body_of_the_wrong_shape_names_the_field_in_details(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        (json!({"customerRef": 7}), "customerRef"),
        (json!({"txType": "TRANSFER", "amount": 12.5}), "amount"),
        (json!({"txType": 5, "colour": "blue"}), "txType"),
    ];
    for (body, field) in cases {
        let path = if body.get("customerRef").is_some() { "/api/customers" } else { "/api/transactions" };
        let reply = send(
            app.request(Method::POST, path)
                .header("Idempotency-Key", Uuid::now_v7().to_string())
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        )
        .await;
        assert_eq!(reply.status, 400, "{path} {body}: {}", reply.body);
        assert_eq!(reply.body["details"][0]["field"], field, "{path} {body}: {}", reply.body);
        assert!(message(&reply).starts_with(&format!("{field}: ")), "{}", reply.body);
    }
    app.get("/api/transactions").await.expect(200);
    assert_eq!(app.get("/api/transactions").await.body["totalElements"], 0);
}

async fn a_key_given_twice_or_a_number_that_would_be_rounded_is_400_naming_the_field(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        // Two amounts: which one a proxy, an audit tap or this service reads is not the client's
        // to guess.
        (
            "/api/transactions",
            r#"{"txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "1.00", "amount": "2.00"}"#,
            "amount",
            "more than once",
        ),
        ("/api/customers", r#"{"customerRef": "c-1", "customerRef": "c-2"}"#, "customerRef", "more than once"),
        // A reference of twenty digits would be kept as 1.8446744073709552e19.
        (
            "/api/transactions",
            r#"{"txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "1", "params": {"ref": 18446744073709551617}}"#,
            "params.ref",
            "send it as a string",
        ),
    ];
    for (path, body, field, problem) in cases {
        let reply = send(
            app.request(Method::POST, path)
                .header("Idempotency-Key", Uuid::now_v7().to_string())
                .header("Content-Type", "application/json")
                .body(body),
        )
        .await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.body["details"][0]["field"], field, "{body}: {}", reply.body);
        assert!(message(&reply).contains(problem), "{body}: {}", reply.body);
    }
    // Whole numbers within 64 bits are kept exactly; the sign-in endpoints answer as for
    // unreadable JSON (their spec allows no other 400).
    let kept = send(
        app.request(Method::POST, "/api/customers")
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .header("Content-Type", "application/json")
            .body(r#"{"customerRef": "c-3", "displayName": "Three"}"#),
    )
    .await;
    assert_eq!(kept.status, 201, "{}", kept.body);
    let login = send(
        app.request(Method::POST, "/api/auth/login")
            .header("Content-Type", "application/json")
            .body(r#"{"email": "a@example.com", "email": "b@example.com", "password": "x"}"#),
    )
    .await;
    assert_eq!((login.status, message(&login)), (400, "Malformed JSON request"), "{}", login.body);
    assert_eq!(app.get("/api/customers").await.body["totalElements"], 1, "nothing else was written");
}

async fn a_wrong_type_is_described_in_json_words_not_rust_types(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        (json!({"action": "A", "approvers": ["#x"]}), "approvers[0]", "expected an object"),
        (
            json!({"action": "A", "approvers": [{"step": "one", "approver": "#x"}]}),
            "approvers[0].step",
            "expected a whole number",
        ),
    ];
    for (body, field, expected) in cases {
        let reply = send(
            app.request(Method::POST, "/api/approvals/requests")
                .header("Idempotency-Key", Uuid::now_v7().to_string())
                .header("Content-Type", "application/json")
                .body(body.to_string()),
        )
        .await;
        assert_eq!(reply.status, 400, "{body}: {}", reply.body);
        assert_eq!(reply.body["details"][0]["field"], field, "{body}: {}", reply.body);
        let text = message(&reply);
        assert!(text.ends_with(expected), "{body}: {text}");
        assert!(!text.contains("struct") && !text.contains("i64"), "{body}: {text}");
    }
}

async fn unknown_route_is_404_in_the_envelope(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/api/no-such-thing", "/nowhere", "/api/customers/c-1/nested/deeper"] {
        let reply = app.get(path).await;
        assert_error(&reply, 404, "ROUTE_NOT_FOUND", Stamp::Iso);
    }
    let bare = send(app.raw(Method::GET, "/api/no-such-thing")).await;
    assert_error(&bare, 404, "ROUTE_NOT_FOUND", Stamp::Iso);
}

async fn wrong_method_on_a_known_path_is_405_in_the_envelope(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let cases = [
        (Method::DELETE, "/api/customers"),
        (Method::PUT, "/api/customers/c-1"),
        (Method::POST, "/api/audit/events"),
        (Method::POST, "/healthz"),
    ];
    for (method, path) in cases {
        let reply = send(app.request(method.clone(), path)).await;
        assert_error(&reply, 405, "METHOD_NOT_ALLOWED", Stamp::Iso);
        let allow = reply.header("allow").unwrap_or_else(|| panic!("{method} {path}: no Allow header"));
        assert!(allow.contains("GET"), "{method} {path}: Allow {allow}");
    }
}

async fn a_body_over_the_limit_is_413(backend: Backend) {
    let extra = BTreeMap::from([("TOKENOPS_MAX_BODY_BYTES".to_owned(), "2048".to_owned())]);
    let app = TestApp::spawn_with(backend, extra).await;
    let big = json!({ "customerRef": "c-big", "displayName": "x".repeat(4 * 1024) });
    let reply = app.post("/api/customers", &big).await;
    assert_error(&reply, 413, "PAYLOAD_TOO_LARGE", Stamp::Iso);
    app.get("/api/customers/c-big").await.expect(404);
    // The same app accepts a body within the limit.
    app.post("/api/customers", &json!({ "customerRef": "c-small", "displayName": "Small" })).await.expect(201);
}

/// One HTTP/1.1 response read off a raw connection: its status, its header lines (lower case)
/// and its body.
async fn read_raw_response(stream: &mut tokio::net::TcpStream) -> (u16, String, String) {
    use tokio::io::AsyncReadExt;
    let mut received = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&received).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let head = head.to_ascii_lowercase();
                let length = head
                    .lines()
                    .find_map(|line| line.strip_prefix("content-length:"))
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if body.len() >= length {
                    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                    return (status, head, body[..length].to_owned());
                }
            }
            let n = stream.read(&mut chunk).await.expect("read the response");
            assert!(n > 0, "the server closed the connection: {}", String::from_utf8_lossy(&received));
            received.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), read).await.expect("a response in time")
}

async fn a_refusal_made_before_the_body_arrives_keeps_the_connection_usable(backend: Backend) {
    use tokio::io::AsyncWriteExt;
    let app = TestApp::spawn(backend).await;
    let address = app.base_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let token = &app.tenant.token;
    // No Idempotency-Key: refused whatever the body says. The body follows its headers a moment
    // later, as a client streaming it sends it.
    let body = r#"{"customerRef":"c-late"}"#;
    let head = format!(
        "POST /api/customers HTTP/1.1\r\nHost: {address}\r\nAPI-Version: 1.0.0\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("send the head");
    stream.flush().await.expect("flush");
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    stream.write_all(body.as_bytes()).await.expect("send the body");
    let (status, headers, text) = read_raw_response(&mut stream).await;
    assert_eq!(status, 400, "{headers}{text}");
    assert!(text.contains("Idempotency-Key"), "{text}");
    assert!(!headers.contains("connection: close"), "{headers}");
    // The same connection carries the next request.
    let next = format!(
        "GET /api/customers/c-late HTTP/1.1\r\nHost: {address}\r\nAPI-Version: 1.0.0\r\nAuthorization: Bearer {token}\r\n\r\n"
    );
    stream.write_all(next.as_bytes()).await.expect("send the next request");
    let (status, headers, text) = read_raw_response(&mut stream).await;
    assert_eq!(status, 404, "{headers}{text}");
}

async fn a_post_without_json_content_type_is_415(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = r#"{"customerRef": "c-1"}"#;
    for content_type in [Some("text/plain"), Some("application/x-www-form-urlencoded"), None] {
        let mut request =
            app.request(Method::POST, "/api/customers").header("Idempotency-Key", Uuid::now_v7().to_string());
        if let Some(ct) = content_type {
            request = request.header("Content-Type", ct);
        }
        let reply = send(request.body(body)).await;
        assert_error(&reply, 415, "UNSUPPORTED_MEDIA_TYPE", Stamp::Iso);
    }
    app.get("/api/customers/c-1").await.expect(404);
    let charset = send(
        app.request(Method::POST, "/api/customers")
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .header("Content-Type", "application/json; charset=utf-8")
            .body(body),
    )
    .await;
    charset.expect(201);
}

/// Neither body nor Content-Type: no fields were sent, so the answer is the 400 that names what
/// is required (the filtered redeliver's "no filter"), not 415.
async fn a_write_with_no_body_at_all_is_400_naming_what_is_required(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let bare = |path: &str| app.request(Method::POST, path).header("Idempotency-Key", Uuid::now_v7().to_string());
    let customer = send(bare("/api/customers")).await;
    assert_error(&customer, 400, "VALIDATION_FAILED", Stamp::Iso);
    assert!(customer.body["message"].as_str().is_some_and(|m| m.contains("customerRef")), "{}", customer.body);
    let redeliver = send(bare("/api/webhook-events/redeliver")).await;
    assert_error(&redeliver, 400, "VALIDATION_FAILED", Stamp::Spaced);
    assert!(redeliver.body["message"].as_str().is_some_and(|m| m.contains("filter")), "{}", redeliver.body);
    // Declared JSON but empty is still malformed JSON.
    let declared = send(bare("/api/customers").header("Content-Type", "application/json")).await;
    assert_error(&declared, 400, "MALFORMED_JSON", Stamp::Iso);
}

/// A document stored as sent (a template's `defaultContent`) is read back inside its audit
/// record and replays, a few levels deeper: past 32 levels a body is refused, so nothing stored
/// can become unreadable to the audit search or the seal.
async fn a_body_nested_deeper_than_32_levels_is_400_and_the_audit_log_stays_readable(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }));
    let template =
        |key: &str, content: Value| json!({ "key": key, "name": "x", "action": "MINT", "defaultContent": content });
    let refused = app.post("/api/templates", &template("deep", nested(126))).await;
    assert_error(&refused, 400, "VALIDATION_FAILED", Stamp::Iso);
    assert!(message(&refused).contains("deeper than 32 levels"), "{}", refused.body);
    app.post("/api/templates", &template("deep", nested(30))).await.expect(201);
    app.get("/api/audit/events?size=100").await.expect(200);
    let export = app.request(Method::GET, "/api/audit/events/export").send().await.expect("export");
    assert_eq!(export.status().as_u16(), 200);
}

// ---------------------------------------------------------------------------------------------
// Path ids

async fn a_path_id_that_is_not_a_uuid_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_error(&app.get("/api/audit/events/not-a-uuid").await, 400, "VALIDATION_FAILED", Stamp::Iso);
    assert_error(&app.get("/api/webhook-events/123").await, 400, "VALIDATION_FAILED", Stamp::Spaced);
    // Only the dashed 8-4-4-4-12 form names a resource: the other spellings a parser takes are
    // refused, so one resource has one id.
    let id = Uuid::now_v7();
    let spellings = [format!("{{{id}}}"), format!("urn:uuid:{id}"), id.simple().to_string()];
    for spelling in spellings {
        let reply = app.get(&format!("/api/audit/events/{spelling}")).await;
        assert_error(&reply, 400, "VALIDATION_FAILED", Stamp::Iso);
    }
    let upper = id.to_string().to_uppercase();
    assert_error(&app.get(&format!("/api/audit/events/{upper}")).await, 404, "NOT_FOUND", Stamp::Iso);
}

async fn a_path_id_that_names_nothing_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let id = Uuid::now_v7();
    assert_error(&app.get(&format!("/api/audit/events/{id}")).await, 404, "NOT_FOUND", Stamp::Iso);
    assert_error(&app.get(&format!("/api/webhook-events/{id}")).await, 404, "NOT_FOUND", Stamp::Spaced);
}

// ---------------------------------------------------------------------------------------------
// Authentication

async fn a_request_without_authorization_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/api/customers", "/api/audit/events"] {
        assert_error(&get_with_auth(&app, path, None).await, 401, "UNAUTHORIZED", Stamp::Iso);
    }
    let write = send(
        app.raw(Method::POST, "/api/customers")
            .header("API-Version", "1.0.0")
            .header("Idempotency-Key", "k-1")
            .json(&json!({ "customerRef": "c-1" })),
    )
    .await;
    assert_error(&write, 401, "UNAUTHORIZED", Stamp::Iso);
    app.get("/api/customers/c-1").await.expect(404);
}

async fn an_authorization_that_is_not_bearer_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.tenant.token.clone();
    for header in [format!("Basic {token}"), token.clone(), "Bearer".to_owned(), "Bearer    ".to_owned()] {
        let reply = get_with_auth(&app, "/api/customers", Some(&header)).await;
        assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
    }
}

async fn the_bearer_scheme_is_case_insensitive(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let token = app.tenant.token.clone();
    for scheme in ["Bearer", "bearer", "BEARER", "bEaReR"] {
        let reply = get_with_auth(&app, "/api/customers", Some(&format!("{scheme} {token}"))).await;
        reply.expect(200);
    }
}

async fn a_garbage_token_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for token in ["garbage", "a.b.c", "eyJhbGciOiJFUzI1NiJ9.e30.", &format!("{}x", app.tenant.token)] {
        let reply = get_with_token(&app, "/api/customers", token).await;
        assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
    }
}

async fn a_refused_token_on_the_policy_areas_names_the_path(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/api/policies", "/api/templates", "/api/approvals/tasks"] {
        for token in ["garbage", "a.b.c"] {
            let reply = get_with_token(&app, path, token).await;
            assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
            assert_eq!(reply.body["path"], path, "{}", reply.body);
        }
    }
    // Elsewhere the envelope is unchanged.
    let reply = get_with_token(&app, "/api/customers", "garbage").await;
    assert!(reply.body.get("path").is_none(), "{}", reply.body);
}

async fn a_token_signed_by_another_key_under_the_issuers_kid_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let forged = app.issuer.sign_with(&foreign_key(), &app.issuer.kid(), &default_claims(&app));
    assert_error(&get_with_token(&app, "/api/customers", &forged).await, 401, "UNAUTHORIZED", Stamp::Iso);
    // The genuine token still works.
    app.get("/api/customers").await.expect(200);
}

async fn a_token_with_an_unknown_kid_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let unknown = app.issuer.sign_with(&foreign_key(), "not-published", &default_claims(&app));
    assert_error(&get_with_token(&app, "/api/customers", &unknown).await, 401, "UNAUTHORIZED", Stamp::Iso);
    let mut header = Header::new(Algorithm::ES256);
    header.kid = None;
    let no_kid = jsonwebtoken::encode(&header, &default_claims(&app), &foreign_key()).expect("sign");
    assert_error(&get_with_token(&app, "/api/customers", &no_kid).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

async fn a_token_whose_algorithm_is_not_its_keys_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let claims = default_claims(&app);
    // HS256 keyed with the published public key: the classic algorithm-confusion forgery.
    let public_jwk = app.issuer.jwks()["keys"][0].to_string();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some(app.issuer.kid());
    let hs256 =
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_secret(public_jwk.as_bytes())).expect("sign HS256");
    assert_error(&get_with_token(&app, "/api/customers", &hs256).await, 401, "UNAUTHORIZED", Stamp::Iso);
    // An unsigned token.
    let none_header = json!({ "alg": "none", "typ": "JWT", "kid": app.issuer.kid() });
    let unsigned =
        format!("{}.{}.", URL_SAFE_NO_PAD.encode(none_header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
    assert_error(&get_with_token(&app, "/api/customers", &unsigned).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

async fn a_token_from_another_issuer_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut claims = default_claims(&app);
    claims["iss"] = json!("https://idp.example.com");
    let wrong_iss = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &wrong_iss).await, 401, "UNAUTHORIZED", Stamp::Iso);
    let mut claims = default_claims(&app);
    claims.as_object_mut().expect("claims").remove("iss");
    let no_iss = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &no_iss).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

async fn an_expired_token_is_401_after_the_leeway(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let short = app.issuer.sign(&app.issuer.claims(&app.clock, "short-lived", Some(app.tenant.id), 60));
    get_with_token(&app, "/api/customers", &short).await.expect(200);
    // 29 seconds past exp: inside the 30-second leeway.
    app.clock.advance_millis(89_000);
    get_with_token(&app, "/api/customers", &short).await.expect(200);
    // Past exp plus the leeway.
    app.clock.advance_millis(2_000);
    let reply = get_with_token(&app, "/api/customers", &short).await;
    assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
    assert!(message(&reply).contains("expired"), "{}", reply.body);
    let mut claims = default_claims(&app);
    claims.as_object_mut().expect("claims").remove("exp");
    let no_exp = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &no_exp).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

async fn a_token_not_yet_valid_is_401_until_its_nbf_less_the_leeway(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut claims = default_claims(&app);
    let now = claims["iat"].as_i64().expect("iat");
    claims["nbf"] = json!(now + 120);
    let early = app.issuer.sign(&claims);
    let reply = get_with_token(&app, "/api/customers", &early).await;
    assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
    // Within the leeway of nbf the token is accepted.
    app.clock.advance_millis(91_000);
    get_with_token(&app, "/api/customers", &early).await.expect(200);
    claims["nbf"] = json!(now);
    get_with_token(&app, "/api/customers", &app.issuer.sign(&claims)).await.expect(200);
}

async fn a_token_without_a_subject_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut claims = default_claims(&app);
    claims.as_object_mut().expect("claims").remove("sub");
    let no_sub = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &no_sub).await, 401, "UNAUTHORIZED", Stamp::Iso);
    claims["sub"] = json!("  ");
    let blank_sub = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &blank_sub).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

async fn a_token_with_a_malformed_tenant_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let mut claims = default_claims(&app);
    claims["tenant_id"] = json!("not-a-uuid");
    let token = app.issuer.sign(&claims);
    assert_error(&get_with_token(&app, "/api/customers", &token).await, 401, "UNAUTHORIZED", Stamp::Iso);
}

/// The operator's token is genuine but names no organisation: the spec makes a token lacking
/// `tenant_id` a 401, on the policy endpoints with the default body that names the path.
async fn a_platform_operator_token_on_tenant_endpoints_is_401(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let operator = app.issuer.sign(&app.issuer.claims(&app.clock, "operator-client", None, 3_600));
    for path in ["/api/customers", "/api/audit/events", "/api/policies", "/api/approvals/tasks"] {
        let reply = get_with_token(&app, path, &operator).await;
        assert_error(&reply, 401, "UNAUTHORIZED", Stamp::Iso);
        assert!(message(&reply).contains("tenant_id"), "{path}: {}", reply.body);
        let names_path = path.starts_with("/api/policies") || path.starts_with("/api/approvals");
        assert_eq!(reply.body.get("path").and_then(|p| p.as_str()) == Some(path), names_path, "{path}: {}", reply.body);
    }
    let write = send(
        app.raw(Method::POST, "/api/customers")
            .header("API-Version", "1.0.0")
            .bearer_auth(&operator)
            .header("Idempotency-Key", "k-1")
            .json(&json!({ "customerRef": "c-1" })),
    )
    .await;
    assert_error(&write, 401, "UNAUTHORIZED", Stamp::Iso);
    assert_eq!(app.get("/api/customers").await.body["totalElements"], 0, "nothing was written");
}

// ---------------------------------------------------------------------------------------------
// Tenant scope

/// `{collection}/{id}` read by another organisation is the same 404 as an id that does not
/// exist (timestamps as `stamp`); answers that organisation's list of `collection`.
async fn assert_foreign_is_missing(app: &TestApp, collection: &str, id: &str, stamp: Stamp) -> Reply {
    let other = app.new_tenant();
    let foreign = app.get_as(&other, &format!("{collection}/{id}")).await;
    let missing_id = Uuid::now_v7().to_string();
    let missing = app.get_as(&other, &format!("{collection}/{missing_id}")).await;
    assert_error(&foreign, 404, "NOT_FOUND", stamp);
    assert_error(&missing, 404, "NOT_FOUND", stamp);
    assert_eq!(message(&foreign).replace(id, "ID"), message(&missing).replace(&missing_id, "ID"));
    app.get_as(&other, collection).await
}

async fn another_organisations_audit_record_is_404_like_a_missing_one(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    let list = app.get("/api/audit/events").await;
    let id = list.body["data"][0]["id"].as_str().expect("an audit record").to_owned();
    app.get(&format!("/api/audit/events/{id}")).await.expect(200);
    let their_list = assert_foreign_is_missing(&app, "/api/audit/events", &id, Stamp::Iso).await;
    assert_eq!(their_list.body["totalItems"], 0);
}

async fn another_organisations_event_is_404_like_a_missing_one(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    set_status(&app, "c-1", "INACTIVE").await;
    let list = app.get("/api/webhook-events").await;
    let id = list.body["items"][0]["id"].as_str().expect("an event").to_owned();
    app.get(&format!("/api/webhook-events/{id}")).await.expect(200);
    let their_list = assert_foreign_is_missing(&app, "/api/webhook-events", &id, Stamp::Spaced).await;
    assert_eq!(their_list.body["items"], json!([]));
}

async fn another_subject_of_the_same_organisation_sees_its_records(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    let colleague = Tenant {
        id: app.tenant.id,
        subject: "colleague".to_owned(),
        token: app.issuer.sign(&app.issuer.claims(&app.clock, "colleague", Some(app.tenant.id), 3_600)),
    };
    let reply =
        Reply::read(app.request_as(&colleague, Method::GET, "/api/customers/c-1").send().await.expect("GET")).await;
    reply.expect(200);
}

// ---------------------------------------------------------------------------------------------
// Unexpected failures

async fn an_unexpected_failure_is_500_system_error_occurred(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.db.fail_inserts_into("audit_records").await;
    let reply = app.post("/api/customers", &json!({ "customerRef": "c-1" })).await;
    assert_error(&reply, 500, "INTERNAL_ERROR", Stamp::Iso);
    assert_eq!(message(&reply), "System error occurred");
    assert!(!reply.body.to_string().contains("injected"), "the cause leaked: {}", reply.body);
    // The write did not land without its audit record.
    app.get("/api/customers/c-1").await.expect(404);
}

// ---------------------------------------------------------------------------------------------
// Operational endpoints

async fn readyz_reports_ready_with_the_store_name(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(app.raw(Method::GET, "/readyz")).await;
    reply.expect(200);
    let store = match backend {
        Backend::Sqlite => "sqlite",
        Backend::Postgres => "postgres",
    };
    assert_eq!(reply.body["store"], store, "{}", reply.body);
    assert!(reply.body["ledgerBlock"].as_u64().is_some(), "the ledger answered its latest block: {}", reply.body);
    let health = send(app.raw(Method::GET, "/healthz")).await;
    health.expect(200);
}

async fn metrics_count_requests_by_route_and_report_the_job_queue(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.get("/api/customers").await.expect(200);
    app.get("/api/no-such-route-xyz").await.expect(404);
    let reply = send(app.raw(Method::GET, "/metrics")).await;
    reply.expect(200);
    let text = reply.body.as_str().expect("Prometheus text");
    let counted = text
        .lines()
        .any(|line| line.starts_with("tokenops_http_requests_total{") && line.contains(r#"route="/api/customers""#));
    assert!(counted, "no request counter for /api/customers:\n{text}");
    assert!(text.lines().any(|line| line.starts_with("tokenops_jobs_queued")), "no queue gauge:\n{text}");
    assert!(!text.contains("no-such-route-xyz"), "an unmatched path became a label:\n{text}");
}

/// What a generated client is told a body needs matches what the service refuses without it:
/// required fields, values and bounds, and the bodies that may be left out.
async fn openapi_bodies_mark_their_required_fields_and_settable_values(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let doc = send(app.raw(Method::GET, "/openapi.json")).await.body;
    let schemas = &doc["components"]["schemas"];
    let required = |schema: &str| -> Vec<String> {
        schemas[schema]["required"]
            .as_array()
            .map(|r| r.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
            .unwrap_or_default()
    };
    for (schema, fields) in [
        ("ScriptIn", &["name", "source"][..]),
        ("AutomationIn", &["scriptId"][..]),
        ("StatusIn", &["status"][..]),
        ("AccountPatch", &["status"][..]),
        ("CustomerPatch", &["status"][..]),
        ("OverrideIn", &["key", "value", "type"][..]),
        ("CloneIn", &["name"][..]),
        ("WebhookIn", &["url", "eventTypes"][..]),
        ("ApprovalRequestIn", &["action", "approvers"][..]),
    ] {
        let marked = required(schema);
        assert!(fields.iter().all(|f| marked.iter().any(|m| m == f)), "{schema} marks {marked:?}, needs {fields:?}");
        // A required field the service refuses as null (400 naming it) must not offer null.
        for field in fields {
            let property = &schemas[schema]["properties"][field];
            let types = property["type"].as_array().cloned().unwrap_or_else(|| vec![property["type"].clone()]);
            let alternatives = property["oneOf"].as_array().cloned().unwrap_or_default();
            let nullable = types.contains(&json!("null")) || alternatives.iter().any(|a| a["type"] == "null");
            assert!(!nullable, "{schema}.{field} is required but nullable: {property}");
        }
    }
    // A parameter's value is a scalar, as the service takes it (a DECIMAL as a string).
    assert_eq!(
        schemas["OverrideIn"]["properties"]["value"]["type"],
        json!(["string", "number", "boolean"]),
        "{}",
        schemas["OverrideIn"]
    );
    let status = &schemas["AccountPatch"]["properties"]["status"];
    let settable =
        status["$ref"].as_str().and_then(|r| r.rsplit('/').next()).map(|name| &schemas[name]).unwrap_or(status);
    assert_eq!(settable["enum"], json!(["ACTIVE", "INACTIVE"]), "only the statuses a PATCH may set: {status}");

    // Numbers the service bounds say their bounds: version numbers start at 1, steps run 0 to 9.
    for (schema, field, minimum, maximum) in [
        ("CurrentVersionIn", "versionNumber", json!(1), Value::Null),
        ("DryRunIn", "version", json!(1), Value::Null),
        ("StepApproverIn", "step", json!(0), json!(9)),
    ] {
        let property = &schemas[schema]["properties"][field];
        assert_eq!((&property["minimum"], &property["maximum"]), (&minimum, &maximum), "{schema}.{field}: {property}");
    }

    // A body the service takes left out is not required, and is not offered as JSON null (which
    // the service refuses: a body must be an object).
    for (path, body) in [
        ("/api/automations/{automationId}/executions", "ExecutionIn"),
        ("/api/scripts/{scriptId}/dry-runs", "DryRunIn"),
        ("/api/approvals/tasks/{taskId}/approve", "DecisionIn"),
        ("/api/approvals/tasks/{taskId}/reject", "DecisionIn"),
        ("/api/webhook-events/{eventId}/redeliver", "RedeliverIn"),
    ] {
        let request_body = &doc["paths"][path]["post"]["requestBody"];
        assert_eq!(request_body["required"], json!(false), "POST {path}: {request_body}");
        let schema = &request_body["content"]["application/json"]["schema"];
        assert_eq!(schema, &json!({ "$ref": format!("#/components/schemas/{body}") }), "POST {path}");
    }
    // The bodies the service does require stay required.
    assert_eq!(doc["paths"]["/api/scripts"]["post"]["requestBody"]["required"], json!(true));
}

async fn openapi_document_is_3_1_and_lists_the_paths(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(app.raw(Method::GET, "/openapi.json")).await;
    reply.expect(200);
    assert!(reply.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    let doc = &reply.body;
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.1")), "{}", doc["openapi"]);
    for path in [
        "/api/customers",
        "/api/customers/{customerRef}",
        "/api/audit/events",
        "/api/audit/events/{eventId}",
        "/api/webhook-events",
        "/api/webhook-events/{eventId}",
    ] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from the document");
    }
}

/// The served document names its deployment (its base URL as the server, the embedded
/// provider's absolute token URL), bounds the common headers as the service checks them, and
/// describes the endpoints outside `/api` a client needs (supplement §2, §7 and §9).
async fn openapi_describes_the_deployment_the_headers_and_the_key_sets(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let doc = send(app.raw(Method::GET, "/openapi.json")).await.body;
    assert_eq!(doc["servers"], json!([{ "url": app.base_url }]));
    let token_url = &doc["components"]["securitySchemes"]["oauth2"]["flows"]["clientCredentials"]["tokenUrl"];
    assert_eq!(token_url, &json!(format!("{}/idp/oauth2/token", app.base_url)));

    let operation = &doc["paths"]["/api/customers"]["post"];
    let header = |name: &str| {
        operation["parameters"]
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == name && p["in"] == "header"))
            .unwrap_or_else(|| panic!("{name} among the parameters: {operation}"))
            .clone()
    };
    let version = header("API-Version");
    assert_eq!(version["schema"]["pattern"], r"^\d+\.\d+\.\d+$", "{version}");
    let key = header("Idempotency-Key");
    assert_eq!((&key["schema"]["minLength"], &key["schema"]["maxLength"]), (&json!(1), &json!(255)), "{key}");
    // The pattern refuses what the service refuses: blank, and characters outside printable ASCII.
    let pattern = key["schema"]["pattern"].as_str().expect("a key pattern");
    assert_eq!(pattern, r"^[\x20-\x7E]*[\x21-\x7E][\x20-\x7E]*$");

    for (path, operation_id) in [
        ("/idp/.well-known/openid-configuration", "idp.discovery"),
        ("/idp/.well-known/jwks.json", "idp.jwks"),
        ("/.well-known/webhook-jwks.json", "webhooks.jwks"),
    ] {
        let get = &doc["paths"][path]["get"];
        assert_eq!(get["operationId"], operation_id, "{path}: {get}");
        assert_eq!(get["security"], json!([{}]), "{path} takes no token");
        // Outside /api: no API-Version.
        assert!(get["parameters"].is_null(), "{path}: {get}");
        // What the document says of the key sets is what they serve.
        let served = send(app.raw(Method::GET, path)).await;
        served.expect(200);
        if path.ends_with("jwks.json") {
            let key = &served.body["keys"][0];
            for member in ["kty", "crv", "x", "y", "kid", "alg", "use"] {
                assert!(key[member].is_string(), "{path}: {member} in {key}");
            }
        } else {
            assert_eq!(served.body["token_endpoint"], token_url.clone(), "{}", served.body);
        }
    }
    let jwk = &doc["components"]["schemas"]["Jwk"]["properties"];
    assert!(jwk["use"].is_object() && jwk["kid"].is_object(), "{jwk}");

    // The operators' endpoints are described too, without token or API-Version, with what they
    // answer.
    for (path, operation_id, answer) in [
        ("/healthz", "operations.liveness", "application/json"),
        ("/readyz", "operations.readiness", "application/json"),
        ("/metrics", "operations.metrics", "text/plain"),
    ] {
        let get = &doc["paths"][path]["get"];
        assert_eq!(get["operationId"], operation_id, "{path}: {get}");
        assert_eq!(get["security"], json!([{}]), "{path} takes no token");
        assert!(get["parameters"].is_null(), "{path}: {get}");
        assert!(get["responses"]["200"]["content"][answer].is_object(), "{path}: {get}");
        let served = app.raw(Method::GET, path).send().await.expect(path);
        assert_eq!(served.status(), 200, "{path}");
        let content_type = served.headers()["content-type"].to_str().expect("content type").to_owned();
        assert!(content_type.starts_with(answer), "{path}: {content_type}");
    }
    let readiness = &doc["paths"]["/readyz"]["get"]["responses"];
    assert!(readiness["503"].is_object(), "{readiness}");
}

async fn openapi_operations_declare_api_version_and_their_security(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let doc = send(app.raw(Method::GET, "/openapi.json")).await.body;
    let schemes = &doc["components"]["securitySchemes"];
    assert_eq!(schemes["oauth2"]["type"], "oauth2", "{schemes}");
    assert_eq!(schemes["oauth2"]["flows"]["clientCredentials"]["tokenUrl"], "/idp/oauth2/token", "{schemes}");
    assert_eq!(schemes["bearer"]["scheme"], "bearer", "{schemes}");
    let paths = doc["paths"].as_object().expect("paths");
    let mut operations = 0;
    for (path, item) in paths.iter().filter(|(p, _)| p.starts_with("/api/")) {
        for (method, operation) in item.as_object().expect("path item") {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            operations += 1;
            let parameters = operation["parameters"].as_array().cloned().unwrap_or_default();
            let version = parameters.iter().find(|p| p["name"] == "API-Version" && p["in"] == "header");
            let version = version.unwrap_or_else(|| panic!("{method} {path} does not declare API-Version"));
            assert_eq!(version["required"], true, "{method} {path}");
            assert!(version["description"].as_str().is_some_and(|d| d.contains("1.0.0")), "{method} {path}");
            // Sign-in is the bootstrap that needs no bearer token (it declares an empty
            // requirement); every other operation requires a machine client's token or a user's.
            let expected =
                if path.starts_with("/api/auth/") { json!([{}]) } else { json!([{ "oauth2": [] }, { "bearer": [] }]) };
            assert_eq!(operation["security"], expected, "{method} {path}");
        }
    }
    assert!(operations >= 6, "only {operations} operations documented");
}

async fn docs_page_renders_the_document_without_external_scripts(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = send(app.raw(Method::GET, "/docs")).await;
    reply.expect(200);
    assert!(reply.header("content-type").is_some_and(|c| c.starts_with("text/html")));
    let html = reply.body.as_str().expect("HTML");
    assert!(html.contains("/openapi.json"));
    let lowered = html.to_ascii_lowercase();
    assert!(!lowered.contains("src=\"http") && !lowered.contains("src='http") && !lowered.contains("src=\"//"));
    assert!(!lowered.contains("<link rel=\"stylesheet\" href=\"http"));
}

async fn a_rotated_issuer_key_is_picked_up_and_the_previous_key_keeps_working(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.get("/api/customers").await.expect(200);
    app.issuer.rotate();
    let signed_with_new_key = app.new_tenant();
    // The key set was fetched moments ago; unknown kids refetch it at most every 10 s.
    let early =
        Reply::read(app.request_as(&signed_with_new_key, Method::GET, "/api/customers").send().await.expect("send"))
            .await;
    early.expect(401);
    app.clock.advance_millis(10_001);
    let later =
        Reply::read(app.request_as(&signed_with_new_key, Method::GET, "/api/customers").send().await.expect("send"))
            .await;
    later.expect(200);
    // Tokens of the previous key stay valid while the issuer still publishes it.
    app.get("/api/customers").await.expect(200);
}

async fn readyz_is_503_when_the_store_cannot_be_reached(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let ready = Reply::read(app.raw(Method::GET, "/readyz").send().await.expect("send")).await;
    ready.expect(200);
    app.app.store.close().await;
    let unready = Reply::read(app.raw(Method::GET, "/readyz").send().await.expect("send")).await;
    unready.expect(503);
    assert_eq!(unready.body["status"], "unavailable");
    assert_eq!(unready.body["failing"], serde_json::json!(["store"]), "names what fails: {}", unready.body);
    let message = unready.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("store cannot be reached"), "says why: {message}");
    // Liveness is not readiness: the process still answers.
    Reply::read(app.raw(Method::GET, "/healthz").send().await.expect("send")).await.expect(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_naming_the_ledger_when_the_node_cannot_be_reached() {
    let anvil = tokenops_testkit::anvil::Anvil::start().await;
    let app = TestApp::spawn_with(Backend::Sqlite, anvil.ledger_settings()).await;
    let ready = Reply::read(app.raw(Method::GET, "/readyz").send().await.expect("send")).await;
    ready.expect(200);
    anvil.stop().await;
    let unready = Reply::read(app.raw(Method::GET, "/readyz").send().await.expect("send")).await;
    unready.expect(503);
    assert_eq!(unready.body["failing"], json!(["ledger"]), "names what fails: {}", unready.body);
    let message = unready.body["message"].as_str().unwrap_or_default();
    assert!(message.contains("ledger cannot be reached"), "says why: {message}");
}

async fn openapi_operations_declare_their_error_responses(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let doc: Value =
        reqwest::get(format!("{}/openapi.json", app.base_url)).await.expect("get").json().await.expect("json");
    let post = &doc["paths"]["/api/customers"]["post"]["responses"];
    for status in ["201", "400", "401", "403", "409", "413", "415", "422", "500"] {
        assert!(post.get(status).is_some(), "POST /api/customers lacks {status}: {post}");
    }
    let get = &doc["paths"]["/api/customers"]["get"]["responses"];
    for status in ["200", "400", "401", "403", "500"] {
        assert!(get.get(status).is_some(), "GET /api/customers lacks {status}: {get}");
    }
    assert!(get.get("415").is_none(), "a GET takes no body, so no 415");
    // Sign-in takes no token, so it checks no permission, and no Idempotency-Key to retry with.
    let login = &doc["paths"]["/api/auth/login"]["post"]["responses"];
    assert!(login.get("403").is_none(), "sign-in has no 403: {login}");
    let retry = login["500"]["description"].as_str().unwrap_or_default();
    assert!(!retry.contains("Idempotency-Key"), "{retry}");
    // A strict page size says its bounds.
    let params = doc["paths"]["/api/customers"]["get"]["parameters"].as_array().expect("parameters");
    let size = params.iter().find(|p| p["name"] == "size").expect("size");
    assert_eq!((&size["schema"]["minimum"], &size["schema"]["maximum"]), (&json!(1), &json!(100)), "{size}");
    assert_eq!(doc["info"]["version"], "1.0.0", "info.version is the API's version");

    // OpenAPI requires a description on every response; a client generator needs a schema for
    // every success with a body.
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            operations += 1;
            let responses = operation["responses"].as_object().expect("responses");
            for (status, response) in responses {
                assert!(
                    response["description"].as_str().is_some_and(|d| !d.trim().is_empty()),
                    "{method} {path} {status} has no description"
                );
            }
            let successes: Vec<&String> = responses.keys().filter(|s| s.starts_with('2')).collect();
            assert!(!successes.is_empty(), "{method} {path} declares no success");
            for status in successes.into_iter().filter(|s| *s != "204") {
                let content = responses[status]["content"].as_object();
                assert!(content.is_some_and(|c| !c.is_empty()), "{method} {path} {status} has no content");
                for (media, body) in content.into_iter().flatten() {
                    assert!(body["schema"].is_object(), "{method} {path} {status} {media} has no schema");
                }
            }
        }
    }
    assert!(operations >= 50, "only {operations} operations documented");
}

/// Every operation that takes an Idempotency-Key documents the key's own answers: 409 while the
/// same key is still being processed, 422 once it was used with another request. Every keyed
/// write is admitted by `Writes::begin`, which answers both for any of them (a claim still in
/// its lease, or taken over by another request meanwhile), so none is excepted; a row of the
/// operation's own 409 says "or the key is in flight" rather than hiding the key's.
async fn openapi_keyed_writes_document_the_keys_409_and_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let doc = send(app.raw(Method::GET, "/openapi.json")).await.body;
    let mut keyed = 0;
    let mut undocumented = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let parameters = operation["parameters"].as_array().cloned().unwrap_or_default();
            if !parameters.iter().any(|p| p["in"] == "header" && p["name"] == "Idempotency-Key") {
                continue;
            }
            keyed += 1;
            let row = |status: &str| operation["responses"][status]["description"].as_str().unwrap_or_default();
            let (conflict, reused) = (row("409"), row("422"));
            if !(conflict.contains("in flight") || conflict.contains("still being processed")) {
                undocumented.push(format!("{} {path}: 409 {conflict:?}", method.to_uppercase()));
            }
            if !reused.contains("reused") {
                undocumented.push(format!("{} {path}: 422 {reused:?}", method.to_uppercase()));
            }
        }
    }
    assert!(undocumented.is_empty(), "keyed writes missing the key's 409 or 422: {undocumented:#?}");
    assert!(keyed >= 45, "only {keyed} keyed operations found");
}

/// The `Location` of a 201 or 202 reads back: GET on it is 200, for every write that answers
/// one in the default organisation. The others read theirs where they can be made: an
/// organisation, a group's member and a machine client (embedded provider) in `organisation`,
/// an approval request in `approvals`, a webhook and redeliveries (a receiver) in `webhooks`
/// and `webhook_deliveries`.
async fn every_location_answered_by_a_write_reads_back(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.as_uuid();
    let created = async |path: &str, body: Value| {
        let reply = app.post(path, &body).await;
        assert!([201, 202].contains(&reply.status), "POST {path}: {} {}", reply.status, reply.body);
        reply
    };
    let field = |reply: &Reply, name: &str| reply.body[name].as_str().expect(name).to_owned();
    let mut made = vec![created("/api/customers", json!({ "customerRef": "c-1" })).await];
    made.push(created("/api/contracts", json!({ "assetId": "USD" })).await);
    app.drain_jobs().await;
    made.push(created("/api/accounts", json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "USD" })).await);
    app.drain_jobs().await;
    let mint = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a-1", "amount": "10" });
    made.push(created("/api/transactions", mint).await);
    let template = json!({ "key": "treasury.transfers", "name": "Treasury", "action": "TRANSFER",
                           "defaultContent": { "appliesTo": { "action": "TRANSFER" } } });
    made.push(created("/api/templates", template).await);
    let content = json!({ "appliesTo": { "action": "TRANSFER" },
                          "rules": [{ "id": "any", "when": { "assetId": "== USD" }, "emit": { "autoApproval": true } }] });
    let policy =
        created("/api/policies", json!({ "templateKey": "system.transfer.approval", "content": content })).await;
    let versions = format!("/api/policies/{}/versions", field(&policy, "id"));
    made.push(policy);
    made.push(created(&versions, json!({ "content": content })).await);
    made.push(
        created(&format!("/api/tenants/{tenant}/groups"), json!({ "key": "checkers", "name": "Checkers" })).await,
    );
    let role = json!({ "name": "Readers", "permissions": ["customer:read"] });
    made.push(created(&format!("/api/tenants/{tenant}/roles"), role).await);
    let script = created("/api/scripts", json!({ "name": "sweep", "source": crate::scripts::SWEEP })).await;
    let script_id = field(&script, "scriptId");
    made.push(script);
    made.push(created(&format!("/api/scripts/{script_id}/clone"), json!({ "name": "sweep-eu" })).await);
    crate::scripts::publish(&app, &script_id).await;
    let parameters = json!([{ "key": "account", "value": "a-1", "type": "STRING" }]);
    let automation = created("/api/automations", json!({ "scriptId": script_id, "parameters": parameters })).await;
    let executions = format!("/api/automations/{}/executions", field(&automation, "automationId"));
    made.push(automation);
    made.push(created(&executions, json!({})).await);

    for reply in &made {
        let location =
            reply.header("location").unwrap_or_else(|| panic!("{} without Location: {}", reply.status, reply.body));
        let read = app.get(location).await;
        assert_eq!(read.status, 200, "GET {location} answered {}", read.body);
    }
}

async fn text_with_a_nul_character_is_400_on_every_store(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = app.post("/api/customers", &json!({ "customerRef": "nul-1", "displayName": "a\u{0}b" })).await;
    reply.expect(400);
    assert!(reply.body["message"].as_str().is_some_and(|m| m.contains("NUL")), "{}", reply.body);
    assert_eq!(app.db.count("customers", "").await, 0);
}

async fn a_nul_character_in_a_query_is_400_and_in_a_path_not_found_on_every_store(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let tenant = app.tenant.id.as_uuid();
    // Free-text filters and client-chosen references reach the store as text parameters, which
    // PostgreSQL cannot hold a NUL in: refused up front, never a store failure (500).
    for path in [
        "/api/audit/events?query=a%00".to_owned(),
        "/api/audit/events?action=%00".to_owned(),
        "/api/audit/events/export?resourceId=%00".to_owned(),
        "/api/approvals/requests?action=%00".to_owned(),
        "/api/scripts?name=%00".to_owned(),
        format!("/api/tenants/{tenant}/users?search=%00"),
        "/api/customers?status=ACTIVE&x%00=1".to_owned(),
    ] {
        let reply = app.get(&path).await;
        assert_eq!(reply.status, 400, "GET {path}: {}", reply.body);
        assert!(message(&reply).contains("NUL"), "GET {path}: {}", reply.body);
    }
    // A path value is read by its own rule: a reference or key that cannot be one is not found.
    for path in [
        "/api/customers/c%00",
        "/api/accounts/a%00/balances",
        "/api/accounts/a%00/locks",
        "/api/contracts/E%00R",
        "/api/templates/t%00",
        "/api/templates/%20system.transfer.approval",
        "/api/auth/client-secrets/x%00",
    ] {
        let reply = app.get(path).await;
        assert_eq!(reply.status, 404, "GET {path}: {}", reply.body);
    }
    // Writes too (those whose refusal comes after admission are audited, the NUL kept as U+FFFD).
    let status = json!({ "status": "INACTIVE" });
    for (path, body) in [
        ("/api/customers/c%00", &status),
        ("/api/accounts/a%00", &status),
        ("/api/contracts/E%00R", &status),
        ("/api/templates/t%00", &json!({ "name": "n" })),
    ] {
        let reply = app.patch(path, body).await;
        assert_eq!(reply.status, 404, "PATCH {path}: {}", reply.body);
    }
    let reply = app.post("/api/templates/t%00/deprecate", &json!({})).await;
    assert_eq!(reply.status, 404, "deprecate: {}", reply.body);
    // The contract's refusal came after admission: audited, the NUL kept as U+FFFD.
    let audited = app.get("/api/audit/events?resourceId=E%EF%BF%BDR").await;
    assert_eq!(audited.body["totalItems"], 1, "{}", audited.body);
    assert_eq!(audited.body["data"][0]["outcome"], "FAILURE", "{}", audited.body);
}

backends!(
    a_nul_character_in_a_query_is_400_and_in_a_path_not_found_on_every_store,
    a_key_given_twice_or_a_number_that_would_be_rounded_is_400_naming_the_field,
    missing_api_version_is_400_naming_supported_versions,
    malformed_api_version_is_400_naming_supported_versions,
    unsupported_api_version_is_400_naming_supported_versions,
    supported_api_version_is_served,
    a_write_without_api_version_changes_nothing,
    operational_endpoints_need_no_api_version_and_no_token,
    errors_on_customers_use_the_envelope_with_iso_timestamps,
    errors_on_webhook_events_use_spaced_timestamps,
    error_request_id_equals_the_response_header,
    every_response_carries_a_request_id,
    a_well_formed_request_id_is_echoed,
    a_malformed_request_id_is_replaced,
    the_request_id_is_recorded_on_the_audit_record,
    malformed_json_is_400_malformed_json_request,
    a_body_of_the_wrong_shape_names_the_field_in_details,
    a_wrong_type_is_described_in_json_words_not_rust_types,
    unknown_route_is_404_in_the_envelope,
    wrong_method_on_a_known_path_is_405_in_the_envelope,
    a_body_over_the_limit_is_413,
    a_refusal_made_before_the_body_arrives_keeps_the_connection_usable,
    a_post_without_json_content_type_is_415,
    a_write_with_no_body_at_all_is_400_naming_what_is_required,
    a_body_nested_deeper_than_32_levels_is_400_and_the_audit_log_stays_readable,
    a_path_id_that_is_not_a_uuid_is_400,
    a_path_id_that_names_nothing_is_404,
    a_request_without_authorization_is_401,
    an_authorization_that_is_not_bearer_is_401,
    the_bearer_scheme_is_case_insensitive,
    a_garbage_token_is_401,
    a_refused_token_on_the_policy_areas_names_the_path,
    a_token_signed_by_another_key_under_the_issuers_kid_is_401,
    a_token_with_an_unknown_kid_is_401,
    a_token_whose_algorithm_is_not_its_keys_is_401,
    a_token_from_another_issuer_is_401,
    an_expired_token_is_401_after_the_leeway,
    a_token_not_yet_valid_is_401_until_its_nbf_less_the_leeway,
    a_token_without_a_subject_is_401,
    a_token_with_a_malformed_tenant_is_401,
    a_platform_operator_token_on_tenant_endpoints_is_401,
    another_organisations_audit_record_is_404_like_a_missing_one,
    another_organisations_event_is_404_like_a_missing_one,
    another_subject_of_the_same_organisation_sees_its_records,
    an_unexpected_failure_is_500_system_error_occurred,
    readyz_reports_ready_with_the_store_name,
    metrics_count_requests_by_route_and_report_the_job_queue,
    openapi_document_is_3_1_and_lists_the_paths,
    openapi_bodies_mark_their_required_fields_and_settable_values,
    openapi_operations_declare_api_version_and_their_security,
    openapi_describes_the_deployment_the_headers_and_the_key_sets,
    docs_page_renders_the_document_without_external_scripts,
    a_rotated_issuer_key_is_picked_up_and_the_previous_key_keeps_working,
    readyz_is_503_when_the_store_cannot_be_reached,
    openapi_operations_declare_their_error_responses,
    openapi_keyed_writes_document_the_keys_409_and_422,
    every_location_answered_by_a_write_reads_back,
    text_with_a_nul_character_is_400_on_every_store,
);
