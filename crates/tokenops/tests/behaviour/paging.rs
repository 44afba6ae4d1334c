//! Paging over HTTP on both stores: style A (customers), style B (audit events, with sorts and
//! filters) and style D (webhook events, with signed cursors). Style C has no endpoint yet; it is
//! unit-tested in `tokenops-api`'s `extract::paging`.

use crate::support::strings;
use regex::Regex;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use tokenops_app::clock::Clock;
use tokenops_domain::Timestamp;
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

const SPACED_UTC: &str = r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$";

fn keys(body: &Value) -> BTreeSet<String> {
    body.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

#[track_caller]
fn assert_bad_request(reply: &Reply, field: &str) {
    reply.expect(400);
    let message = reply.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(field), "message should name {field}: {}", reply.body);
}

/// Moves the clock to the next whole second, so that rendered timestamps are exact.
fn align_clock(app: &TestApp) -> Timestamp {
    let now = app.clock.now().as_micros();
    let aligned = Timestamp::from_micros(now - now % 1_000_000 + 1_000_000);
    app.clock.set(aligned);
    aligned
}

fn iso(at: Timestamp) -> String {
    at.to_iso8601()
}

fn query_escape(text: &str) -> String {
    text.replace('+', "%2B").replace(':', "%3A")
}

async fn create_customer(app: &TestApp, customer_ref: &str) {
    app.post("/api/customers", &json!({ "customerRef": customer_ref })).await.expect(201);
}

async fn set_status(app: &TestApp, customer_ref: &str, status: &str) {
    app.patch(&format!("/api/customers/{customer_ref}"), &json!({ "status": status })).await.expect(200);
}

/// Flips `customer_ref` between INACTIVE and ACTIVE `n` times, one event each, `step_ms` apart.
async fn flip_status(app: &TestApp, customer_ref: &str, n: usize, step_ms: i64) {
    for i in 0..n {
        app.clock.advance_millis(step_ms);
        set_status(app, customer_ref, if i % 2 == 0 { "INACTIVE" } else { "ACTIVE" }).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Style A: GET /api/customers

async fn customers_page_has_exactly_the_style_a_envelope_with_defaults(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    let reply = app.get("/api/customers").await;
    reply.expect(200);
    assert_eq!(keys(&reply.body), set(&["content", "page", "size", "totalElements", "totalPages"]));
    assert_eq!(reply.body["page"], 0);
    assert_eq!(reply.body["size"], 20);
    assert_eq!(reply.body["totalElements"], 1);
    assert_eq!(reply.body["totalPages"], 1);
    assert_eq!(strings(&reply.body["content"], "customerRef"), ["c-1"]);
    let empty = app.request_as(&app.new_tenant(), Method::GET, "/api/customers").send().await.expect("GET");
    let empty = Reply::read(empty).await;
    empty.expect(200);
    assert_eq!(empty.body["content"], json!([]));
    assert_eq!(empty.body["totalElements"], 0);
    assert_eq!(empty.body["totalPages"], 0);
}

async fn customers_are_listed_oldest_first_across_pages(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    // References whose alphabetical order differs from their creation order.
    let created: Vec<String> = (0..25).map(|i| format!("cust-{:02}", (i * 7) % 25)).collect();
    for r in &created {
        app.clock.advance_millis(1);
        create_customer(&app, r).await;
    }
    let first = app.get("/api/customers").await;
    first.expect(200);
    assert_eq!(first.body["totalElements"], 25);
    assert_eq!(first.body["totalPages"], 2);
    assert_eq!(first.body["content"].as_array().map(Vec::len), Some(20));
    let second = app.get("/api/customers?page=1").await;
    second.expect(200);
    assert_eq!(second.body["page"], 1);
    assert_eq!(second.body["content"].as_array().map(Vec::len), Some(5));
    let mut listed = strings(&first.body["content"], "customerRef");
    listed.extend(strings(&second.body["content"], "customerRef"));
    assert_eq!(listed, created);
    let small = app.get("/api/customers?page=2&size=10").await;
    small.expect(200);
    assert_eq!(small.body["totalPages"], 3);
    assert_eq!(strings(&small.body["content"], "customerRef"), created[20..].to_vec());
}

async fn customers_size_outside_1_to_100_or_negative_page_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for query in ["size=0", "size=101", "size=-1", "size=abc", "size=", "size=10&size=20"] {
        assert_bad_request(&app.get(&format!("/api/customers?{query}")).await, "size");
    }
    for query in ["page=-1", "page=abc", "page=1.5", "page=99999999999999999999"] {
        assert_bad_request(&app.get(&format!("/api/customers?{query}")).await, "page");
    }
    let largest = app.get("/api/customers?size=100").await;
    largest.expect(200);
    assert_eq!(largest.body["size"], 100);
    let smallest = app.get("/api/customers?size=1").await;
    smallest.expect(200);
    assert_eq!(smallest.body["size"], 1);
}

async fn customers_page_beyond_the_end_is_empty_200(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    create_customer(&app, "c-2").await;
    for page in ["1", "7", "9223372036854775807"] {
        let reply = app.get(&format!("/api/customers?page={page}")).await;
        reply.expect(200);
        assert_eq!(reply.body["content"], json!([]), "page {page}");
        assert_eq!(reply.body["totalElements"], 2);
        assert_eq!(reply.body["totalPages"], 1);
    }
}

// ---------------------------------------------------------------------------------------------
// Style B: GET /api/audit/events

/// Three customers `a-1`, `b-2`, `c-3` created one second apart from an aligned instant, then
/// `a-1` made INACTIVE: four audit records at t0 .. t0+3s.
async fn audit_fixture(app: &TestApp) -> Timestamp {
    let t0 = align_clock(app);
    create_customer(app, "a-1").await;
    app.clock.advance_millis(1_000);
    create_customer(app, "b-2").await;
    app.clock.advance_millis(1_000);
    create_customer(app, "c-3").await;
    app.clock.advance_millis(1_000);
    set_status(app, "a-1", "INACTIVE").await;
    t0
}

async fn audit_page_has_exactly_the_style_b_envelope_with_defaults(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let reply = app.get("/api/audit/events").await;
    reply.expect(200);
    assert_eq!(keys(&reply.body), set(&["data", "page", "size", "totalItems", "totalPages"]));
    assert_eq!(reply.body["page"], 0);
    assert_eq!(reply.body["size"], 20);
    assert_eq!(reply.body["totalItems"], 4);
    assert_eq!(reply.body["totalPages"], 1);
    let paged = app.get("/api/audit/events?size=3&page=1").await;
    paged.expect(200);
    assert_eq!(paged.body["totalPages"], 2);
    assert_eq!(paged.body["data"].as_array().map(Vec::len), Some(1));
    let beyond = app.get("/api/audit/events?page=5").await;
    beyond.expect(200);
    assert_eq!(beyond.body["data"], json!([]));
}

async fn audit_size_above_100_is_reduced_and_below_1_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    // Past the 64-bit range is above 100 too.
    for size in ["500", "101", "99999999999999999999"] {
        let reply = app.get(&format!("/api/audit/events?size={size}")).await;
        reply.expect(200);
        assert_eq!(reply.body["size"], 100, "size={size}");
    }
    app.get("/api/audit/events?size=100").await.expect(200);
    for query in ["size=0", "size=-1", "size=abc"] {
        assert_bad_request(&app.get(&format!("/api/audit/events?{query}")).await, "size");
    }
    assert_bad_request(&app.get("/api/audit/events?page=-1").await, "page");
}

async fn audit_default_sort_is_newest_first(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let reply = app.get("/api/audit/events").await;
    reply.expect(200);
    assert_eq!(strings(&reply.body["data"], "resourceId"), ["a-1", "c-3", "b-2", "a-1"]);
    assert_eq!(strings(&reply.body["data"], "action")[0], "customer.update_status");
    let explicit = app.get("/api/audit/events?sort=occurredAt,desc").await;
    assert_eq!(explicit.body["data"], reply.body["data"]);
}

async fn audit_sort_by_occurred_at_without_direction_is_ascending(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    for query in ["sort=occurredAt", "sort=occurredAt,asc", "sort=occurredAt,ASC"] {
        let reply = app.get(&format!("/api/audit/events?{query}")).await;
        reply.expect(200);
        assert_eq!(strings(&reply.body["data"], "resourceId"), ["a-1", "b-2", "c-3", "a-1"], "{query}");
    }
}

async fn audit_sort_by_action_orders_by_action_then_the_next_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let asc = app.get("/api/audit/events?sort=action,asc&sort=occurredAt,desc").await;
    asc.expect(200);
    assert_eq!(
        strings(&asc.body["data"], "action"),
        ["customer.create", "customer.create", "customer.create", "customer.update_status"]
    );
    assert_eq!(strings(&asc.body["data"], "resourceId"), ["c-3", "b-2", "a-1", "a-1"]);
    let desc = app.get("/api/audit/events?sort=action,desc&sort=resourceId,asc").await;
    desc.expect(200);
    assert_eq!(strings(&desc.body["data"], "resourceId"), ["a-1", "a-1", "b-2", "c-3"]);
    assert_eq!(strings(&desc.body["data"], "action")[0], "customer.update_status");
}

/// The spec is silent on ties; the OpenAPI document states the rule: records equal in every
/// property given go by occurredAt, then id, in the direction of the last property given.
async fn audit_ties_go_by_occurrence_in_the_last_sort_propertys_direction(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let asc = app.get("/api/audit/events?sort=action,asc").await;
    asc.expect(200);
    assert_eq!(strings(&asc.body["data"], "resourceId"), ["a-1", "b-2", "c-3", "a-1"]);
    let desc = app.get("/api/audit/events?sort=action,desc").await;
    desc.expect(200);
    assert_eq!(strings(&desc.body["data"], "action")[0], "customer.update_status");
    assert_eq!(strings(&desc.body["data"], "resourceId")[1..], ["c-3", "b-2", "a-1"]);
}

async fn audit_sort_by_outcome_puts_failures_first_ascending_and_outcome_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    app.clock.advance_millis(1_000);
    // A refused write (no such customer) is audited as a FAILURE.
    app.patch("/api/customers/nobody", &json!({ "status": "INACTIVE" })).await.expect(404);
    app.clock.advance_millis(1_000);
    create_customer(&app, "c-2").await;
    let reply = app.get("/api/audit/events?sort=outcome,asc&sort=occurredAt,asc").await;
    reply.expect(200);
    assert_eq!(strings(&reply.body["data"], "outcome"), ["FAILURE", "SUCCESS", "SUCCESS"]);
    assert_eq!(strings(&reply.body["data"], "resourceId"), ["nobody", "c-1", "c-2"]);
    // Beyond the spec's filters, the failures are asked for directly, and by category; the
    // export takes the same filters.
    let failures = app.get("/api/audit/events?outcome=FAILURE").await;
    assert_eq!(strings(&failures.body["data"], "resourceId"), ["nobody"], "{}", failures.body);
    assert_eq!(app.get("/api/audit/events?outcome=SUCCESS").await.body["totalItems"], 2);
    assert_bad_request(&app.get("/api/audit/events?outcome=failure").await, "outcome");
    assert_eq!(app.get("/api/audit/events?category=CUSTOMERS").await.body["totalItems"], 3);
    assert_eq!(app.get("/api/audit/events?category=WEBHOOKS").await.body["totalItems"], 0);
    let exported = app.request(reqwest::Method::GET, "/api/audit/events/export?outcome=FAILURE").send().await;
    let csv = exported.expect("export").text().await.expect("csv");
    assert_eq!(csv.lines().count(), 2, "the header and the one failure: {csv}");
}

async fn audit_unknown_sort_property_or_direction_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for query in [
        "sort=nope",
        "sort=requestId",
        "sort=occurred_at",
        "sort=action,sideways",
        "sort=action,asc,desc",
        "sort=",
        "sort=occurredAt&sort=bogus,desc",
    ] {
        assert_bad_request(&app.get(&format!("/api/audit/events?{query}")).await, "sort");
    }
    for property in
        ["occurredAt", "createdAt", "action", "category", "source", "actorId", "resourceType", "resourceId", "outcome"]
    {
        app.get(&format!("/api/audit/events?sort={property},desc")).await.expect(200);
    }
}

async fn audit_filters_by_action_resource_request_source_and_type(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let by_action = app.get("/api/audit/events?action=customer.update_status").await;
    assert_eq!(by_action.body["totalItems"], 1);
    assert_eq!(strings(&by_action.body["data"], "resourceId"), ["a-1"]);
    let by_resource = app.get("/api/audit/events?resourceId=a-1").await;
    assert_eq!(by_resource.body["totalItems"], 2);
    let both = app.get("/api/audit/events?resourceId=a-1&action=customer.create").await;
    assert_eq!(both.body["totalItems"], 1);
    let request_id = by_action.body["data"][0]["requestId"].as_str().expect("requestId").to_owned();
    let by_request = app.get(&format!("/api/audit/events?requestId={request_id}")).await;
    assert_eq!(by_request.body["totalItems"], 1);
    assert_eq!(by_request.body["data"][0]["action"], "customer.update_status");
    assert_eq!(app.get("/api/audit/events?requestId=unknown").await.body["totalItems"], 0);
    assert_eq!(app.get("/api/audit/events?source=API").await.body["totalItems"], 4);
    assert_eq!(app.get("/api/audit/events?source=WORKER").await.body["totalItems"], 0);
    assert_bad_request(&app.get("/api/audit/events?source=ROBOT").await, "source");
    assert_eq!(app.get("/api/audit/events?resourceType=customer").await.body["totalItems"], 4);
    assert_eq!(app.get("/api/audit/events?resourceType=account").await.body["totalItems"], 0);
    assert_eq!(app.get("/api/audit/events?action=customer.create&size=2").await.body["totalPages"], 2);
}

async fn audit_filters_by_actor_ids_repeated_or_comma_separated(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let colleague = |subject: &str| Tenant {
        id: app.tenant.id,
        subject: subject.to_owned(),
        token: app.issuer.sign(&app.issuer.claims(&app.clock, subject, Some(app.tenant.id), 3_600)),
    };
    for (subject, customer_ref) in [("alice", "c-a"), ("bob", "c-b"), ("carol", "c-c")] {
        let reply = app
            .request_as(&colleague(subject), Method::POST, "/api/customers")
            .header("Idempotency-Key", customer_ref)
            .json(&json!({ "customerRef": customer_ref }))
            .send()
            .await
            .expect("POST");
        Reply::read(reply).await.expect(201);
    }
    let one = app.get("/api/audit/events?actorIds=bob").await;
    assert_eq!(strings(&one.body["data"], "actorId"), ["bob"]);
    for query in ["actorIds=alice,carol", "actorIds=alice&actorIds=carol", "actorIds=alice%2C%20carol"] {
        let reply = app.get(&format!("/api/audit/events?{query}&sort=actorId,asc")).await;
        reply.expect(200);
        assert_eq!(strings(&reply.body["data"], "actorId"), ["alice", "carol"], "{query}");
    }
    assert_eq!(app.get("/api/audit/events?actorIds=dave").await.body["totalItems"], 0);
    // A user's id matches in either case, as path ids do.
    let user = Uuid::now_v7().to_string();
    let reply = app
        .request_as(&colleague(&user), Method::POST, "/api/customers")
        .header("Idempotency-Key", "c-u")
        .json(&json!({ "customerRef": "c-u" }))
        .send()
        .await
        .expect("POST");
    Reply::read(reply).await.expect(201);
    let upper = app.get(&format!("/api/audit/events?actorIds={}", user.to_uppercase())).await;
    assert_eq!(strings(&upper.body["data"], "actorId"), [user.as_str()]);
}

async fn audit_occurred_window_is_half_open(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t0 = audit_fixture(&app).await;
    let at = |seconds: i64| query_escape(&iso(t0.plus_millis(seconds * 1_000)));
    let window = app.get(&format!("/api/audit/events?occurredFrom={}&occurredTo={}", at(1), at(2))).await;
    window.expect(200);
    assert_eq!(strings(&window.body["data"], "resourceId"), ["b-2"]);
    let from = app.get(&format!("/api/audit/events?occurredFrom={}", at(2))).await;
    assert_eq!(strings(&from.body["data"], "resourceId"), ["a-1", "c-3"]);
    let to = app.get(&format!("/api/audit/events?occurredTo={}", at(2))).await;
    assert_eq!(strings(&to.body["data"], "resourceId"), ["b-2", "a-1"]);
    // An offset other than Z names the same instant: t0+1s written as local time at +02:00.
    let shifted_text = iso(t0.plus_millis(1_000 + 7_200_000)).replace('Z', "+02:00");
    let shifted =
        app.get(&format!("/api/audit/events?occurredFrom={}&occurredTo={}", query_escape(&shifted_text), at(2))).await;
    shifted.expect(200);
    assert_eq!(strings(&shifted.body["data"], "resourceId"), ["b-2"]);
    // Equal bounds are an empty window, not an inverted one: 200 with nothing in it.
    let empty = app.get(&format!("/api/audit/events?occurredFrom={}&occurredTo={}", at(2), at(2))).await;
    empty.expect(200);
    assert_eq!(empty.body["totalItems"], 0, "{}", empty.body);
}

async fn audit_inverted_or_unparseable_window_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t0 = audit_fixture(&app).await;
    let at = |seconds: i64| query_escape(&iso(t0.plus_millis(seconds * 1_000)));
    assert_bad_request(
        &app.get(&format!("/api/audit/events?occurredFrom={}&occurredTo={}", at(2), at(1))).await,
        "occurredFrom",
    );
    for value in ["yesterday", "2026-13-01T00:00:00Z", "2026-01-01", "2026-01-01T00:00:00", "1700000000"] {
        assert_bad_request(&app.get(&format!("/api/audit/events?occurredFrom={value}")).await, "occurredFrom");
        assert_bad_request(&app.get(&format!("/api/audit/events?occurredTo={value}")).await, "occurredTo");
    }
}

async fn audit_query_is_a_case_insensitive_prefix_of_at_most_128_characters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    audit_fixture(&app).await;
    let upper = app.get("/api/audit/events?query=CUSTOMER.UPD").await;
    upper.expect(200);
    assert_eq!(strings(&upper.body["data"], "action"), ["customer.update_status"]);
    let resource = app.get("/api/audit/events?query=B-").await;
    assert_eq!(strings(&resource.body["data"], "resourceId"), ["b-2"]);
    // A prefix, not a substring; and LIKE wildcards are literal.
    assert_eq!(app.get("/api/audit/events?query=update_status").await.body["totalItems"], 0);
    assert_eq!(app.get("/api/audit/events?query=%25").await.body["totalItems"], 0);
    assert_eq!(app.get("/api/audit/events?query=_-1").await.body["totalItems"], 0);
    let longest = "q".repeat(128);
    app.get(&format!("/api/audit/events?query={longest}")).await.expect(200);
    let too_long = "q".repeat(129);
    assert_bad_request(&app.get(&format!("/api/audit/events?query={too_long}")).await, "query");
    // Counted in characters, not bytes.
    let accented = "é".repeat(100);
    app.get(&format!("/api/audit/events?query={accented}")).await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// Style D: GET /api/webhook-events

async fn walk(app: &TestApp, first: &str) -> (Vec<Value>, Vec<Value>) {
    let mut items = Vec::new();
    let mut cursors = Vec::new();
    let mut path = first.to_owned();
    for _ in 0..50 {
        let reply = app.get(&path).await;
        reply.expect(200);
        assert!(reply.body.as_object().is_some_and(|o| o.contains_key("nextCursor")), "{}", reply.body);
        items.extend(reply.body["items"].as_array().cloned().unwrap_or_default());
        let next = reply.body["nextCursor"].clone();
        cursors.push(next.clone());
        match next.as_str() {
            Some(cursor) => {
                let sep = if first.contains('?') { '&' } else { '?' };
                path = format!("{first}{sep}cursor={cursor}");
            }
            None => return (items, cursors),
        }
    }
    panic!("the cursor walk did not end");
}

async fn webhook_events_walk_newest_first_by_cursor_without_duplicates(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 5, 1_000).await;
    let first = app.get("/api/webhook-events?limit=2").await;
    first.expect(200);
    assert_eq!(keys(&first.body), set(&["items", "nextCursor", "limit"]));
    assert_eq!(first.body["limit"], 2);
    assert_eq!(first.body["items"].as_array().map(Vec::len), Some(2));
    assert!(first.body["nextCursor"].is_string());
    let (items, cursors) = walk(&app, "/api/webhook-events?limit=2").await;
    assert_eq!(items.len(), 5);
    assert_eq!(cursors.len(), 3);
    assert!(cursors[..2].iter().all(Value::is_string));
    assert_eq!(cursors[2], Value::Null);
    let ids: BTreeSet<&str> = items.iter().filter_map(|i| i["id"].as_str()).collect();
    assert_eq!(ids.len(), 5, "duplicates in the walk");
    // One second apart, so newest first means strictly decreasing occurredAt.
    let times: Vec<&str> = items.iter().filter_map(|i| i["occurredAt"].as_str()).collect();
    let mut newest_first = times.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    newest_first.dedup();
    assert_eq!(times, newest_first);
    let spaced = Regex::new(SPACED_UTC).expect("regex");
    for item in &items {
        assert!(spaced.is_match(item["occurredAt"].as_str().unwrap_or_default()), "{item}");
        assert_eq!(item["type"], "customer.status_changed");
        assert_eq!(item["resource"], json!({ "type": "customer", "id": "c-1" }));
    }
}

async fn webhook_events_with_the_same_instant_are_each_walked_once(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    create_customer(&app, "c-2").await;
    // No clock movement: every event has the same occurredAt.
    flip_status(&app, "c-1", 3, 0).await;
    flip_status(&app, "c-2", 4, 0).await;
    for limit in [1, 2, 3] {
        let (items, _) = walk(&app, &format!("/api/webhook-events?limit={limit}")).await;
        let ids: BTreeSet<&str> = items.iter().filter_map(|i| i["id"].as_str()).collect();
        assert_eq!(items.len(), 7, "limit {limit}");
        assert_eq!(ids.len(), 7, "limit {limit}: duplicates");
    }
}

async fn events_arriving_during_a_walk_neither_repeat_nor_shift_it(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 4, 1_000).await;
    let first = app.get("/api/webhook-events?limit=2").await;
    first.expect(200);
    let cursor = first.body["nextCursor"].as_str().expect("cursor").to_owned();
    let mut seen: Vec<String> = strings(&first.body["items"], "id");
    // Newer events arrive before the next page is read.
    flip_status(&app, "c-1", 3, 1_000).await;
    let (rest, _) = walk(&app, "/api/webhook-events?limit=2").await;
    assert_eq!(rest.len(), 7);
    let second = app.get(&format!("/api/webhook-events?limit=2&cursor={cursor}")).await;
    second.expect(200);
    seen.extend(strings(&second.body["items"], "id"));
    assert_eq!(second.body["nextCursor"], Value::Null, "only the two older events remain");
    let older: Vec<String> = strings(&Value::Array(rest[5..].to_vec()), "id");
    assert_eq!(seen[2..].to_vec(), older);
}

async fn customers_created_at_the_same_instant_page_without_duplicates(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for i in 0..7 {
        create_customer(&app, &format!("same-{i}")).await;
    }
    let mut listed = Vec::new();
    for page in 0..4 {
        let reply = app.get(&format!("/api/customers?size=2&page={page}")).await;
        reply.expect(200);
        listed.extend(strings(&reply.body["content"], "customerRef"));
    }
    let distinct: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(listed.len(), 7);
    assert_eq!(distinct.len(), 7);
}

async fn audit_records_of_the_same_instant_page_without_duplicates(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for i in 0..7 {
        create_customer(&app, &format!("same-{i}")).await;
    }
    for sort in ["", "&sort=occurredAt,asc", "&sort=action,asc"] {
        let mut listed = Vec::new();
        for page in 0..4 {
            let reply = app.get(&format!("/api/audit/events?size=2&page={page}{sort}")).await;
            reply.expect(200);
            listed.extend(strings(&reply.body["data"], "id"));
        }
        let distinct: BTreeSet<&String> = listed.iter().collect();
        assert_eq!((listed.len(), distinct.len()), (7, 7), "sort {sort:?}");
    }
}

async fn webhook_events_default_limit_is_20(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 21, 10).await;
    let reply = app.get("/api/webhook-events").await;
    reply.expect(200);
    assert_eq!(reply.body["limit"], 20);
    assert_eq!(reply.body["items"].as_array().map(Vec::len), Some(20));
    assert!(reply.body["nextCursor"].is_string());
    let all = app.get("/api/webhook-events?limit=100").await;
    all.expect(200);
    assert_eq!(all.body["items"].as_array().map(Vec::len), Some(21));
    assert_eq!(all.body["nextCursor"], Value::Null);
}

async fn webhook_events_empty_history_is_an_empty_page_with_null_cursor(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = app.get("/api/webhook-events").await;
    reply.expect(200);
    assert_eq!(reply.body, json!({ "items": [], "nextCursor": null, "limit": 20 }));
}

async fn webhook_events_limit_outside_1_to_100_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let spaced = Regex::new(SPACED_UTC).expect("regex");
    for query in ["limit=0", "limit=101", "limit=-1", "limit=abc", "limit=1&limit=2"] {
        let reply = app.get(&format!("/api/webhook-events?{query}")).await;
        assert_bad_request(&reply, "limit");
        let stamp = reply.body["timestamp"].as_str().unwrap_or_default();
        assert!(spaced.is_match(stamp), "{stamp}");
    }
    app.get("/api/webhook-events?limit=1").await.expect(200);
    app.get("/api/webhook-events?limit=100").await.expect(200);
}

async fn first_cursor(app: &TestApp, query: &str) -> String {
    let reply = app.get(&format!("/api/webhook-events?{query}")).await;
    reply.expect(200);
    reply.body["nextCursor"].as_str().expect("a next cursor").to_owned()
}

async fn a_tampered_or_foreign_cursor_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 3, 1_000).await;
    let cursor = first_cursor(&app, "limit=1").await;
    app.get(&format!("/api/webhook-events?limit=1&cursor={cursor}")).await.expect(200);
    // Flip one character at several places: payload start, middle, signature end.
    for at in [0, cursor.len() / 3, cursor.len() / 2, cursor.len() - 1] {
        let mut tampered: Vec<char> = cursor.chars().collect();
        tampered[at] = if tampered[at] == 'A' { 'B' } else { 'A' };
        let tampered: String = tampered.into_iter().collect();
        let reply = app.get(&format!("/api/webhook-events?limit=1&cursor={tampered}")).await;
        assert_bad_request(&reply, "cursor");
        assert_eq!(reply.body["code"], "INVALID_CURSOR");
    }
    for garbage in ["garbage", "", "a.b", "e30.e30", &format!("{cursor}x")] {
        assert_bad_request(&app.get(&format!("/api/webhook-events?cursor={garbage}")).await, "cursor");
    }
    // A cursor another deployment issued (another store, another key).
    let other = TestApp::spawn(backend).await;
    create_customer(&other, "c-1").await;
    flip_status(&other, "c-1", 2, 1_000).await;
    let foreign = first_cursor(&other, "limit=1").await;
    assert_bad_request(&app.get(&format!("/api/webhook-events?limit=1&cursor={foreign}")).await, "cursor");
}

async fn a_cursor_reused_with_different_filters_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let t0 = align_clock(&app);
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 4, 1_000).await;
    let from = query_escape(&iso(t0));
    let plain = first_cursor(&app, "limit=1").await;
    for changed in ["type=customer.status_changed", &format!("from={from}"), &format!("to={from}")] {
        let reply = app.get(&format!("/api/webhook-events?limit=1&{changed}&cursor={plain}")).await;
        assert_bad_request(&reply, "cursor");
    }
    let typed = first_cursor(&app, "limit=1&type=customer.status_changed").await;
    app.get(&format!("/api/webhook-events?limit=1&type=customer.status_changed&cursor={typed}")).await.expect(200);
    assert_bad_request(&app.get(&format!("/api/webhook-events?limit=1&cursor={typed}")).await, "cursor");
    let windowed = first_cursor(&app, &format!("limit=1&from={from}")).await;
    app.get(&format!("/api/webhook-events?limit=1&from={from}&cursor={windowed}")).await.expect(200);
    let later = query_escape(&iso(t0.plus_millis(1_000)));
    assert_bad_request(
        &app.get(&format!("/api/webhook-events?limit=1&from={later}&cursor={windowed}")).await,
        "cursor",
    );
}

async fn webhook_events_unknown_type_is_400_and_type_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    flip_status(&app, "c-1", 2, 1_000).await;
    assert_bad_request(&app.get("/api/webhook-events?type=customer.deleted").await, "type");
    assert_bad_request(&app.get("/api/webhook-events?type=CUSTOMER.STATUS_CHANGED").await, "type");
    let typed = app.get("/api/webhook-events?type=customer.status_changed").await;
    assert_eq!(typed.body["items"].as_array().map(Vec::len), Some(2));
    let other = app.get("/api/webhook-events?type=account.status_changed").await;
    other.expect(200);
    assert_eq!(other.body["items"], json!([]));
}

async fn webhook_events_window_is_half_open_and_from_must_precede_to(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create_customer(&app, "c-1").await;
    let t0 = align_clock(&app);
    // Events at t0+1s, t0+2s, t0+3s.
    flip_status(&app, "c-1", 3, 1_000).await;
    let at = |seconds: i64| query_escape(&iso(t0.plus_millis(seconds * 1_000)));
    let window = app.get(&format!("/api/webhook-events?from={}&to={}", at(2), at(3))).await;
    window.expect(200);
    let statuses: Vec<&str> =
        window.body["items"].as_array().expect("items").iter().filter_map(|i| i["data"]["status"].as_str()).collect();
    assert_eq!(statuses, ["ACTIVE"], "only the event at t0+2s");
    let spaced = window.body["items"][0]["occurredAt"].as_str().unwrap_or_default().to_owned();
    assert_eq!(spaced, t0.plus_millis(2_000).to_spaced_utc());
    for (from, to) in [(at(2), at(2)), (at(3), at(2))] {
        let reply = app.get(&format!("/api/webhook-events?from={from}&to={to}")).await;
        assert_bad_request(&reply, "from");
    }
    assert_bad_request(&app.get("/api/webhook-events?from=not-a-date").await, "from");
    assert_bad_request(&app.get("/api/webhook-events?to=2026-02-30T00:00:00Z").await, "to");
}

async fn a_cursor_of_another_organisation_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let other = app.new_tenant();
    for tenant in [&app.tenant, &other] {
        for (i, status) in ["", "INACTIVE", "ACTIVE"].iter().enumerate() {
            let path = if i == 0 { "/api/customers" } else { "/api/customers/c-1" };
            let method = if i == 0 { Method::POST } else { Method::PATCH };
            let body = if i == 0 { json!({ "customerRef": "c-1" }) } else { json!({ "status": status }) };
            let reply = Reply::read(
                app.request_as(tenant, method, path)
                    .header("Idempotency-Key", format!("k-{i}"))
                    .json(&body)
                    .send()
                    .await
                    .expect("send"),
            )
            .await;
            assert!(reply.status == 200 || reply.status == 201, "{}", reply.body);
        }
    }
    let mine = first_cursor(&app, "limit=1").await;
    // The same endpoint and filters, but a cursor issued to another organisation.
    let reply = Reply::read(
        app.request_as(&other, Method::GET, &format!("/api/webhook-events?limit=1&cursor={mine}"))
            .send()
            .await
            .expect("send"),
    )
    .await;
    assert_bad_request(&reply, "cursor");
}

// ---------------------------------------------------------------------------------------------
// Style C: GET /api/tenants/{tenantId}/roles

fn roles_path(app: &TestApp, query: &str) -> String {
    format!("/api/tenants/{}/roles{query}", app.tenant.id)
}

fn role_names(reply: &Reply) -> Vec<String> {
    reply.body["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| r["name"].as_str().expect("name").to_owned())
        .collect()
}

async fn roles_page_has_exactly_the_style_c_envelope_sorted_by_name(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let reply = app.get(&roles_path(&app, "")).await;
    reply.expect(200);
    let keys: BTreeSet<&str> = reply.body.as_object().expect("object").keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["items", "pageNumber", "pageSize", "totalResults"]));
    assert_eq!(reply.body["pageNumber"], 0);
    assert_eq!(reply.body["pageSize"], 20);
    assert_eq!(reply.body["totalResults"], 3);
    assert_eq!(role_names(&reply), ["ADMIN", "SUPER_ADMIN", "USER"]);
    let second = app.get(&roles_path(&app, "?size=2&page=1")).await;
    second.expect(200);
    assert_eq!(role_names(&second), ["USER"]);
    assert_eq!(second.body["pageNumber"], 1);
    assert_eq!(second.body["pageSize"], 2);
    assert_eq!(second.body["totalResults"], 3);
}

async fn roles_sort_is_property_and_direction_repeatable_and_validated(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_eq!(role_names(&app.get(&roles_path(&app, "?sort=name,desc")).await), ["USER", "SUPER_ADMIN", "ADMIN"]);
    assert_eq!(
        role_names(&app.get(&roles_path(&app, "?sort=createdAt&sort=name,desc")).await),
        ["USER", "SUPER_ADMIN", "ADMIN"]
    );
    for bad in ["?sort=name,sideways", "?sort=name,asc,desc", "?size=0", "?size=101", "?page=-1"] {
        app.get(&roles_path(&app, bad)).await.expect(400);
    }
    // The spec: "Unknown sort property on identity lists is 500".
    app.get(&roles_path(&app, "?sort=nope")).await.expect(500);
}

async fn a_path_naming_another_organisation_is_403_invalid_tenant_id(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let other = app.new_tenant();
    let reply = app.get(&format!("/api/tenants/{}/roles", other.id)).await;
    reply.expect(403);
    assert_eq!(reply.body["message"], "Invalid tenant id");
    app.get("/api/tenants/not-a-uuid/roles").await.expect(400);
}

backends!(
    customers_page_has_exactly_the_style_a_envelope_with_defaults,
    customers_are_listed_oldest_first_across_pages,
    customers_size_outside_1_to_100_or_negative_page_is_400,
    customers_page_beyond_the_end_is_empty_200,
    audit_page_has_exactly_the_style_b_envelope_with_defaults,
    audit_size_above_100_is_reduced_and_below_1_is_400,
    audit_default_sort_is_newest_first,
    audit_sort_by_occurred_at_without_direction_is_ascending,
    audit_sort_by_action_orders_by_action_then_the_next_key,
    audit_ties_go_by_occurrence_in_the_last_sort_propertys_direction,
    audit_sort_by_outcome_puts_failures_first_ascending_and_outcome_filters,
    audit_unknown_sort_property_or_direction_is_400,
    audit_filters_by_action_resource_request_source_and_type,
    audit_filters_by_actor_ids_repeated_or_comma_separated,
    audit_occurred_window_is_half_open,
    audit_inverted_or_unparseable_window_is_400,
    audit_query_is_a_case_insensitive_prefix_of_at_most_128_characters,
    webhook_events_walk_newest_first_by_cursor_without_duplicates,
    webhook_events_with_the_same_instant_are_each_walked_once,
    webhook_events_default_limit_is_20,
    events_arriving_during_a_walk_neither_repeat_nor_shift_it,
    customers_created_at_the_same_instant_page_without_duplicates,
    audit_records_of_the_same_instant_page_without_duplicates,
    webhook_events_empty_history_is_an_empty_page_with_null_cursor,
    webhook_events_limit_outside_1_to_100_is_400,
    a_tampered_or_foreign_cursor_is_400,
    a_cursor_reused_with_different_filters_is_400,
    webhook_events_unknown_type_is_400_and_type_filters,
    webhook_events_window_is_half_open_and_from_must_precede_to,
    a_cursor_of_another_organisation_is_400,
    roles_page_has_exactly_the_style_c_envelope_sorted_by_name,
    roles_sort_is_property_and_direction_repeatable_and_validated,
    a_path_naming_another_organisation_is_403_invalid_tenant_id,
);
