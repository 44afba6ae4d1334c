//! `GET /api/audit/events/export`: the whole filtered audit log as RFC 4180 CSV, in the list's
//! order, with the list's filters and checks, formula cells neutralised, and its own permission.

use crate::support::strings;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops::audit_verify::{RecordEnds, parse_csv};
use tokenops_testkit::organisation::{call, create_organisation, invite_and_activate};
use tokenops_testkit::{Backend, Reply, TestApp, backends};

const HEADER: [&str; 19] = [
    "id",
    "occurredAt",
    "createdAt",
    "action",
    "category",
    "source",
    "actorId",
    "resourceType",
    "resourceId",
    "outcome",
    "requestId",
    "idempotencyKey",
    "httpStatus",
    "detail",
    "occurredAtMicros",
    "createdAtMicros",
    "chainSeq",
    "blockNumber",
    "recordHash",
];

/// The export at `query`: its header row checked, then its records as maps by column name.
fn rows(reply: &Reply) -> Vec<BTreeMap<String, String>> {
    reply.expect(200);
    assert_eq!(reply.header("content-type"), Some("text/csv; charset=utf-8"));
    assert!(reply.header("content-disposition").is_some_and(|d| d.starts_with("attachment")));
    let text = reply.body.as_str().expect("CSV text");
    // The verifier's reader, which is independent of the service's writer, held to CRLF ends.
    let mut records =
        parse_csv(text, RecordEnds::Crlf).expect("RFC 4180 text, every record ending with CRLF").into_iter();
    assert_eq!(records.next().expect("a header row"), HEADER);
    records
        .map(|r| {
            assert_eq!(r.len(), HEADER.len(), "every record has every column: {r:?}");
            HEADER.iter().map(|h| h.to_string()).zip(r).collect()
        })
        .collect()
}

fn column(rows: &[BTreeMap<String, String>], name: &str) -> Vec<String> {
    rows.iter().map(|r| r[name].clone()).collect()
}

fn list_ids(reply: &Reply) -> Vec<String> {
    reply.expect(200);
    strings(&reply.body["data"], "id")
}

/// Customers `a-1`, `b-2`, `c-3` one second apart, then `a-1` made INACTIVE.
async fn fixture(app: &TestApp) {
    for customer_ref in ["a-1", "b-2", "c-3"] {
        app.post("/api/customers", &json!({ "customerRef": customer_ref })).await.expect(201);
        app.clock.advance_millis(1_000);
    }
    app.patch("/api/customers/a-1", &json!({ "status": "INACTIVE" })).await.expect(200);
}

backends!(
    the_export_is_every_record_as_csv_newest_first_with_the_lists_fields,
    the_export_applies_the_lists_filters_and_sort,
    a_cell_a_spreadsheet_would_run_is_neutralised,
    the_exports_checks_are_the_lists,
    the_export_needs_its_own_permission,
);

async fn the_export_is_every_record_as_csv_newest_first_with_the_lists_fields(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    fixture(&app).await;
    let exported = rows(&app.get("/api/audit/events/export").await);
    let listed = app.get("/api/audit/events?size=100").await;
    assert_eq!(column(&exported, "id"), list_ids(&listed), "the list's records in its default order");
    assert_eq!(column(&exported, "resourceId"), ["a-1", "c-3", "b-2", "a-1"]);
    let list_first = &listed.body["data"][0];
    let first = &exported[0];
    for field in ["occurredAt", "createdAt", "action", "category", "source", "actorId", "resourceType", "outcome"] {
        assert_eq!(first[field], list_first[field].as_str().unwrap_or_default(), "{field}");
    }
    assert_eq!(first["httpStatus"], list_first["httpStatus"].to_string());
    let detail: Value = serde_json::from_str(&first["detail"]).expect("detail is JSON");
    assert_eq!(detail, list_first["detail"]);
    // An empty organisation exports the header alone.
    let other = app.new_tenant();
    let empty = app.get_as(&other, "/api/audit/events/export").await;
    assert!(rows(&empty).is_empty());
}

async fn the_export_applies_the_lists_filters_and_sort(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    fixture(&app).await;
    for query in [
        "resourceId=a-1",
        "action=customer.create",
        "query=B-",
        "sort=resourceId,asc",
        "sort=actorId&sort=occurredAt,asc",
        "sort=action,desc&sort=resourceId,asc",
        "source=API&resourceType=customer",
    ] {
        let exported = rows(&app.get(&format!("/api/audit/events/export?{query}")).await);
        let listed = app.get(&format!("/api/audit/events?size=100&{query}")).await;
        assert_eq!(column(&exported, "id"), list_ids(&listed), "{query}");
        assert!(!exported.is_empty(), "{query} selects something");
    }
    let only_a = rows(&app.get("/api/audit/events/export?resourceId=a-1").await);
    assert_eq!(column(&only_a, "action"), ["customer.update_status", "customer.create"]);
    let none = rows(&app.get("/api/audit/events/export?resourceId=nobody").await);
    assert!(none.is_empty());
}

async fn a_cell_a_spreadsheet_would_run_is_neutralised(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let formula = "=HYPERLINK(\"https://evil.example\",\"x\"),-1";
    let reply = app.write(Method::POST, "/api/customers", formula, &json!({ "customerRef": "f-1" })).await;
    reply.expect(201);
    let text = app.get("/api/audit/events/export").await;
    let exported = rows(&text);
    assert_eq!(exported[0]["idempotencyKey"], format!("'{formula}"), "a leading ' and the rest as sent");
    let raw = text.body.as_str().unwrap_or_default();
    assert!(
        raw.contains("\"'=HYPERLINK(\"\"https://evil.example\"\",\"\"x\"\"),-1\""),
        "quoted, quotes doubled: {raw}"
    );
}

async fn the_exports_checks_are_the_lists(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    fixture(&app).await;
    for (query, names) in [
        ("occurredFrom=2026-01-02T00:00:00Z&occurredTo=2026-01-01T00:00:00Z", "occurredFrom"),
        ("occurredFrom=yesterday", "occurredFrom"),
        ("sort=detail", "sort"),
        ("sort=nope,asc", "sort"),
    ] {
        let reply = app.get(&format!("/api/audit/events/export?{query}")).await;
        reply.expect(400);
        let message = reply.body["message"].as_str().unwrap_or_default();
        assert!(message.contains(names), "{query}: {}", reply.body);
    }
    let long = "q".repeat(129);
    let reply = app.get(&format!("/api/audit/events/export?query={long}")).await;
    reply.expect(400);
    assert!(reply.body["message"].as_str().unwrap_or_default().contains("query"), "{}", reply.body);
    app.get(&format!("/api/audit/events/export?query={}", "q".repeat(128))).await.expect(200);
    // Without a token.
    let anonymous = app
        .raw(Method::GET, "/api/audit/events/export")
        .header("API-Version", tokenops_testkit::API_VERSION)
        .send()
        .await;
    assert_eq!(anonymous.expect("answered").status().as_u16(), 401);
}

async fn the_export_needs_its_own_permission(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let (tenant, owner) = create_organisation(&app, "olivia@bank.example").await;
    let role = json!({"name": "Audit Readers", "description": "", "permissions": ["audit:read"]});
    call(&app, Method::POST, &format!("/api/tenants/{tenant}/roles"), Some(&owner), Some(&role)).await.expect(201);
    let (_, reader) = invite_and_activate(&app, &tenant, &owner, "rita@bank.example", Some("Audit Readers")).await;
    call(&app, Method::GET, "/api/audit/events", Some(&reader), None).await.expect(200);
    let refused = call(&app, Method::GET, "/api/audit/events/export", Some(&reader), None).await;
    refused.expect(403);
    assert_eq!(refused.body["message"], "Missing permission: audit:export", "{}", refused.body);
    let owners = call(&app, Method::GET, "/api/audit/events/export", Some(&owner), None).await;
    assert!(!rows(&owners).is_empty(), "the owner's own sign-up is in the log");
}
