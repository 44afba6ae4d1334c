//! Policies and approvals in the settlement pipeline (spec: Policy content; Approval request
//! and task; Failed operations; Events; supplement §5–§6), on both stores over HTTP: an ACTIVE
//! TRANSFER policy holds large transfers for a four-eyes sign-off by `#checkers` then
//! `#treasury`; each way the policies or the approvers refuse ends the operation as the spec's
//! Failed operations table says.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokenops::demo::four_eyes_policy;
use tokenops_domain::TenantId;
use tokenops_testkit::organisation::{call, create_organisation, invite_and_activate};
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

use crate::fixtures::{active_account_as, active_contract_as, customer_as};
use crate::support::until_waiting;

backends!(
    four_eyes_holds_a_large_transfer_until_both_steps_approve,
    a_reject_rule_fails_the_operation_validation_rejected,
    an_approver_rejection_fails_the_operation_approval_rejected,
    cancelling_the_request_cancels_the_operation,
    an_expired_request_fails_the_operation_policy_expired,
    an_unmatched_operation_goes_to_a_policy_update_holder_for_manual_review,
    a_release_of_an_approved_lock_is_not_evaluated_again,
    an_approver_group_that_does_not_exist_fails_the_operation_approvers_unresolvable,
    an_operation_whose_policies_stay_unreadable_fails_policy_timeout,
    the_api_guides_worked_example_works_as_it_says,
);

/// The request lifetime the tests run with (TOKENOPS_APPROVAL_LIFETIME_MS).
const LIFETIME_MS: i64 = 600_000;
/// How long the policy step may fail to decide (TOKENOPS_POLICY_DECISION_TIMEOUT_MS).
const DECISION_TIMEOUT_MS: i64 = 120_000;

/// One organisation: its owner (who sets up contracts, accounts and policies), the submitter
/// alice (also a checker, so her own request names her), two checkers and a treasurer.
struct Org {
    app: TestApp,
    owner: Tenant,
    alice: Tenant,
    carol: Tenant,
    dave: Tenant,
    tom: Tenant,
}

async fn org(backend: Backend) -> Org {
    let extra = BTreeMap::from([
        ("TOKENOPS_APPROVAL_LIFETIME_MS".to_owned(), LIFETIME_MS.to_string()),
        ("TOKENOPS_POLICY_DECISION_TIMEOUT_MS".to_owned(), DECISION_TIMEOUT_MS.to_string()),
    ]);
    let app = TestApp::spawn_embedded(backend, extra).await;
    let (tenant, owner_token) = create_organisation(&app, "olivia@bank.example").await;
    let id = TenantId(Uuid::parse_str(&tenant).expect("tenant id"));
    let as_tenant = |(subject, token): (String, String)| Tenant { id, subject, token };
    let mut people = Vec::new();
    for email in ["alice@bank.example", "carol@bank.example", "dave@bank.example", "tom@bank.example"] {
        people.push(as_tenant(invite_and_activate(&app, &tenant, &owner_token, email, None).await));
    }
    let [alice, carol, dave, tom]: [Tenant; 4] = people.try_into().unwrap_or_else(|_| panic!("four people"));
    let owner = Tenant { id, subject: String::new(), token: owner_token };
    let groups = format!("/api/tenants/{tenant}/groups");
    for (key, members) in [("checkers", vec![&alice, &carol, &dave]), ("treasury", vec![&tom])] {
        let created = app.post_as(&owner, &groups, &json!({ "key": key, "name": key })).await;
        created.expect(201);
        let group = created.body["id"].as_str().expect("group id").to_owned();
        for member in members {
            let body = json!({ "userId": member.subject });
            app.post_as(&owner, &format!("{groups}/{group}/members"), &body).await.expect(201);
        }
    }
    active_contract_as(&app, &owner, "EUR").await;
    customer_as(&app, &owner, "c-1").await;
    for account in ["a", "b"] {
        active_account_as(&app, &owner, account, "c-1", "EUR").await;
    }
    let minted =
        submit(&app, &owner, json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "a", "amount": "50000" })).await;
    until_state(&app, &owner, &minted, "CONFIRMED").await;
    Org { app, owner, alice, carol, dave, tom }
}

/// Creates a TRANSFER policy from the SYSTEM template with `content` and activates it.
async fn active_policy(app: &TestApp, owner: &Tenant, content: Value) {
    let created = app
        .post_as(owner, "/api/policies", &json!({ "templateKey": "system.transfer.approval", "content": content }))
        .await;
    created.expect(201);
    let id = created.body["id"].as_str().expect("policy id");
    let activated = app.post_as(owner, &format!("/api/policies/{id}/activate"), &json!(null)).await;
    activated.expect(200);
    assert_eq!(activated.body["status"], "ACTIVE", "{}", activated.body);
}

fn transfer(amount: &str) -> Value {
    json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "a", "counterpartyRef": "b", "amount": amount })
}

/// Submits as `who` with a fresh key (202); returns the transactionId.
async fn submit(app: &TestApp, who: &Tenant, body: Value) -> String {
    let reply = app.post_as(who, "/api/transactions", &body).await;
    reply.expect(202);
    reply.body["transactionId"].as_str().unwrap_or_else(|| panic!("transactionId: {}", reply.body)).to_owned()
}

async fn operation(app: &TestApp, who: &Tenant, id: &str) -> Value {
    let reply = app.get_as(who, &format!("/api/transactions/{id}")).await;
    reply.expect(200);
    reply.body
}

/// Runs the jobs (moving the manual clock past receipt polls) until the operation is in
/// `state`, with a real-time deadline; returns it.
async fn until_state(app: &TestApp, who: &Tenant, id: &str, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let found = operation(app, who, id).await;
        if found["state"] == state {
            return found;
        }
        assert!(Instant::now() < deadline, "operation never reached {state}: {found}");
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The POLICY approval requests about operation `id`.
async fn requests_for(app: &TestApp, who: &Tenant, id: &str) -> Vec<Value> {
    let reply = app.get_as(who, &format!("/api/approvals/requests?resourceId={id}")).await;
    reply.expect(200);
    reply.body["data"].as_array().expect("style B data").clone()
}

/// The one request about operation `id`, with its tasks.
async fn request_for(app: &TestApp, who: &Tenant, id: &str) -> Value {
    let found = requests_for(app, who, id).await;
    assert_eq!(found.len(), 1, "one request for {id}: {found:?}");
    let request_id = found[0]["id"].as_str().expect("request id");
    let reply = app.get_as(who, &format!("/api/approvals/requests/{request_id}")).await;
    reply.expect(200);
    reply.body
}

fn task_ids(request: &Value) -> Vec<String> {
    let tasks = request["tasks"].as_array().expect("tasks");
    tasks.iter().map(|t| t["id"].as_str().expect("task id").to_owned()).collect()
}

async fn act(app: &TestApp, who: &Tenant, task: &str, verb: &str) -> Reply {
    app.post_as(who, &format!("/api/approvals/tasks/{task}/{verb}"), &json!({})).await
}

/// The event types about resource `id`, of the given types.
async fn events_about(app: &TestApp, who: &Tenant, event_type: &str, id: &str) -> usize {
    let reply = app.get_as(who, &format!("/api/webhook-events?type={event_type}&limit=100")).await;
    reply.expect(200);
    let items = reply.body["items"].as_array().cloned().unwrap_or_default();
    items.iter().filter(|e| e["resource"]["id"] == id).count()
}

#[track_caller]
fn refused(reply: &Reply, status: u16, code: &str) {
    reply.expect(status);
    assert_eq!(reply.body["code"], code, "{}", reply.body);
}

async fn balance(app: &TestApp, who: &Tenant, account: &str) -> (String, String) {
    let reply = app.get_as(who, &format!("/api/accounts/{account}/balances")).await;
    reply.expect(200);
    let text = |f: &str| reply.body[f].as_str().unwrap_or_else(|| panic!("{f}: {}", reply.body)).to_owned();
    (text("total"), text("available"))
}

/// The policy step resolves an operation's approvers once: a member suspended after that,
/// while the step is still under way, no longer makes the raising of its request refuse what
/// the step had passed (on PostgreSQL, each statement sees the latest commits, and a second
/// check failed the job, which decided the operation again later: a race probe saw it in three
/// rounds of fifteen). The step is held at the audit table, after its check, while the only
/// treasurer is suspended; it then holds the operation as it had decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_approver_suspended_during_the_policy_step_does_not_undo_its_decision() {
    let Org { app, owner, alice, tom, .. } = org(Backend::Postgres).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    let large = submit(&app, &alice, transfer("10000.00")).await;
    let held = app.db.hold_table("audit_records").await;
    let suspend_meanwhile = async {
        until_waiting("the policy step at the audit table", 1, async || app.db.waiting_on("audit_records").await).await;
        app.db.execute(&format!("UPDATE users SET status = 'SUSPENDED' WHERE id = '{}'", tom.subject)).await;
        held.release().await;
    };
    tokio::join!(app.drain_jobs(), suspend_meanwhile);
    let found = operation(&app, &alice, &large).await;
    assert_eq!(found["state"], "AWAITING_APPROVAL", "{found}");
    let request = request_for(&app, &owner, &large).await;
    assert_eq!(request["tasks"][1]["approvers"], json!(["#treasury"]), "{request}");
}

async fn four_eyes_holds_a_large_transfer_until_both_steps_approve(backend: Backend) {
    let Org { app, owner, alice, carol, dave, tom } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;

    // Under the threshold: approved by the rules, settled at once, no request.
    let small = submit(&app, &alice, transfer("9999.99")).await;
    until_state(&app, &alice, &small, "CONFIRMED").await;
    assert!(requests_for(&app, &owner, &small).await.is_empty());

    let large = submit(&app, &alice, transfer("10000.00")).await;
    let held = until_state(&app, &alice, &large, "AWAITING_APPROVAL").await;
    assert!(held["failureCode"].is_null(), "{held}");
    let request = request_for(&app, &owner, &large).await;
    assert_eq!(request["status"], "PENDING");
    assert_eq!(request["source"], "POLICY");
    assert_eq!(request["action"], "TRANSFER");
    assert_eq!(request["resourceType"], "transaction");
    assert_eq!(request["resourceId"], large.as_str());
    assert_eq!(request["initiator"], alice.subject.as_str());
    assert_eq!(request["tasks"][0]["step"], 0);
    assert_eq!(request["tasks"][0]["approvers"], json!(["#checkers"]));
    assert_eq!(request["tasks"][1]["step"], 1);
    assert_eq!(request["tasks"][1]["approvers"], json!(["#treasury"]));
    let tasks = task_ids(&request);
    let request_id = request["id"].as_str().expect("request id").to_owned();
    // The request the policy step raised has its own creation record, as a manual one does.
    let records = app.get_as(&owner, &format!("/api/audit/events?resourceId={request_id}")).await;
    let created = records.body["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(created.len(), 1, "{}", records.body);
    assert_eq!(created[0]["action"], "approval.request.create", "{}", created[0]);
    assert_eq!(created[0]["resourceType"], "approval_request", "{}", created[0]);
    assert_eq!(created[0]["source"], "WORKER", "{}", created[0]);
    assert_eq!(created[0]["detail"]["after"]["resourceId"], large.as_str(), "{}", created[0]);

    // The submitter is a checker, but never approves her own operation; step 1 waits for 0.
    refused(&act(&app, &alice, &tasks[0], "approve").await, 403, "SEPARATION_OF_DUTIES");
    refused(&act(&app, &tom, &tasks[1], "approve").await, 409, "EARLIER_STEP_PENDING");
    act(&app, &carol, &tasks[0], "approve").await.expect(200);
    assert_eq!(until_state(&app, &alice, &large, "AWAITING_APPROVAL").await["state"], "AWAITING_APPROVAL");
    refused(&act(&app, &dave, &tasks[0], "approve").await, 409, "TASK_ALREADY_ACTED_ON");
    let granted = act(&app, &tom, &tasks[1], "approve").await;
    granted.expect(200);
    assert_eq!(granted.body["status"], "APPROVED");

    let confirmed = until_state(&app, &alice, &large, "CONFIRMED").await;
    assert!(confirmed["txHash"].is_string(), "{confirmed}");
    assert_eq!(balance(&app, &owner, "a").await, ("30000.01".to_owned(), "30000.01".to_owned()));
    assert_eq!(balance(&app, &owner, "b").await, ("19999.99".to_owned(), "19999.99".to_owned()));
    assert_eq!(events_about(&app, &owner, "transaction.awaiting_approval", &large).await, 1);
    assert_eq!(events_about(&app, &owner, "approval.requested", &request_id).await, 1);
    assert_eq!(events_about(&app, &owner, "approval.granted", &request_id).await, 1);
    assert_eq!(events_about(&app, &owner, "transaction.confirmed", &large).await, 1);
    assert_eq!(events_about(&app, &owner, "transaction.awaiting_approval", &small).await, 0);
}

async fn a_reject_rule_fails_the_operation_validation_rejected(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    let content = json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [{ "id": "cap", "when": { "assetId": "== EUR", "amount": "> 1000" }, "emit": { "outcome": "REJECT", "reason": "over the cap" } }],
        "defaults": { "unmatched": "AUTO_APPROVE" },
    });
    active_policy(&app, &owner, content).await;
    let id = submit(&app, &alice, transfer("1000.01")).await;
    let failed = until_state(&app, &alice, &id, "FAILED").await;
    assert_eq!(failed["failureCode"], "VALIDATION_REJECTED", "{failed}");
    assert_eq!(failed["reasonCode"], "POLICY_REJECTED", "{failed}");
    assert!(failed["txHash"].is_null());
    assert_eq!(events_about(&app, &owner, "transaction.rejected", &id).await, 1);
    assert_eq!(events_about(&app, &owner, "transaction.failed", &id).await, 0);
    assert!(requests_for(&app, &owner, &id).await.is_empty());
    assert_eq!(balance(&app, &owner, "a").await.0, "50000.00");
    // Under the cap the same policy lets it through.
    let ok = submit(&app, &alice, transfer("1000.00")).await;
    until_state(&app, &alice, &ok, "CONFIRMED").await;
}

async fn an_approver_rejection_fails_the_operation_approval_rejected(backend: Backend) {
    let Org { app, owner, alice, carol, .. } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    let id = submit(&app, &alice, transfer("20000")).await;
    until_state(&app, &alice, &id, "AWAITING_APPROVAL").await;
    let request = request_for(&app, &owner, &id).await;
    let rejected = act(&app, &carol, &task_ids(&request)[0], "reject").await;
    rejected.expect(200);
    assert_eq!(rejected.body["status"], "REJECTED");
    let failed = until_state(&app, &alice, &id, "FAILED").await;
    assert_eq!(failed["failureCode"], "APPROVAL_REJECTED", "{failed}");
    assert_eq!(events_about(&app, &owner, "transaction.rejected", &id).await, 1);
    assert_eq!(balance(&app, &owner, "b").await.0, "0.00");
}

async fn cancelling_the_request_cancels_the_operation(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    let id = submit(&app, &alice, transfer("20000")).await;
    until_state(&app, &alice, &id, "AWAITING_APPROVAL").await;
    let request = request_for(&app, &owner, &id).await;
    let cancel = format!("/api/approvals/requests/{}/cancel", request["id"].as_str().expect("id"));
    let cancelled = call(&app, reqwest::Method::POST, &cancel, Some(&alice.token), None).await;
    cancelled.expect(200);
    assert_eq!(cancelled.body["status"], "CANCELLED");
    let operation = until_state(&app, &alice, &id, "CANCELLED").await;
    // The spec lets a cancelled operation carry free text as its failureCode: it says why.
    assert_eq!(operation["failureCode"], "APPROVAL_CANCELLED", "{operation}");
    assert_eq!(events_about(&app, &owner, "transaction.cancelled", &id).await, 1);
    assert_eq!(balance(&app, &owner, "a").await.0, "50000.00");
}

async fn an_expired_request_fails_the_operation_policy_expired(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    let id = submit(&app, &alice, transfer("20000")).await;
    until_state(&app, &alice, &id, "AWAITING_APPROVAL").await;
    app.clock.advance_millis(LIFETIME_MS);
    let failed = until_state(&app, &alice, &id, "FAILED").await;
    assert_eq!(failed["failureCode"], "POLICY_EXPIRED", "{failed}");
    assert_eq!(request_for(&app, &owner, &id).await["status"], "EXPIRED");
    assert_eq!(events_about(&app, &owner, "transaction.failed", &id).await, 1);
    assert_eq!(events_about(&app, &owner, "transaction.rejected", &id).await, 0);
}

async fn an_unmatched_operation_goes_to_a_policy_update_holder_for_manual_review(backend: Backend) {
    let Org { app, owner, alice, carol, .. } = org(backend).await;
    // Only USD transfers have a rule: an EUR one matches none and needs a review.
    let content = json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [{ "id": "usd", "when": { "assetId": "== USD" }, "emit": { "autoApproval": true } }],
        "defaults": { "unmatched": "REQUIRE_MANUAL_REVIEW" },
    });
    active_policy(&app, &owner, content).await;
    // A second policy:update holder: the review is one task that either of them decides.
    let tenant = owner.id.0.to_string();
    let (rita_id, rita_token) =
        invite_and_activate(&app, &tenant, &owner.token, "rita@bank.example", Some("ADMIN")).await;
    let rita = Tenant { id: owner.id, subject: rita_id.clone(), token: rita_token };
    let id = submit(&app, &alice, transfer("5")).await;
    until_state(&app, &alice, &id, "AWAITING_APPROVAL").await;
    let request = request_for(&app, &owner, &id).await;
    let tasks = request["tasks"].as_array().expect("tasks").clone();
    // The owner (SUPER_ADMIN) and rita (ADMIN) hold policy:update; alice and carol (USER) do not.
    assert_eq!(tasks.len(), 1, "{request}");
    assert_eq!(tasks[0]["step"], 0);
    let approvers: Vec<String> = tasks[0]["approvers"]
        .as_array()
        .expect("approvers")
        .iter()
        .map(|a| a.as_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(approvers.len(), 2, "{request}");
    assert!(approvers.iter().all(|a| a.starts_with("user:")), "{approvers:?}");
    assert!(approvers.contains(&format!("user:{rita_id}")), "{approvers:?}");
    assert!(!approvers.contains(&format!("user:{}", alice.subject)), "{approvers:?}");
    assert!(!approvers.contains(&format!("user:{}", carol.subject)), "{approvers:?}");
    let task = tasks[0]["id"].as_str().expect("task id");
    refused(&act(&app, &carol, task, "approve").await, 403, "SEPARATION_OF_DUTIES");
    act(&app, &rita, task, "approve").await.expect(200);
    until_state(&app, &alice, &id, "CONFIRMED").await;
    refused(&act(&app, &owner, task, "approve").await, 409, "APPROVAL_NOT_PENDING");
}

async fn a_release_of_an_approved_lock_is_not_evaluated_again(backend: Backend) {
    let Org { app, owner, alice, carol, tom, .. } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    let lock =
        json!({ "txType": "LOCK", "assetId": "EUR", "accountRef": "a", "counterpartyRef": "b", "amount": "15000" });
    let lock_id = submit(&app, &alice, lock).await;
    until_state(&app, &alice, &lock_id, "AWAITING_APPROVAL").await;
    // No lock exists while its LOCK waits: completing it is refused as for any lock not ACTIVE.
    app.get_as(&owner, &format!("/api/locks/{lock_id}")).await.expect(404);
    for tx_type in ["RELEASE", "CANCEL"] {
        let body = json!({ "txType": tx_type, "params": { "lockId": lock_id } });
        app.post_as(&alice, "/api/transactions", &body).await.expect(404);
    }
    let tasks = task_ids(&request_for(&app, &owner, &lock_id).await);
    act(&app, &carol, &tasks[0], "approve").await.expect(200);
    act(&app, &tom, &tasks[1], "approve").await.expect(200);
    until_state(&app, &alice, &lock_id, "CONFIRMED").await;
    assert_eq!(balance(&app, &owner, "a").await, ("50000.00".to_owned(), "35000.00".to_owned()));

    // The RELEASE of 15,000.00 settles with no new request.
    let release = submit(&app, &alice, json!({ "txType": "RELEASE", "params": { "lockId": lock_id } })).await;
    until_state(&app, &alice, &release, "CONFIRMED").await;
    assert!(requests_for(&app, &owner, &release).await.is_empty());
    assert_eq!(events_about(&app, &owner, "transaction.awaiting_approval", &release).await, 0);
    assert_eq!(balance(&app, &owner, "b").await.0, "15000.00");
}

async fn an_approver_group_that_does_not_exist_fails_the_operation_approvers_unresolvable(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    let content = json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [{ "id": "all", "when": { "assetId": "== EUR" }, "emit": { "approver": "#nobody" } }],
        "defaults": { "unmatched": "AUTO_APPROVE" },
    });
    active_policy(&app, &owner, content).await;
    let id = submit(&app, &alice, transfer("1")).await;
    let failed = until_state(&app, &alice, &id, "FAILED").await;
    assert_eq!(failed["failureCode"], "VALIDATION_REJECTED", "{failed}");
    assert_eq!(failed["reasonCode"], "APPROVERS_UNRESOLVABLE", "{failed}");
    assert_eq!(events_about(&app, &owner, "transaction.rejected", &id).await, 1);
    assert!(requests_for(&app, &owner, &id).await.is_empty());
}

async fn an_operation_whose_policies_stay_unreadable_fails_policy_timeout(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    active_policy(&app, &owner, four_eyes_policy()).await;
    app.db.break_table("policies").await;
    let id = submit(&app, &alice, transfer("5")).await;
    // Undecided, retried: still SUBMITTED well before the deadline.
    app.drain_jobs().await;
    app.clock.advance_millis(DECISION_TIMEOUT_MS / 2);
    app.drain_jobs().await;
    assert_eq!(operation(&app, &alice, &id).await["state"], "SUBMITTED");
    app.clock.advance_millis(DECISION_TIMEOUT_MS / 2);
    let failed = until_state(&app, &alice, &id, "FAILED").await;
    app.db.restore_table("policies").await;
    assert_eq!(failed["failureCode"], "POLICY_TIMEOUT", "{failed}");
    assert_eq!(events_about(&app, &owner, "transaction.failed", &id).await, 1);
    assert!(requests_for(&app, &owner, &id).await.is_empty());
    // Readable again, the policies decide as before.
    let next = submit(&app, &alice, transfer("5")).await;
    until_state(&app, &alice, &next, "CONFIRMED").await;
}

/// The policy of the API guide's worked example, as the guide prints it.
fn guide_example() -> Value {
    let guide = include_str!("../../../../docs/api-guide.md");
    let start = guide.find("**A worked example**").expect("the worked example");
    let block = &guide[start..];
    let open = block.find("```json").expect("its JSON block") + "```json".len();
    let close = open + block[open..].find("```").expect("the block's end");
    serde_json::from_str(&block[open..close]).expect("the example is JSON")
}

async fn the_api_guides_worked_example_works_as_it_says(backend: Backend) {
    let Org { app, owner, alice, carol, .. } = org(backend).await;
    let groups = format!("/api/tenants/{}/groups", owner.id.0);
    let created = app.post_as(&owner, &groups, &json!({ "key": "approvers", "name": "Approvers" })).await;
    created.expect(201);
    let members = format!("{groups}/{}/members", created.body["id"].as_str().expect("group id"));
    app.post_as(&owner, &members, &json!({ "userId": carol.subject })).await.expect(201);
    let policy = app.post_as(&owner, "/api/policies", &guide_example()).await;
    policy.expect(201);
    let activate = format!("/api/policies/{}/activate", policy.body["id"].as_str().expect("policy id"));
    app.post_as(&owner, &activate, &json!(null)).await.expect(200);

    let small = submit(&app, &alice, transfer("50.00")).await;
    until_state(&app, &alice, &small, "CONFIRMED").await;
    let huge = submit(&app, &alice, transfer("250000.00")).await;
    assert_eq!(until_state(&app, &alice, &huge, "FAILED").await["failureCode"], "VALIDATION_REJECTED");
    let large = submit(&app, &alice, transfer("1500.00")).await;
    until_state(&app, &alice, &large, "AWAITING_APPROVAL").await;
    assert_eq!(events_about(&app, &owner, "transaction.awaiting_approval", &large).await, 1);
    // The submitter may not approve her own operation; the group's member does.
    let task = task_ids(&request_for(&app, &owner, &large).await)[0].clone();
    refused(&act(&app, &alice, &task, "approve").await, 403, "SEPARATION_OF_DUTIES");
    act(&app, &carol, &task, "approve").await.expect(200);
    until_state(&app, &alice, &large, "CONFIRMED").await;
}
