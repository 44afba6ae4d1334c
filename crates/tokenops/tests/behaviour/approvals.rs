//! Approvals: requests and tasks (spec: Approval request and task; Approvals endpoints; the
//! approvals error rows; Authentication 9; paging style B; the approval.* events; supplement
//! §6). A manual four-eyes request with the group `checkers` at step 0 and `treasury` at step
//! 1, driven over HTTP by the people of one organisation (embedded provider).

use crate::support::strings;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::organisation::{call, create_organisation, invite_and_activate};
use tokenops_testkit::{API_VERSION, Backend, Reply, TestApp, backends};
use uuid::Uuid;

backends!(
    four_eyes_sign_off_by_step,
    rejection_cancel_reassign_and_expiry,
    refusals_by_status,
    a_decisions_key_answers_only_its_caller
);

/// The request lifetime the tests run with (TOKENOPS_APPROVAL_LIFETIME_MS).
const LIFETIME_MS: i64 = 60_000;

/// One organisation: the owner, an initiator, two checkers, one treasury member and an outsider.
struct Org {
    app: TestApp,
    tenant: String,
    owner: String,
    alice: (String, String),
    carol: (String, String),
    dave: (String, String),
    tom: (String, String),
    olga: (String, String),
}

async fn org(backend: Backend) -> Org {
    let extra = BTreeMap::from([("TOKENOPS_APPROVAL_LIFETIME_MS".to_owned(), LIFETIME_MS.to_string())]);
    let app = TestApp::spawn_embedded(backend, extra).await;
    let (tenant, owner) = create_organisation(&app, "olivia@bank.example").await;
    let mut people = Vec::new();
    for email in
        ["alice@bank.example", "carol@bank.example", "dave@bank.example", "tom@bank.example", "olga@bank.example"]
    {
        people.push(invite_and_activate(&app, &tenant, &owner, email, None).await);
    }
    let [alice, carol, dave, tom, olga]: [(String, String); 5] = people.try_into().expect("five people");
    let groups = format!("/api/tenants/{tenant}/groups");
    for (key, members) in [("checkers", vec![&carol.0, &dave.0]), ("treasury", vec![&tom.0])] {
        let created = post(&app, &groups, &owner, &json!({ "key": key, "name": key })).await;
        created.expect(201);
        let id = created.body["id"].as_str().expect("group id").to_owned();
        for member in members {
            post(&app, &format!("{groups}/{id}/members"), &owner, &json!({ "userId": member })).await.expect(201);
        }
    }
    Org { app, tenant, owner, alice, carol, dave, tom, olga }
}

async fn get(app: &TestApp, path: &str, token: &str) -> Reply {
    call(app, Method::GET, path, Some(token), None).await
}

async fn post(app: &TestApp, path: &str, token: &str, body: &Value) -> Reply {
    call(app, Method::POST, path, Some(token), Some(body)).await
}

fn four_eyes() -> Value {
    json!({
        "action": "LARGE_PAYMENT_RELEASE",
        "resourceType": "payment",
        "resourceId": "PAY-1",
        "title": "Release payment PAY-1",
        "approvers": [{ "step": 0, "approver": "#checkers" }, { "step": 1, "approver": "#treasury" }],
    })
}

/// Raises `body` as `token`; returns the request and its task ids by step.
async fn raise(app: &TestApp, token: &str, body: &Value) -> (Value, Vec<String>) {
    let reply = post(app, "/api/approvals/requests", token, body).await;
    reply.expect(201);
    let id = reply.body["id"].as_str().expect("request id");
    assert_eq!(reply.header("location"), Some(format!("/api/approvals/requests/{id}").as_str()));
    get(app, &format!("/api/approvals/requests/{id}"), token).await.expect(200);
    let tasks = reply.body["tasks"].as_array().expect("tasks");
    let ids = tasks.iter().map(|t| t["id"].as_str().expect("task id").to_owned()).collect();
    (reply.body.clone(), ids)
}

async fn act(app: &TestApp, token: &str, task: &str, verb: &str) -> Reply {
    post(app, &format!("/api/approvals/tasks/{task}/{verb}"), token, &json!({})).await
}

/// The events of `event_type` about request `id`.
async fn events_about(app: &TestApp, token: &str, event_type: &str, id: &str) -> Vec<Value> {
    let reply = get(app, &format!("/api/webhook-events?type={event_type}&limit=100"), token).await;
    reply.expect(200);
    let items = reply.body["items"].as_array().expect("items").clone();
    items.into_iter().filter(|e| e["resource"]["id"] == id).collect()
}

/// Approves or rejects `task` as `token` under the Idempotency-Key `key`.
async fn act_with_key(app: &TestApp, token: &str, task: &str, verb: &str, key: &str) -> Reply {
    let request = app
        .raw(Method::POST, &format!("/api/approvals/tasks/{task}/{verb}"))
        .header("API-Version", API_VERSION)
        .header("Idempotency-Key", key)
        .bearer_auth(token)
        .json(&json!({}));
    Reply::read(request.send().await.expect("request")).await
}

fn ids(reply: &Reply) -> Vec<String> {
    strings(&reply.body["data"], "id")
}

fn refused(reply: &Reply, status: u16, code: &str) {
    reply.expect(status);
    assert_eq!(reply.body["code"], code, "{}", reply.body);
}

async fn four_eyes_sign_off_by_step(backend: Backend) {
    let Org { app, owner, alice, carol, dave, tom, olga, .. } = org(backend).await;
    let (request, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();
    assert_eq!(request["status"], "PENDING");
    assert_eq!(request["source"], "MANUAL");
    assert_eq!(request["initiator"], alice.0.as_str());
    assert_eq!(request["tasks"][0]["step"], 0);
    assert_eq!(request["tasks"][0]["approvers"], json!(["#checkers"]));
    assert_eq!(request["tasks"][1]["step"], 1);
    let requested = events_about(&app, &owner, "approval.requested", &id).await;
    assert_eq!(requested.len(), 1);
    assert_eq!(requested[0]["data"]["status"], "PENDING");

    // Separation of duties: the initiator, then someone the approvers do not name.
    refused(&act(&app, &alice.1, &tasks[0], "approve").await, 403, "SEPARATION_OF_DUTIES");
    refused(&act(&app, &olga.1, &tasks[0], "approve").await, 403, "SEPARATION_OF_DUTIES");
    // Step 1 waits for step 0.
    refused(&act(&app, &tom.1, &tasks[1], "approve").await, 409, "EARLIER_STEP_PENDING");

    // Two checkers approve the same task at the same instant: one wins, one finds it acted on.
    let (a, b) = tokio::join!(act(&app, &carol.1, &tasks[0], "approve"), act(&app, &dave.1, &tasks[0], "approve"));
    let mut statuses = [a.status, b.status];
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 409], "{} / {}", a.body, b.body);
    let loser = if a.status == 409 { &a } else { &b };
    assert_eq!(loser.body["code"], "TASK_ALREADY_ACTED_ON");
    refused(&act(&app, &carol.1, &tasks[0], "approve").await, 409, "TASK_ALREADY_ACTED_ON");
    assert!(events_about(&app, &owner, "approval.granted", &id).await.is_empty());

    let granted = post(
        &app,
        &format!("/api/approvals/tasks/{}/approve", tasks[1]),
        &tom.1,
        &json!({ "comment": "checked against the payment file" }),
    )
    .await;
    granted.expect(200);
    assert_eq!(granted.body["status"], "APPROVED");
    assert_eq!(granted.body["actedBy"], tom.0.as_str());
    assert!(granted.body["resolvedAt"].is_string());
    assert_eq!(granted.body["tasks"][1]["comment"], "checked against the payment file");
    let events = events_about(&app, &owner, "approval.granted", &id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["data"]["status"], "APPROVED");
    assert_eq!(events[0]["data"]["tasks"][1]["state"], "APPROVED");

    // Reads by id, and the lists with their filters and orders.
    let read = get(&app, &format!("/api/approvals/requests/{id}"), &olga.1).await;
    read.expect(200);
    assert_eq!(read.body["status"], "APPROVED");
    assert_eq!(read.body["tasks"].as_array().map(Vec::len), Some(2));
    let task = get(&app, &format!("/api/approvals/tasks/{}", tasks[1]), &olga.1).await;
    task.expect(200);
    assert_eq!(task.body["state"], "APPROVED");
    assert_eq!(task.body["actedBy"], tom.0.as_str());

    let (pending, pending_tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let pending_id = pending["id"].as_str().expect("id").to_owned();
    app.clock.advance_millis(1_000);
    let (later, later_tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let later_id = later["id"].as_str().expect("id").to_owned();
    // Tasks: PENDING by default, one state per call, newest first by createdAt.
    let open = get(&app, "/api/approvals/tasks", &carol.1).await;
    open.expect(200);
    assert_eq!(open.body["totalItems"], 4);
    let listed = ids(&open);
    assert!(listed[..2].iter().all(|t| later_tasks.contains(t)), "{listed:?}");
    assert!(listed[2..].iter().all(|t| pending_tasks.contains(t)), "{listed:?}");
    let done = get(&app, "/api/approvals/tasks?status=APPROVED", &carol.1).await;
    done.expect(200);
    assert_eq!(done.body["totalItems"], 2);
    assert!(ids(&done).iter().all(|t| tasks.contains(t)));
    let mine = get(&app, &format!("/api/approvals/tasks?approver=%23treasury&requestId={pending_id}"), &carol.1).await;
    assert_eq!(ids(&mine), vec![pending_tasks[1].clone()]);
    refused(&get(&app, "/api/approvals/tasks?status=DONE", &carol.1).await, 400, "VALIDATION_FAILED");
    // The filter under the task field's own name, state.
    assert_eq!(ids(&get(&app, "/api/approvals/tasks?state=APPROVED", &carol.1).await), ids(&done));
    refused(&get(&app, "/api/approvals/tasks?state=DONE", &carol.1).await, 400, "VALIDATION_FAILED");
    refused(&get(&app, "/api/approvals/tasks?state=PENDING&status=PENDING", &carol.1).await, 400, "VALIDATION_FAILED");
    refused(
        &get(&app, "/api/approvals/tasks?status=PENDING&status=APPROVED", &carol.1).await,
        400,
        "VALIDATION_FAILED",
    );

    // Requests: unresolved first, then resolvedAt descending; resolved filters exclude PENDING.
    let all = get(&app, "/api/approvals/requests", &carol.1).await;
    all.expect(200);
    assert_eq!(ids(&all), vec![later_id.clone(), pending_id.clone(), id.clone()]);
    assert!(all.body["data"][0].get("tasks").is_none(), "lists carry no tasks");
    let approved = get(&app, "/api/approvals/requests?status=APPROVED", &carol.1).await;
    assert_eq!(ids(&approved), vec![id.clone()]);
    let by_actor = get(&app, &format!("/api/approvals/requests?actedBy={}", tom.0), &carol.1).await;
    assert_eq!(ids(&by_actor), vec![id.clone()]);
    let resolved_at = granted.body["resolvedAt"].as_str().expect("resolvedAt").to_owned();
    let window = get(&app, &format!("/api/approvals/requests?resolvedFrom={resolved_at}"), &carol.1).await;
    assert_eq!(ids(&window), vec![id.clone()]);
    let before = get(&app, &format!("/api/approvals/requests?resolvedTo={resolved_at}"), &carol.1).await;
    assert!(ids(&before).is_empty(), "half-open, and unresolved requests excluded");
    let by_resource =
        get(&app, "/api/approvals/requests?resourceId=PAY-1&action=LARGE_PAYMENT_RELEASE&size=1", &carol.1).await;
    assert_eq!(by_resource.body["totalItems"], 3);
    assert_eq!(by_resource.body["totalPages"], 3);
    assert!(
        get(&app, "/api/approvals/requests?resourceId=PAY-2", &carol.1).await.body["data"]
            .as_array()
            .is_some_and(Vec::is_empty)
    );
    for bad in
        ["status=DONE", "resolvedFrom=yesterday", "resolvedFrom=2030-01-02T00:00:00Z&resolvedTo=2030-01-01T00:00:00Z"]
    {
        refused(&get(&app, &format!("/api/approvals/requests?{bad}"), &carol.1).await, 400, "VALIDATION_FAILED");
    }
    // Equal bounds are an empty window, not an inverted range.
    let empty = get(
        &app,
        "/api/approvals/requests?resolvedFrom=2030-01-01T00:00:00Z&resolvedTo=2030-01-01T00:00:00Z",
        &carol.1,
    )
    .await;
    empty.expect(200);
    assert_eq!(empty.body["totalItems"], 0, "{}", empty.body);
}

async fn rejection_cancel_reassign_and_expiry(backend: Backend) {
    let Org { app, owner, alice, carol, tom, .. } = org(backend).await;

    // One rejection rejects the request; the later step's task is CANCELLED.
    let (request, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();
    // No body, though the request says JSON: as good as an empty object.
    let rejected = Reply::read(
        app.raw(Method::POST, &format!("/api/approvals/tasks/{}/reject", tasks[0]))
            .header("API-Version", API_VERSION)
            .header("Content-Type", "application/json")
            .bearer_auth(&carol.1)
            .send()
            .await
            .expect("reject"),
    )
    .await;
    rejected.expect(200);
    assert_eq!(rejected.body["status"], "REJECTED");
    assert_eq!(rejected.body["actedBy"], carol.0.as_str());
    assert_eq!(rejected.body["tasks"][0]["state"], "REJECTED");
    assert_eq!(rejected.body["tasks"][1]["state"], "CANCELLED");
    assert_eq!(events_about(&app, &owner, "approval.rejected", &id).await.len(), 1);
    refused(&act(&app, &tom.1, &tasks[1], "approve").await, 409, "APPROVAL_NOT_PENDING");
    refused(
        &post(&app, &format!("/api/approvals/requests/{id}/cancel"), &alice.1, &json!({})).await,
        409,
        "APPROVAL_NOT_PENDING",
    );

    // Cancel while PENDING, then 409.
    let (request, _) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();
    let cancel = format!("/api/approvals/requests/{id}/cancel");
    let cancelled = call(&app, Method::POST, &cancel, Some(&alice.1), None).await;
    cancelled.expect(200);
    assert_eq!(cancelled.body["status"], "CANCELLED");
    assert_eq!(cancelled.body["actedBy"], alice.0.as_str());
    assert!(cancelled.body["tasks"].as_array().expect("tasks").iter().all(|t| t["state"] == "CANCELLED"));
    refused(&call(&app, Method::POST, &cancel, Some(&alice.1), None).await, 409, "APPROVAL_NOT_PENDING");

    // Reassign: unresolvable, only the initiator, unchanged, then a real change; acted on.
    let (_, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let reassign = |task: &str| format!("/api/approvals/tasks/{task}/reassign");
    let to = |approver: String| json!({ "approver": approver, "comment": "holiday cover" });
    refused(&post(&app, &reassign(&tasks[1]), &carol.1, &to("#nobody".into())).await, 400, "VALIDATION_FAILED");
    refused(
        &post(&app, &reassign(&tasks[1]), &carol.1, &to(format!("user:{}", Uuid::now_v7()))).await,
        400,
        "VALIDATION_FAILED",
    );
    refused(
        &post(&app, &reassign(&tasks[1]), &carol.1, &to(format!("user:{}", alice.0))).await,
        400,
        "VALIDATION_FAILED",
    );
    refused(
        &post(&app, &reassign(&tasks[1]), &carol.1, &to(format!("user:{}", tom.0))).await,
        409,
        "APPROVERS_UNCHANGED",
    );
    refused(&post(&app, &reassign(&tasks[1]), &carol.1, &to("#TREASURY".into())).await, 409, "APPROVERS_UNCHANGED");
    // The initiator may reassign (the spec's table has no 403 for it), never to themselves alone.
    refused(
        &post(&app, &reassign(&tasks[1]), &alice.1, &to(format!("user:{}", alice.0))).await,
        400,
        "VALIDATION_FAILED",
    );
    let moved = post(&app, &reassign(&tasks[1]), &alice.1, &to("#checkers".into())).await;
    moved.expect(200);
    assert_eq!(moved.body["approvers"], json!(["#checkers"]));
    // A decision's body may be left out altogether.
    let approve = format!("/api/approvals/tasks/{}/approve", tasks[0]);
    call(&app, Method::POST, &approve, Some(&carol.1), None).await.expect(200);
    refused(&post(&app, &reassign(&tasks[0]), &tom.1, &to("#treasury".into())).await, 409, "TASK_ALREADY_ACTED_ON");
    // The step-1 task now belongs to the checkers: tom may not act, carol may.
    refused(&act(&app, &tom.1, &tasks[1], "approve").await, 403, "SEPARATION_OF_DUTIES");

    // Expiry: the clock passes the deadline and the job expires the request.
    let (request, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();
    app.clock.advance_millis(LIFETIME_MS - 1_000);
    app.drain_jobs().await;
    assert_eq!(get(&app, &format!("/api/approvals/requests/{id}"), &carol.1).await.body["status"], "PENDING");
    app.clock.advance_millis(1_000);
    // At its deadline the request has expired, before the expiry job has closed it: nobody
    // approves, rejects, reassigns or cancels it any more.
    let late = act(&app, &carol.1, &tasks[0], "approve").await;
    refused(&late, 409, "APPROVAL_NOT_PENDING");
    assert!(late.body["message"].as_str().is_some_and(|m| m.contains("expired at")), "{}", late.body);
    refused(&act(&app, &carol.1, &tasks[0], "reject").await, 409, "APPROVAL_NOT_PENDING");
    refused(&post(&app, &reassign(&tasks[0]), &carol.1, &to("#checkers".into())).await, 409, "APPROVAL_NOT_PENDING");
    let cancel = format!("/api/approvals/requests/{id}/cancel");
    refused(&post(&app, &cancel, &alice.1, &json!({})).await, 409, "APPROVAL_NOT_PENDING");
    assert_eq!(get(&app, &format!("/api/approvals/requests/{id}"), &carol.1).await.body["status"], "PENDING");
    app.drain_jobs().await;
    let expired = get(&app, &format!("/api/approvals/requests/{id}"), &carol.1).await;
    assert_eq!(expired.body["status"], "EXPIRED", "{}", expired.body);
    assert!(expired.body["actedBy"].is_null());
    assert!(expired.body["tasks"].as_array().expect("tasks").iter().all(|t| t["state"] == "EXPIRED"));
    let events = events_about(&app, &owner, "approval.expired", &id).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["data"]["status"], "EXPIRED");
    refused(&act(&app, &carol.1, &tasks[0], "approve").await, 409, "APPROVAL_NOT_PENDING");
}

async fn refusals_by_status(backend: Backend) {
    let Org { app, tenant, owner, alice, carol, .. } = org(backend).await;

    // Validation: every problem at once, with details.
    let bad = post(
        &app,
        "/api/approvals/requests",
        &alice.1,
        &json!({ "approvers": [{ "step": 10, "approver": "checkers" }, { "step": 0 }] }),
    )
    .await;
    refused(&bad, 400, "VALIDATION_FAILED");
    let fields: Vec<&str> =
        bad.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    for field in ["action", "approvers[0].step", "approvers[0].approver", "approvers[1].approver"] {
        assert!(fields.contains(&field), "{field} missing from {fields:?}");
    }
    let mut body = four_eyes();
    body["approvers"] =
        json!([{ "step": 0, "approver": "#nobody" }, { "step": 1, "approver": format!("user:{}", alice.0) }]);
    let unresolvable = post(&app, "/api/approvals/requests", &alice.1, &body).await;
    refused(&unresolvable, 400, "VALIDATION_FAILED");
    assert!(unresolvable.body["message"].as_str().unwrap_or("").contains("#nobody"), "{}", unresolvable.body);
    let fields: Vec<&str> =
        unresolvable.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    assert_eq!(fields, vec!["approvers[0].approver", "approvers[1].approver"]);
    // Nothing was raised by the refusals.
    assert_eq!(get(&app, "/api/approvals/requests", &alice.1).await.body["totalItems"], 0);

    let (request, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();

    // 400 for ids that are not UUIDs; 404 for unknown ones.
    for path in ["/api/approvals/requests/42", "/api/approvals/tasks/42"] {
        refused(&get(&app, path, &carol.1).await, 400, "VALIDATION_FAILED");
    }
    refused(&act(&app, &carol.1, "42", "approve").await, 400, "VALIDATION_FAILED");
    refused(
        &get(&app, &format!("/api/approvals/requests/{}", Uuid::now_v7()), &carol.1).await,
        404,
        "APPROVAL_REQUEST_NOT_FOUND",
    );
    refused(&act(&app, &carol.1, &Uuid::now_v7().to_string(), "approve").await, 404, "APPROVAL_TASK_NOT_FOUND");

    // Another organisation sees none of it.
    let (_, stranger) = create_organisation(&app, "sam@other.example").await;
    refused(&get(&app, &format!("/api/approvals/requests/{id}"), &stranger).await, 404, "APPROVAL_REQUEST_NOT_FOUND");
    refused(&get(&app, &format!("/api/approvals/tasks/{}", tasks[0]), &stranger).await, 404, "APPROVAL_TASK_NOT_FOUND");
    refused(
        &post(&app, &format!("/api/approvals/requests/{id}/cancel"), &stranger, &json!({})).await,
        404,
        "APPROVAL_REQUEST_NOT_FOUND",
    );
    refused(&act(&app, &stranger, &tasks[0], "reject").await, 404, "APPROVAL_TASK_NOT_FOUND");
    assert_eq!(get(&app, "/api/approvals/requests", &stranger).await.body["totalItems"], 0);

    // 401 without a token.
    for (method, path) in [
        (Method::GET, "/api/approvals/tasks".to_owned()),
        (Method::GET, "/api/approvals/requests".to_owned()),
        (Method::POST, format!("/api/approvals/tasks/{}/approve", tasks[0])),
        (Method::POST, format!("/api/approvals/requests/{id}/cancel")),
    ] {
        let reply = Reply::read(
            app.raw(method, &path).header("API-Version", API_VERSION).json(&json!({})).send().await.expect("request"),
        )
        .await;
        reply.expect(401);
    }

    // 403 per permission: a role with none of the approval permissions.
    let role = post(
        &app,
        &format!("/api/tenants/{tenant}/roles"),
        &owner,
        &json!({ "name": "Viewer", "description": "Reads customers", "permissions": ["customer:read"] }),
    )
    .await;
    role.expect(201);
    let (_, viewer) = invite_and_activate(&app, &tenant, &owner, "vic@bank.example", Some("Viewer")).await;
    for (method, path, permission) in [
        (Method::GET, "/api/approvals/tasks".to_owned(), "approval:read"),
        (Method::GET, format!("/api/approvals/tasks/{}", tasks[0]), "approval:read"),
        (Method::GET, "/api/approvals/requests".to_owned(), "approval:read"),
        (Method::GET, format!("/api/approvals/requests/{id}"), "approval:read"),
        (Method::POST, "/api/approvals/requests".to_owned(), "approval:request"),
        (Method::POST, format!("/api/approvals/requests/{id}/cancel"), "approval:request"),
        (Method::POST, format!("/api/approvals/tasks/{}/approve", tasks[0]), "approval:decide"),
        (Method::POST, format!("/api/approvals/tasks/{}/reject", tasks[0]), "approval:decide"),
        (Method::POST, format!("/api/approvals/tasks/{}/reassign", tasks[0]), "approval:decide"),
    ] {
        let body = (method == Method::POST).then(four_eyes);
        let reply = call(&app, method, &path, Some(&viewer), body.as_ref()).await;
        reply.expect(403);
        assert!(reply.body["message"].as_str().unwrap_or("").contains(permission), "{path}: {}", reply.body);
    }
    // The request is untouched by all of it.
    assert_eq!(get(&app, &format!("/api/approvals/requests/{id}"), &carol.1).await.body["status"], "PENDING");
}

/// Keys are the organisation's, but a decision is its caller's: the same key from someone else
/// is another request (422), never the first caller's stored answer; other writes replay to any
/// caller. Neither the initiator nor an
/// outsider is shown an approval by replaying an approver's key, and an approver is not shown an
/// outsider's separation-of-duties 403 (Authentication 9; States and transitions, Approval
/// request and task).
async fn a_decisions_key_answers_only_its_caller(backend: Backend) {
    let Org { app, alice, carol, tom, olga, .. } = org(backend).await;
    let (request, tasks) = raise(&app, &alice.1, &four_eyes()).await;
    let id = request["id"].as_str().expect("id").to_owned();

    // An outsider's 403 binds the key for the outsider only.
    let shared = format!("approve-{}", tasks[0]);
    refused(&act_with_key(&app, &olga.1, &tasks[0], "approve", &shared).await, 403, "SEPARATION_OF_DUTIES");
    let again = act_with_key(&app, &olga.1, &tasks[0], "approve", &shared).await;
    refused(&again, 403, "SEPARATION_OF_DUTIES");
    assert_eq!(again.header("idempotent-replayed"), Some("true"), "the outsider's own retry replays");
    refused(&act_with_key(&app, &carol.1, &tasks[0], "approve", &shared).await, 422, "IDEMPOTENCY_KEY_REUSED");
    let task = get(&app, &format!("/api/approvals/tasks/{}", tasks[0]), &carol.1).await;
    task.expect(200);
    assert_eq!(task.body["state"], "PENDING", "nothing was decided under the outsider's key: {}", task.body);
    act_with_key(&app, &carol.1, &tasks[0], "approve", &format!("carol-{}", tasks[0])).await.expect(200);

    // An approver's 200 is not replayed to the initiator or to an outsider.
    let tom_key = format!("approve-{}", tasks[1]);
    let approved = act_with_key(&app, &tom.1, &tasks[1], "approve", &tom_key).await;
    approved.expect(200);
    assert_eq!(approved.body["status"], "APPROVED", "{}", approved.body);
    for (who, token) in [("the initiator", &alice.1), ("an outsider", &olga.1)] {
        let replay = act_with_key(&app, token, &tasks[1], "approve", &tom_key).await;
        assert_eq!(replay.status, 422, "{who} replaying the approver's key: {}", replay.body);
        assert_eq!(replay.body["code"], "IDEMPOTENCY_KEY_REUSED", "{}", replay.body);
        assert_eq!(replay.header("idempotent-replayed"), None, "{who}");
    }
    // The approver's own retry replays the approval.
    let replay = act_with_key(&app, &tom.1, &tasks[1], "approve", &tom_key).await;
    replay.expect(200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    let request = get(&app, &format!("/api/approvals/requests/{id}"), &alice.1).await;
    assert_eq!(request.body["status"], "APPROVED", "{}", request.body);

    // A write whose outcome is not about who asks answers any caller of the organisation with
    // the original: a bank retrying through another of its clients gets what the first got.
    let raise_with = |token: &str| {
        app.raw(Method::POST, "/api/approvals/requests")
            .header("API-Version", API_VERSION)
            .header("Idempotency-Key", "shared-raise")
            .bearer_auth(token.to_owned())
            .json(&four_eyes())
    };
    let first = Reply::read(raise_with(&alice.1).send().await.expect("raise")).await;
    first.expect(201);
    let again = Reply::read(raise_with(&carol.1).send().await.expect("raise again")).await;
    again.expect(201);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body["id"], first.body["id"], "one request, not two");
}
