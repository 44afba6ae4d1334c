//! What an operator sees: after a day's flow (a MINT and a TRANSFER CONFIRMED, a TRANSFER that
//! fails on the ledger and opens a break), `/metrics` shows each family an operator alerts on,
//! with its labels, histograms with buckets and HELP text on every family; the alert rules and
//! the dashboard in `docs/monitoring/` load and name only metrics the service exports.

use crate::fixtures::{active_account, active_contract, customer};
use crate::support::key;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use tokenops_api::metrics::FAMILIES;
use tokenops_testkit::{Backend, TestApp, backends};

async fn submit(app: &TestApp, body: Value) -> String {
    let reply = app.write(Method::POST, "/api/transactions", &key(), &body).await;
    reply.expect(202);
    reply.body["transactionId"].as_str().expect("id").to_owned()
}

async fn settled(app: &TestApp, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let reply = app.get(&format!("/api/transactions/{id}")).await;
        let state = reply.body["state"].as_str().unwrap_or_default().to_owned();
        if ["CONFIRMED", "FAILED", "CANCELLED"].contains(&state.as_str()) {
            return reply.body;
        }
        assert!(Instant::now() < deadline, "not settled: {}", reply.body);
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names a PromQL text or a label matcher mentions that look like ours (series suffixes of
/// histograms folded into their family).
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes: Vec<char> = text.chars().collect();
    let mut i = 0;
    while let Some(start) = text[i..].find("tokenops_").map(|at| i + at) {
        let prefixed = start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == '_');
        let end =
            text[start..].find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(text.len(), |at| start + at);
        if !prefixed {
            let name = &text[start..end];
            let family = ["_bucket", "_sum", "_count"].iter().fold(name, |n, s| n.strip_suffix(s).unwrap_or(n));
            names.insert(family.to_owned());
        }
        i = end;
    }
    names
}

fn families() -> BTreeSet<&'static str> {
    FAMILIES.iter().map(|(name, ..)| *name).collect()
}

backends!(metrics_show_the_day_an_operator_alerts_on);

async fn metrics_show_the_day_an_operator_alerts_on(backend: Backend) {
    let (app, receiver) = crate::webhooks::app_with_receiver(backend, &[]).await;
    let url = receiver.url("/hooks");
    crate::webhooks::register(&app, &url, &["transaction.confirmed"], None).await;
    active_contract(&app, "EUR").await;
    customer(&app, "c-1").await;
    active_account(&app, "a", "c-1", "EUR").await;
    active_account(&app, "b", "c-1", "EUR").await;
    let mint = submit(&app, json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "a", "amount": "100.00" })).await;
    assert_eq!(settled(&app, &mint).await["state"], "CONFIRMED");
    let transfer =
        json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "a", "counterpartyRef": "b", "amount": "10.00" });
    let transfer = submit(&app, transfer).await;
    assert_eq!(settled(&app, &transfer).await["state"], "CONFIRMED");
    let overdraft = json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "b", "counterpartyRef": "a", "amount": "500.00" });
    let overdraft = submit(&app, overdraft).await;
    assert_eq!(settled(&app, &overdraft).await["failureCode"], "CHAIN_FAILED");
    // The registration's test delivery and the two confirmations reach the receiver.
    receiver.wait_for_path("/hooks", 3, Duration::from_secs(20)).await;
    app.drain_jobs().await;

    let text = reqwest::get(format!("{}/metrics", app.base_url)).await.expect("metrics").text().await.expect("text");
    let has = |prefix: &str, parts: &[&str]| {
        text.lines().any(|line| line.starts_with(prefix) && parts.iter().all(|part| line.contains(part)))
    };
    let expected: &[(&str, &[&str])] = &[
        ("tokenops_build_info{", &["version=\""]),
        ("tokenops_http_requests_total{", &["route=\"/api/transactions\"", "status=\"202\"", "method=\"POST\""]),
        ("tokenops_http_request_duration_seconds_bucket{", &["route=\"/api/transactions\"", "le=\"0.02\""]),
        ("tokenops_operations_entered_total{", &["type=\"MINT\"", "state=\"SUBMITTED\""]),
        ("tokenops_operations_entered_total{", &["type=\"TRANSFER\"", "state=\"CONFIRMED\""]),
        ("tokenops_operations_failed_total{", &["type=\"TRANSFER\"", "code=\"CHAIN_FAILED\""]),
        ("tokenops_operation_terminal_seconds_bucket{", &["type=\"TRANSFER\"", "state=\"CONFIRMED\"", "le=\"1\""]),
        ("tokenops_breaks_total{", &["reason=\"CHAIN_FAILED\""]),
        ("tokenops_jobs_queued{", &["kind=\""]),
        ("tokenops_jobs_oldest_due_age_seconds{", &["kind=\""]),
        ("tokenops_jobs_finished_total{", &["kind=\"operation.evaluate\"", "outcome=\""]),
        ("tokenops_job_duration_seconds_bucket{", &["kind=\"operation.evaluate\"", "le=\""]),
        ("tokenops_approvals_waiting ", &[]),
        ("tokenops_approvals_oldest_waiting_age_seconds ", &[]),
        ("tokenops_ledger_last_block ", &[]),
        ("tokenops_webhook_attempts_total{", &["outcome=\"delivered\""]),
        ("tokenops_webhook_attempt_duration_seconds_bucket{", &["outcome=\"delivered\"", "le=\""]),
        ("tokenops_webhook_backlog{", &["registration_status=\"ACTIVE\""]),
        ("tokenops_webhook_backlog{", &["registration_status=\"SUSPENDED\""]),
    ];
    for (prefix, parts) in expected {
        assert!(has(prefix, parts), "no {prefix}… with {parts:?} in /metrics:\n{text}");
    }
    // HELP on every family, and every family the service exports is one it declares.
    let typed: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# TYPE ")).filter_map(|l| l.split(' ').next()).collect();
    let helped: BTreeSet<&str> =
        text.lines().filter_map(|l| l.strip_prefix("# HELP ")).filter_map(|l| l.split(' ').next()).collect();
    let without_help: Vec<&&str> = typed.difference(&helped).collect();
    assert!(without_help.is_empty(), "families without HELP: {without_help:?}");
    let undeclared: Vec<&&str> = typed.iter().filter(|name| !families().contains(**name)).collect();
    assert!(undeclared.is_empty(), "families missing from tokenops_api::metrics::FAMILIES: {undeclared:?}");
}

#[test]
fn the_alert_rules_load_and_name_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/monitoring/alerts.yml");
    let python = std::env::var("TOKENOPS_TEST_PYTHON").expect("TOKENOPS_TEST_PYTHON (scripts/test sets it)");
    let loaded = std::process::Command::new(python)
        .args(["-c", "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))", path])
        .output()
        .expect("run python");
    assert!(loaded.status.success(), "the rules do not load: {}", String::from_utf8_lossy(&loaded.stderr));
    let rules: Value = serde_json::from_slice(&loaded.stdout).expect("json");
    let groups = rules["groups"].as_array().expect("groups");
    let mut alerts = 0;
    for group in groups {
        assert!(group["name"].is_string(), "{group}");
        for rule in group["rules"].as_array().expect("rules") {
            let name = rule["alert"].as_str().expect("every rule is an alert");
            let expr = rule["expr"].as_str().expect("expr");
            assert_eq!(expr.matches('(').count(), expr.matches(')').count(), "{name}: unbalanced ( in {expr}");
            assert_eq!(expr.matches('{').count(), expr.matches('}').count(), "{name}: unbalanced {{ in {expr}");
            assert!(["critical", "warning", "info"].contains(&rule["labels"]["severity"].as_str().unwrap_or_default()));
            assert!(rule["annotations"]["summary"].is_string(), "{name}: a summary");
            let named = metric_names(expr);
            assert!(!named.is_empty(), "{name} names no tokenops metric");
            let unknown: Vec<&String> = named.iter().filter(|n| !families().contains(n.as_str())).collect();
            assert!(unknown.is_empty(), "{name} names metrics the service does not export: {unknown:?}");
            alerts += 1;
        }
    }
    assert!(alerts >= 8, "the rules cover the service: {alerts}");
}

#[test]
fn the_dashboard_loads_and_names_only_exported_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/monitoring/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("dashboard")).expect("json");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut named = BTreeSet::new();
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            assert_eq!(expr.matches('(').count(), expr.matches(')').count(), "unbalanced ( in {expr}");
            named.extend(metric_names(expr));
        }
    }
    let unknown: Vec<&String> = named.iter().filter(|n| !families().contains(n.as_str())).collect();
    assert!(unknown.is_empty(), "the dashboard names metrics the service does not export: {unknown:?}");
    for family in
        ["tokenops_http_request_duration_seconds", "tokenops_operation_terminal_seconds", "tokenops_jobs_queued"]
    {
        assert!(named.contains(family), "the dashboard shows {family}");
    }
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

backends!(a_traceparent_follows_an_operation_from_its_submission_to_its_settlement);

/// The caller's `traceparent` is continued by the request (echoed with the request's own span)
/// and carried by the jobs it enqueues and the next steps' jobs, so the settlement is found from
/// the submission by the trace id.
async fn a_traceparent_follows_an_operation_from_its_submission_to_its_settlement(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "EUR").await;
    customer(&app, "c-1").await;
    active_account(&app, "a", "c-1", "EUR").await;
    let body = json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "a", "amount": "5.00" });
    let response = app
        .request_as(&app.tenant, Method::POST, "/api/transactions")
        .header("Idempotency-Key", key())
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .expect("submit");
    assert_eq!(response.status(), 202);
    let echoed = response.headers().get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(echoed.starts_with(&format!("00-{TRACE_ID}-")), "the trace continues: {echoed}");
    assert!(!echoed.contains(PARENT_SPAN), "with the request's own span id: {echoed}");
    let id = response.json::<Value>().await.expect("json")["transactionId"].as_str().expect("id").to_owned();
    assert_eq!(settled(&app, &id).await["state"], "CONFIRMED");
    let carrying = |kind: &str| format!("kind = '{kind}' AND CAST(payload AS TEXT) LIKE '%{TRACE_ID}%'");
    assert_eq!(app.db.count("jobs", &carrying("operation.evaluate")).await, 1, "the submission's job");
    assert!(app.db.count("jobs", &carrying("operation.track")).await >= 1, "the settlement's receipt polls");
    // A request without one starts its own trace.
    let other = app.request_as(&app.tenant, Method::GET, "/api/transactions").send().await.expect("list");
    let started = other.headers().get("traceparent").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    assert!(started.starts_with("00-") && !started.contains(TRACE_ID), "{started}");
}

/// A collector that records what is posted to it.
async fn collector() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Value>>>) {
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = received.clone();
    let router = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let json = headers.get("content-type").is_some_and(|c| c.as_bytes().starts_with(b"application/json"));
                if let (true, Ok(value)) = (json, serde_json::from_slice::<Value>(&body)) {
                    kept.lock().expect("lock").push(value);
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move { axum::serve(listener, router).await });
    (format!("http://{address}"), received)
}

/// Every exported span with its trace id, name and attributes.
fn spans(batches: &[Value]) -> Vec<Value> {
    let mut spans = Vec::new();
    for batch in batches {
        for resource in batch["resourceSpans"].as_array().into_iter().flatten() {
            assert_eq!(resource["resource"]["attributes"][0]["value"]["stringValue"], "tokenops");
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                spans.extend(scope["spans"].as_array().into_iter().flatten().cloned());
            }
        }
    }
    spans
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"].as_array()?.iter().find(|a| a["key"] == key)?["value"]["stringValue"].as_str()
}

/// With `TOKENOPS_OTLP_ENDPOINT` the real binary exports the request's span (a child of the
/// caller's, naming the route) and the span of the job it enqueued, in the caller's trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_otlp_with_the_callers_trace() {
    tokenops_identity::install_crypto_provider();
    let (endpoint, received) = collector().await;
    let dir = std::env::temp_dir().join(format!("tokenops-otlp-{}", uuid::Uuid::now_v7().simple()));
    let env = std::collections::BTreeMap::from([
        ("TOKENOPS_DATA_DIR".to_owned(), dir.join("data").display().to_string()),
        ("TOKENOPS_OTLP_ENDPOINT".to_owned(), endpoint),
    ]);
    let service = tokenops_testkit::ServiceProcess::start(crate::BINARY, &env).await;
    let credentials: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("data/operator-credentials.json")).expect("credentials"),
    )
    .expect("json");
    let client = reqwest::Client::new();
    let token: Value = client
        .post(format!("{}/idp/oauth2/token", service.base_url))
        .basic_auth(credentials["clientId"].as_str().unwrap_or_default(), credentials["clientSecret"].as_str())
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body("grant_type=client_credentials")
        .send()
        .await
        .expect("token")
        .json()
        .await
        .expect("json");
    let created = client
        .post(format!("{}/api/tenants", service.base_url))
        .bearer_auth(token["access_token"].as_str().unwrap_or_default())
        .header("API-Version", "1.0.0")
        .header("Idempotency-Key", key())
        .header("traceparent", format!("00-{TRACE_ID}-{PARENT_SPAN}-01"))
        .json(&json!({ "name": "Traced Bank", "owner": { "email": "o@traced.example", "firstName": "O", "lastName": "T" } }))
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);

    // The request's span and the invitation mail's job span arrive, in the caller's trace.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (request, job) = loop {
        let all = spans(&received.lock().expect("lock"));
        let ours: Vec<&Value> = all.iter().filter(|s| s["traceId"] == TRACE_ID).collect();
        let request = ours.iter().find(|s| attribute(s, "route") == Some("/api/tenants")).map(|s| (*s).clone());
        let job = ours.iter().find(|s| attribute(s, "kind") == Some("mail.send")).map(|s| (*s).clone());
        if let (Some(request), Some(job)) = (request, job) {
            break (request, job);
        }
        assert!(Instant::now() < deadline, "no spans of the trace within 20 s: {all:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(request["parentSpanId"], PARENT_SPAN, "the request continues the caller's span: {request}");
    assert_eq!(request["kind"], 2, "a server span");
    assert_eq!(request["name"], "POST /api/tenants");
    assert_eq!(attribute(&request, "status"), Some("201"));
    assert!(
        request["startTimeUnixNano"].as_str().unwrap_or_default()
            <= request["endTimeUnixNano"].as_str().unwrap_or_default()
    );
    assert_eq!(job["parentSpanId"], request["spanId"], "the job is a child of the request's span: {job}");
    let status = service.terminate().await;
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&dir);
}
