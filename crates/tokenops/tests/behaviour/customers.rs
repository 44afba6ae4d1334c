//! Customers over HTTP (spec: Resources/Customer, Endpoints/Customers, Errors/Customers and
//! accounts, Limits/Idempotency-Key, Paging style A), on both stores.

use reqwest::Method;
use serde_json::{Value, json};
use tokenops_app::clock::Clock;
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

use crate::support::{
    assert_bad_keys_refused, assert_bodies_refused, assert_body_texts_refused, assert_empty_style_a, assert_error,
    assert_get_refused, assert_iso_utc, assert_refused, assert_retry_after, key, strings, until_waiting,
    write_correlated, write_in_flight,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

async fn create(app: &TestApp, customer_ref: &str) -> Reply {
    let reply = app.post("/api/customers", &json!({ "customerRef": customer_ref })).await;
    reply.expect(201);
    reply
}

async fn customer_rows(app: &TestApp) -> i64 {
    app.db.count("customers", "").await
}

async fn status_changed_events(app: &TestApp) -> Vec<Value> {
    let reply = app.get("/api/webhook-events?type=customer.status_changed").await;
    reply.expect(200);
    reply.body["items"].as_array().expect("style D items").clone()
}

async fn audit_of(app: &TestApp, customer_ref: &str, action: &str) -> Vec<Value> {
    let reply = app.get(&format!("/api/audit/events?resourceId={customer_ref}&action={action}")).await;
    reply.expect(200);
    reply.body["data"].as_array().expect("style B data").clone()
}

/// The customerRefs of a style A page, in its order.
fn listed_refs(reply: &Reply) -> Vec<String> {
    strings(&reply.body["content"], "customerRef")
}

// ---------------------------------------------------------------------------------------------
// POST /api/customers
// ---------------------------------------------------------------------------------------------

async fn registering_a_customer_is_201_with_location_and_the_customer_active_by_default(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = app.post("/api/customers", &json!({ "customerRef": "cust-001", "displayName": "Ada Ltd" })).await;
    created.expect(201);
    assert_eq!(created.header("location"), Some("/api/customers/cust-001"));
    assert_eq!(created.body["customerRef"], "cust-001");
    assert_eq!(created.body["status"], "ACTIVE");
    assert_eq!(created.body["displayName"], "Ada Ltd");
    assert_iso_utc(&created.body["createdAt"]);
    assert_iso_utc(&created.body["updatedAt"]);
    assert_eq!(created.body["createdAt"], created.body["updatedAt"]);
    assert_eq!(created.body["createdAt"], app.clock.now().to_iso8601());

    let read = app.get("/api/customers/cust-001").await;
    read.expect(200);
    assert_eq!(read.body, created.body, "the read returns the customer as registered");

    let plain = create(&app, "cust-002").await;
    assert!(plain.body.get("displayName").is_none(), "no displayName when none was given: {}", plain.body);
    assert_eq!(plain.body["status"], "ACTIVE");
    assert_eq!(customer_rows(&app).await, 2);
}

async fn a_customer_can_be_registered_inactive(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = app.post("/api/customers", &json!({ "customerRef": "c-1", "status": "INACTIVE" })).await;
    created.expect(201);
    assert_eq!(created.body["status"], "INACTIVE");
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "INACTIVE");
    let active = app.post("/api/customers", &json!({ "customerRef": "c-2", "status": "ACTIVE" })).await;
    active.expect(201);
    assert_eq!(active.body["status"], "ACTIVE");
}

async fn registration_with_missing_or_invalid_customer_ref_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let bad = [
        json!({}),
        json!({ "displayName": "No ref" }),
        json!({ "customerRef": null }),
        json!({ "customerRef": "" }),
        json!({ "customerRef": "   " }),
        json!({ "customerRef": "x".repeat(65) }),
        json!({ "customerRef": "a/b" }),
        json!({ "customerRef": "has space" }),
        json!({ "customerRef": "käse" }),
        json!({ "customerRef": "a?b" }),
        // Dot segments: a client would send `/api/customers/..` as `/api/`.
        json!({ "customerRef": "." }),
        json!({ "customerRef": ".." }),
        json!({ "customerRef": 42 }),
        json!({ "customerRef": ["c-1"] }),
    ];
    assert_bodies_refused(&app, Method::POST, "/api/customers", &bad).await;
    assert_eq!(customer_rows(&app).await, 0, "no refused registration created a customer");

    // The limits themselves are accepted: 64 characters of the whole alphabet.
    let longest = format!("{}{}", "Az09._:-", "x".repeat(56));
    assert_eq!(longest.len(), 64);
    let ok = app.post("/api/customers", &json!({ "customerRef": longest })).await;
    ok.expect(201);
    assert_eq!(ok.body["customerRef"], longest.as_str());
    app.get(&format!("/api/customers/{longest}")).await.expect(200);
    // More dots than a path step are a reference like any other.
    app.post("/api/customers", &json!({ "customerRef": "..." })).await.expect(201);
}

async fn registration_with_unknown_status_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for status in [json!("CLOSED"), json!("active"), json!("PENDING"), json!(""), json!(1)] {
        let reply = app.post("/api/customers", &json!({ "customerRef": "c-1", "status": status })).await;
        assert_refused(&reply, 400, &format!("status {status} should be refused"));
    }
    assert_eq!(customer_rows(&app).await, 0);
}

/// A tolerant reader: fields the registration does not take are ignored, the record's own
/// read-only fields included, and change nothing.
async fn registration_ignores_fields_it_does_not_take(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for (customer_ref, extra) in [
        ("c-1", json!({ "name": "Ada" })),
        ("c-2", json!({ "customer_ref": "other" })),
        ("c-3", json!({ "createdAt": "2026-01-01T00:00:00Z", "updatedAt": "2026-01-01T00:00:00Z" })),
    ] {
        let mut body = extra.clone();
        body["customerRef"] = json!(customer_ref);
        let created = app.post("/api/customers", &body).await;
        created.expect(201);
        assert_eq!(created.body["customerRef"], customer_ref, "{extra}");
        assert_eq!(created.body["status"], "ACTIVE", "{extra}");
        assert_eq!(created.body["createdAt"], app.clock.now().to_iso8601(), "{extra}: read-only fields change nothing");
        assert_eq!(created.body["updatedAt"], created.body["createdAt"], "{extra}");
        for field in extra.as_object().expect("object").keys().filter(|f| !f.ends_with("At")) {
            assert!(created.body.get(field).is_none(), "{field} is not stored: {}", created.body);
        }
    }
    assert_eq!(customer_rows(&app).await, 3);
}

async fn registration_with_blank_or_too_long_display_name_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for name in [json!(""), json!("   "), json!("n".repeat(201)), json!(7)] {
        let reply = app.post("/api/customers", &json!({ "customerRef": "c-1", "displayName": name })).await;
        assert_refused(&reply, 400, &format!("displayName {name} should be refused"));
    }
    assert_eq!(customer_rows(&app).await, 0);
    let longest = "n".repeat(200);
    let ok = app.post("/api/customers", &json!({ "customerRef": "c-1", "displayName": longest })).await;
    ok.expect(201);
    assert_eq!(ok.body["displayName"], longest.as_str());
}

async fn registration_with_several_fields_wrong_names_each_in_details(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "customerRef": "x y", "displayName": "n".repeat(201), "status": "nope" });
    let reply = app.post("/api/customers", &body).await;
    assert_refused(&reply, 400, "three fields wrong");
    let fields: Vec<&str> =
        reply.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    assert_eq!(fields, ["customerRef", "displayName", "status"], "{}", reply.body);
    // One field wrong keeps its own message.
    let one = app.post("/api/customers", &json!({ "customerRef": "x y" })).await;
    assert!(one.body["message"].as_str().is_some_and(|m| m.starts_with("customerRef: ")), "{}", one.body);
    assert_eq!(customer_rows(&app).await, 0);
}

async fn registration_body_that_is_not_a_json_object_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_body_texts_refused(
        &app,
        "/api/customers",
        &[r#"["c-1"]"#, r#""c-1""#, "42", "null", r#"{"customerRef": "c-1""#, ""],
    )
    .await;
    assert_eq!(customer_rows(&app).await, 0);
}

async fn idempotency_key_missing_blank_or_over_255_is_400_and_255_is_accepted(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-0").await;
    let body = json!({ "customerRef": "c-1" });
    let patch = json!({ "status": "INACTIVE" });
    for (method, path, body) in [(Method::POST, "/api/customers", &body), (Method::PATCH, "/api/customers/c-0", &patch)]
    {
        assert_bad_keys_refused(&app, method, path, body).await;
    }
    assert_eq!(customer_rows(&app).await, 1, "no customer registered under a bad key");
    assert_eq!(app.get("/api/customers/c-0").await.body["status"], "ACTIVE", "no change under a bad key");
    assert_eq!(app.db.count("idempotency_records", "").await, 1, "only c-0's key was recorded");

    let longest = "k".repeat(255);
    app.write(Method::POST, "/api/customers", &longest, &body).await.expect(201);
    app.write(Method::PATCH, "/api/customers/c-0", &longest, &patch).await.expect(200);
    assert_eq!(app.get("/api/customers/c-0").await.body["status"], "INACTIVE");
}

async fn existing_customer_ref_is_409_with_customer_ref_and_existing_status(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    let again = app.post("/api/customers", &json!({ "customerRef": "c-1", "displayName": "Other" })).await;
    assert_error(&again, 409);
    assert_eq!(again.body["customerRef"], "c-1");
    assert_eq!(again.body["existingStatus"], "ACTIVE");
    assert!(again.header("retry-after").is_none(), "an existing customer is not a retry case");

    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    let after = app.post("/api/customers", &json!({ "customerRef": "c-1" })).await;
    assert_error(&after, 409);
    assert_eq!(after.body["customerRef"], "c-1");
    assert_eq!(after.body["existingStatus"], "INACTIVE");

    assert_eq!(customer_rows(&app).await, 1);
    let read = app.get("/api/customers/c-1").await;
    assert!(read.body.get("displayName").is_none(), "the refused registration changed nothing: {}", read.body);
}

async fn concurrent_registrations_of_one_ref_with_different_keys_create_one_customer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let body = json!({ "customerRef": "c-race" });
    let replies = futures::future::join_all((0..12).map(|_| app.post("/api/customers", &body))).await;
    let created = replies.iter().filter(|r| r.status == 201).count();
    assert_eq!(created, 1, "exactly one registration wins");
    for reply in replies.iter().filter(|r| r.status != 201) {
        assert_error(reply, 409);
        assert_eq!(reply.body["customerRef"], "c-race");
        assert_eq!(reply.body["existingStatus"], "ACTIVE");
    }
    assert_eq!(customer_rows(&app).await, 1);
}

async fn post_and_patch_with_a_key_in_flight_are_409_with_retry_after(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-0").await;

    let body = json!({ "customerRef": "c-1" });
    let reply = write_in_flight(&app, "customer.create", Method::POST, "/api/customers", &body).await;
    assert_error(&reply, 409);
    assert_retry_after(&reply);
    assert_eq!(customer_rows(&app).await, 1, "nothing registered while the key is in flight");

    let patch = json!({ "status": "INACTIVE" });
    let reply = write_in_flight(&app, "customer.update_status", Method::PATCH, "/api/customers/c-0", &patch).await;
    assert_error(&reply, 409);
    assert_retry_after(&reply);
    assert_eq!(app.get("/api/customers/c-0").await.body["status"], "ACTIVE", "no change while in flight");
}

async fn registration_reusing_a_key_with_a_different_payload_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    app.write(Method::POST, "/api/customers", &k, &json!({ "customerRef": "c-1" })).await.expect(201);
    for other in [
        json!({ "customerRef": "c-2" }),
        json!({ "customerRef": "c-1", "displayName": "Ada" }),
        json!({ "customerRef": "c-1", "status": "ACTIVE" }),
    ] {
        let reply = app.write(Method::POST, "/api/customers", &k, &other).await;
        assert_refused(&reply, 422, &format!("{other} under a used key"));
    }
    assert_eq!(customer_rows(&app).await, 1);
    assert_eq!(app.get("/api/customers/c-2").await.status, 404);
}

// ---------------------------------------------------------------------------------------------
// PATCH /api/customers/{customerRef}
// ---------------------------------------------------------------------------------------------

async fn patch_sets_the_status_and_returns_the_customer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = create(&app, "c-1").await;
    app.clock.advance_millis(1_500);

    let inactive = app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await;
    inactive.expect(200);
    assert_eq!(inactive.body["customerRef"], "c-1");
    assert_eq!(inactive.body["status"], "INACTIVE");
    assert_eq!(inactive.body["createdAt"], created.body["createdAt"]);
    assert_eq!(inactive.body["updatedAt"], app.clock.now().to_iso8601(), "updatedAt is the time of the change");
    assert_iso_utc(&inactive.body["updatedAt"]);
    assert_eq!(app.get("/api/customers/c-1").await.body, inactive.body);

    let active = app.patch("/api/customers/c-1", &json!({ "status": "ACTIVE" })).await;
    active.expect(200);
    assert_eq!(active.body["status"], "ACTIVE");
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "ACTIVE");
}

async fn patch_with_missing_or_unknown_status_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    assert_bodies_refused(
        &app,
        Method::PATCH,
        "/api/customers/c-1",
        &[
            json!({}),
            json!({ "status": null }),
            json!({ "status": "CLOSED" }),
            json!({ "status": "active" }),
            json!({ "status": "Inactive" }),
            json!({ "status": "" }),
            json!({ "status": 0 }),
        ],
    )
    .await;
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "ACTIVE");
    assert!(status_changed_events(&app).await.is_empty());
}

async fn patch_of_an_unknown_customer_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    let reply = app.patch("/api/customers/c-404", &json!({ "status": "INACTIVE" })).await;
    assert_error(&reply, 404);
    let long = "x".repeat(65);
    for path in ["/api/customers/bad%20ref", "/api/customers/k%C3%A4se", &format!("/api/customers/{long}")] {
        let reply = app.patch(path, &json!({ "status": "INACTIVE" })).await;
        assert_refused(&reply, 404, &format!("PATCH {path}"));
    }
    assert_eq!(customer_rows(&app).await, 1, "a PATCH never creates a customer");
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "ACTIVE");
    assert!(status_changed_events(&app).await.is_empty());
}

async fn patch_reusing_a_key_with_a_different_payload_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    create(&app, "c-2").await;
    let k = key();
    app.write(Method::PATCH, "/api/customers/c-1", &k, &json!({ "status": "INACTIVE" })).await.expect(200);

    let other_status = app.write(Method::PATCH, "/api/customers/c-1", &k, &json!({ "status": "ACTIVE" })).await;
    assert_error(&other_status, 422);
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "INACTIVE");

    // The path is part of the request: the same body for another customer is another request.
    let other_customer = app.write(Method::PATCH, "/api/customers/c-2", &k, &json!({ "status": "INACTIVE" })).await;
    assert_error(&other_customer, 422);
    assert_eq!(app.get("/api/customers/c-2").await.body["status"], "ACTIVE");
    assert_eq!(status_changed_events(&app).await.len(), 1);
}

async fn patch_to_the_current_status_is_200_and_emits_no_event(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = create(&app, "c-1").await;
    app.clock.advance_millis(1_000);
    let events_before = app.db.count("events", "").await;
    let jobs_before = app.db.count("jobs", "").await;

    let same = app.patch("/api/customers/c-1", &json!({ "status": "ACTIVE" })).await;
    same.expect(200);
    assert_eq!(same.body["status"], "ACTIVE");
    assert_eq!(same.body["updatedAt"], created.body["updatedAt"], "nothing changed, so updatedAt stays");
    assert_eq!(app.db.count("events", "").await, events_before);
    assert_eq!(app.db.count("jobs", "").await, jobs_before);
    assert!(status_changed_events(&app).await.is_empty());

    // And for an INACTIVE customer asked to be INACTIVE.
    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    assert_eq!(status_changed_events(&app).await.len(), 1);
    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    assert_eq!(status_changed_events(&app).await.len(), 1, "asking for the current status emits nothing");
}

async fn a_status_change_emits_one_customer_status_changed_event_with_the_customer(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    let k = key();
    let body = json!({ "status": "INACTIVE" });
    let changed = write_correlated(&app, Method::PATCH, "/api/customers/c-1", &k, "corr-42", &body).await;
    changed.expect(200);

    let events = status_changed_events(&app).await;
    assert_eq!(events.len(), 1, "exactly one event: {events:?}");
    let event = &events[0];
    assert_eq!(event["type"], "customer.status_changed");
    assert_eq!(event["resource"], json!({ "type": "customer", "id": "c-1" }));
    assert_eq!(event["data"], changed.body, "data is the customer as the API returns it");
    assert_eq!(event["idempotencyKey"], k.as_str());
    assert_eq!(event["correlationId"], "corr-42");
    assert!(Uuid::parse_str(event["id"].as_str().expect("event id")).is_ok());
    assert_eq!(app.db.count("events", "event_type = 'customer.status_changed'").await, 1);
    assert_eq!(app.db.count("events", "").await, 1, "registration emits no status event");

    // Moving back is another change, another event.
    app.patch("/api/customers/c-1", &json!({ "status": "ACTIVE" })).await.expect(200);
    let events = status_changed_events(&app).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["data"]["status"], "ACTIVE", "newest first");
    // "Carried from the originating request; omitted when none": without X-Correlation-Id the
    // X-Request-Id the caller sent, and without either, none (not an id the service made).
    assert!(events[0].get("correlationId").is_none(), "{}", events[0]);
    let by_request_id = app
        .request(Method::PATCH, "/api/customers/c-1")
        .header("Idempotency-Key", key())
        .header("X-Request-Id", "req-77")
        .json(&json!({ "status": "INACTIVE" }))
        .send()
        .await
        .expect("patch");
    assert_eq!(by_request_id.status(), 200);
    assert_eq!(status_changed_events(&app).await[0]["correlationId"], "req-77");
}

async fn a_status_change_writes_one_success_audit_record_for_the_caller_and_request(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    let k = key();
    let changed = app.write(Method::PATCH, "/api/customers/c-1", &k, &json!({ "status": "INACTIVE" })).await;
    changed.expect(200);
    let request_id = changed.header("x-request-id").expect("X-Request-Id").to_owned();

    let records = audit_of(&app, "c-1", "customer.update_status").await;
    assert_eq!(records.len(), 1, "one audit record: {records:?}");
    let record = &records[0];
    assert_eq!(record["action"], "customer.update_status");
    assert_eq!(record["outcome"], "SUCCESS");
    assert_eq!(record["resourceType"], "customer");
    assert_eq!(record["resourceId"], "c-1");
    assert_eq!(record["actorId"], app.tenant.subject.as_str());
    assert_eq!(record["requestId"], request_id.as_str());
    assert_iso_utc(&record["occurredAt"]);
    assert_eq!(app.db.count("audit_records", "action = 'customer.update_status' AND outcome = 'SUCCESS'").await, 1);
}

// ---------------------------------------------------------------------------------------------
// GET /api/customers and GET /api/customers/{customerRef}
// ---------------------------------------------------------------------------------------------

async fn customer_list_is_style_a_oldest_first(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_empty_style_a(&app, "/api/customers").await;

    // Created in an order that is neither alphabetical nor reverse alphabetical.
    let refs = ["c-mid", "c-zeta", "c-alpha", "c-omega", "c-beta"];
    for r in refs {
        create(&app, r).await;
        app.clock.advance_millis(10);
    }
    let all = app.get("/api/customers").await;
    all.expect(200);
    let listed = listed_refs(&all);
    assert_eq!(listed, refs, "oldest first");
    assert_eq!(all.body["page"], 0);
    assert_eq!(all.body["size"], 20);
    assert_eq!(all.body["totalElements"], 5);
    assert_eq!(all.body["totalPages"], 1);
    let first = &all.body["content"][0];
    assert_eq!(first["status"], "ACTIVE");
    assert_iso_utc(&first["createdAt"]);
    assert_iso_utc(&first["updatedAt"]);

    let page = app.get("/api/customers?page=1&size=2").await;
    page.expect(200);
    let listed = listed_refs(&page);
    assert_eq!(listed, ["c-alpha", "c-omega"]);
    assert_eq!(page.body["page"], 1);
    assert_eq!(page.body["size"], 2);
    assert_eq!(page.body["totalElements"], 5);
    assert_eq!(page.body["totalPages"], 3);
}

async fn customer_list_filters_by_status_and_refuses_an_unknown_status(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for r in ["c-1", "c-2", "c-3", "c-4"] {
        create(&app, r).await;
        app.clock.advance_millis(10);
    }
    app.patch("/api/customers/c-2", &json!({ "status": "INACTIVE" })).await.expect(200);
    app.patch("/api/customers/c-4", &json!({ "status": "INACTIVE" })).await.expect(200);

    let inactive = app.get("/api/customers?status=INACTIVE").await;
    inactive.expect(200);
    assert_eq!(listed_refs(&inactive), ["c-2", "c-4"]);
    assert_eq!(inactive.body["totalElements"], 2);
    let active = app.get("/api/customers?status=ACTIVE").await;
    active.expect(200);
    assert_eq!(listed_refs(&active), ["c-1", "c-3"]);
    assert_eq!(active.body["totalElements"], 2);

    for status in ["CLOSED", "active", ""] {
        let reply = app.get(&format!("/api/customers?status={status}")).await;
        assert_refused(&reply, 400, &format!("status={status:?}"));
    }
}

async fn get_of_an_unknown_customer_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    for path in ["/api/customers/c-2", "/api/customers/C-1", "/api/customers/bad%20ref", "/api/customers/a%2Fb"] {
        assert_get_refused(&app, path, 404).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Organisations
// ---------------------------------------------------------------------------------------------

async fn another_organisations_customer_is_404_and_not_listed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-mine").await;
    let other = app.new_tenant();
    let theirs = app.post_as(&other, "/api/customers", &json!({ "customerRef": "c-theirs" })).await;
    theirs.expect(201);

    let read = app.get("/api/customers/c-theirs").await;
    assert_error(&read, 404);
    let patch = app.patch("/api/customers/c-theirs", &json!({ "status": "INACTIVE" })).await;
    assert_error(&patch, 404);
    let still =
        Reply::read(app.request_as(&other, Method::GET, "/api/customers/c-theirs").send().await.expect("GET")).await;
    still.expect(200);
    assert_eq!(still.body["status"], "ACTIVE", "the other organisation's customer is untouched");

    let mine = app.get("/api/customers").await;
    mine.expect(200);
    assert_eq!(mine.body["totalElements"], 1);
    assert_eq!(mine.body["content"][0]["customerRef"], "c-mine");
    let inactive = app.get("/api/customers?status=ACTIVE").await;
    assert_eq!(inactive.body["totalElements"], 1);

    let reverse =
        Reply::read(app.request_as(&other, Method::GET, "/api/customers/c-mine").send().await.expect("GET")).await;
    assert_error(&reverse, 404);
    let theirs_list =
        Reply::read(app.request_as(&other, Method::GET, "/api/customers").send().await.expect("GET")).await;
    assert_eq!(theirs_list.body["totalElements"], 1);
    assert_eq!(theirs_list.body["content"][0]["customerRef"], "c-theirs");
}

async fn the_same_customer_ref_can_exist_in_two_organisations(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    create(&app, "c-1").await;
    let other = app.new_tenant();
    let theirs = app.post_as(&other, "/api/customers", &json!({ "customerRef": "c-1", "status": "INACTIVE" })).await;
    theirs.expect(201);
    assert_eq!(theirs.body["status"], "INACTIVE");
    assert_eq!(customer_rows(&app).await, 2);

    // Each organisation sees its own.
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "ACTIVE");
    let read = Reply::read(app.request_as(&other, Method::GET, "/api/customers/c-1").send().await.expect("GET")).await;
    assert_eq!(read.body["status"], "INACTIVE");

    // A status change in one leaves the other alone.
    app.patch("/api/customers/c-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    let patched = app.patch_as(&other, "/api/customers/c-1", &json!({ "status": "ACTIVE" })).await;
    patched.expect(200);
    assert_eq!(app.get("/api/customers/c-1").await.body["status"], "INACTIVE");
    let theirs_now =
        Reply::read(app.request_as(&other, Method::GET, "/api/customers/c-1").send().await.expect("GET")).await;
    assert_eq!(theirs_now.body["status"], "ACTIVE");
}

async fn concurrent_status_changes_of_one_customer_apply_once_and_emit_one_event(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "race-1" })).await.expect(201);
    let keys: Vec<String> = (0..10).map(|i| format!("race-{i}")).collect();
    let body = json!({ "status": "INACTIVE" });
    let requests = keys.iter().map(|key| app.write(Method::PATCH, "/api/customers/race-1", key, &body));
    for reply in futures::future::join_all(requests).await {
        reply.expect(200);
        assert_eq!(reply.body["status"], "INACTIVE");
    }
    // Only the first change is a change: one event, and one audit record saying so.
    assert_eq!(app.db.count("events", "event_type = 'customer.status_changed'").await, 1);
    let audit = app.get("/api/audit/events?action=customer.update_status&size=100").await;
    audit.expect(200);
    let changed = audit.body["data"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| r["detail"]["after"]["status"] == "INACTIVE")
        .count();
    assert_eq!(changed, 1, "{}", audit.body);
}

/// A change stamps its time after it has waited for the row another write holds, not before:
/// otherwise the change that waited longest commits last with the earliest `updatedAt`, and the
/// record moves back in time (a race probe saw it on PostgreSQL, whose writers run in parallel,
/// in a third of its rounds). The customers table is held from outside while the clock moves
/// on; SQLite admits one writer at a time, so there a write never waits inside its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_a_status_change_that_waited_for_the_row_is_stamped_after_the_wait() {
    let app = TestApp::spawn(Backend::Postgres).await;
    app.post("/api/customers", &json!({ "customerRef": "clock-1" })).await.expect(201);
    let held = app.db.hold_table("customers").await;
    let inactive = json!({ "status": "INACTIVE" });
    let change = app.write(Method::PATCH, "/api/customers/clock-1", "clock-key", &inactive);
    let after_the_wait = async {
        until_waiting("the change at the customers table", 1, async || app.db.waiting_on("customers").await).await;
        app.clock.advance_millis(60_000);
        let released_at = app.clock.now();
        held.release().await;
        released_at
    };
    let (changed, released_at) = futures::future::join(change, after_the_wait).await;
    changed.expect(200);
    assert_eq!(changed.body["updatedAt"], released_at.to_iso8601(), "{}", changed.body);
    let read = app.get("/api/customers/clock-1").await;
    assert_eq!(read.body["updatedAt"], released_at.to_iso8601(), "{}", read.body);
}

backends!(
    registering_a_customer_is_201_with_location_and_the_customer_active_by_default,
    a_customer_can_be_registered_inactive,
    registration_with_missing_or_invalid_customer_ref_is_400,
    registration_with_unknown_status_is_400,
    registration_ignores_fields_it_does_not_take,
    registration_with_blank_or_too_long_display_name_is_400,
    registration_with_several_fields_wrong_names_each_in_details,
    registration_body_that_is_not_a_json_object_is_400,
    idempotency_key_missing_blank_or_over_255_is_400_and_255_is_accepted,
    existing_customer_ref_is_409_with_customer_ref_and_existing_status,
    concurrent_registrations_of_one_ref_with_different_keys_create_one_customer,
    post_and_patch_with_a_key_in_flight_are_409_with_retry_after,
    registration_reusing_a_key_with_a_different_payload_is_422,
    patch_sets_the_status_and_returns_the_customer,
    patch_with_missing_or_unknown_status_is_400,
    patch_of_an_unknown_customer_is_404,
    patch_reusing_a_key_with_a_different_payload_is_422,
    patch_to_the_current_status_is_200_and_emits_no_event,
    a_status_change_emits_one_customer_status_changed_event_with_the_customer,
    a_status_change_writes_one_success_audit_record_for_the_caller_and_request,
    customer_list_is_style_a_oldest_first,
    customer_list_filters_by_status_and_refuses_an_unknown_status,
    get_of_an_unknown_customer_is_404,
    another_organisations_customer_is_404_and_not_listed,
    the_same_customer_ref_can_exist_in_two_organisations,
    concurrent_status_changes_of_one_customer_apply_once_and_emit_one_event,
);
