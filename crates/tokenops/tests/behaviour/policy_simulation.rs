//! Policy simulation over HTTP (beyond the spec: `POST /api/policies/simulations`), on both
//! stores: the decision each operation of a window got beside the one a stricter version, or
//! unsaved content, would give it, the counts of each pair, and proof that nothing is written.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokenops_domain::{Clock, TenantId};
use tokenops_testkit::organisation::{call, create_organisation, invite_and_activate};
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

use crate::fixtures::{active_account_as, active_contract_as, customer_as};
use crate::support::assert_invalid;

backends!(
    a_stricter_version_turns_approvals_into_holds_and_refusals_and_writes_nothing,
    each_refusal_of_a_simulation_has_its_status,
);

const PATH: &str = "/api/policies/simulations";
const TEMPLATE: &str = "system.transfer.approval";

/// EUR transfers: from 40,000.00 refused, from `hold` held for `#checkers`, smaller approved.
fn rules(hold: &str, reject: &str) -> Value {
    json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [
            { "id": "huge", "when": { "assetId": "== EUR", "amount": format!(">= {reject}") },
              "emit": { "outcome": "REJECT", "reason": "too large" } },
            { "id": "large", "when": { "assetId": "== EUR", "amount": format!(">= {hold}") },
              "emit": { "approver": "#checkers", "step": 0 } },
            { "id": "small", "when": { "assetId": "== EUR", "amount": format!("[0 .. {hold})") },
              "emit": { "autoApproval": true } },
        ],
        "defaults": { "unmatched": "AUTO_APPROVE" },
    })
}

struct Org {
    app: TestApp,
    owner: Tenant,
    alice: Tenant,
    tenant: String,
}

/// An organisation with `#checkers` (carol), an ACTIVE EUR contract, accounts a and b, and
/// alice, who submits.
async fn org(backend: Backend) -> Org {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let (tenant, owner_token) = create_organisation(&app, "olivia@bank.example").await;
    let id = TenantId(Uuid::parse_str(&tenant).expect("tenant id"));
    let as_tenant = |(subject, token): (String, String)| Tenant { id, subject, token };
    let alice = as_tenant(invite_and_activate(&app, &tenant, &owner_token, "alice@bank.example", None).await);
    let carol = as_tenant(invite_and_activate(&app, &tenant, &owner_token, "carol@bank.example", None).await);
    let owner = Tenant { id, subject: String::new(), token: owner_token };
    let groups = format!("/api/tenants/{tenant}/groups");
    let created = app.post_as(&owner, &groups, &json!({ "key": "checkers", "name": "checkers" })).await;
    created.expect(201);
    let group = created.body["id"].as_str().expect("group id").to_owned();
    let member = json!({ "userId": carol.subject });
    app.post_as(&owner, &format!("{groups}/{group}/members"), &member).await.expect(201);
    active_contract_as(&app, &owner, "EUR").await;
    customer_as(&app, &owner, "c-1").await;
    for account in ["a", "b"] {
        active_account_as(&app, &owner, account, "c-1", "EUR").await;
    }
    Org { app, owner, alice, tenant }
}

async fn submit(app: &TestApp, who: &Tenant, body: Value) -> String {
    let reply = app.post_as(who, "/api/transactions", &body).await;
    reply.expect(202);
    reply.body["transactionId"].as_str().unwrap_or_else(|| panic!("transactionId: {}", reply.body)).to_owned()
}

fn transfer(amount: &str) -> Value {
    json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "a", "counterpartyRef": "b", "amount": amount })
}

/// Runs the jobs until the operation is in `state` (a real-time deadline).
async fn until_state(app: &TestApp, who: &Tenant, id: &str, state: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let found = app.get_as(who, &format!("/api/transactions/{id}")).await;
        if found.body["state"] == state {
            return;
        }
        assert!(Instant::now() < deadline, "operation never reached {state}: {}", found.body);
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a simulation could change: the audit log, the events, the operations, the policies
/// and the approval requests, as the API shows them.
async fn everything(app: &TestApp, who: &Tenant) -> Vec<Value> {
    let mut seen = Vec::new();
    for path in [
        "/api/audit/events?size=100",
        "/api/webhook-events?limit=100",
        "/api/transactions?size=100",
        "/api/policies?size=100",
        "/api/approvals/requests?size=100",
    ] {
        let reply = app.get_as(who, path).await;
        reply.expect(200);
        seen.push(reply.body);
    }
    seen
}

/// (got, wouldGet) → count, from the answer's counts.
fn counts(reply: &Reply) -> BTreeMap<(String, String), u64> {
    let counts = reply.body["counts"].as_array().unwrap_or_else(|| panic!("counts: {}", reply.body));
    let text = |c: &Value, f: &str| c[f].as_str().expect("outcome").to_owned();
    counts.iter().map(|c| ((text(c, "got"), text(c, "wouldGet")), c["count"].as_u64().expect("count"))).collect()
}

/// transactionId → (got, wouldGet).
fn outcomes(reply: &Reply) -> BTreeMap<String, (String, String)> {
    let operations = reply.body["operations"].as_array().unwrap_or_else(|| panic!("operations: {}", reply.body));
    let text = |o: &Value, f: &str| o[f].as_str().unwrap_or_else(|| panic!("{f}: {o}")).to_owned();
    operations.iter().map(|o| (text(o, "transactionId"), (text(o, "got"), text(o, "wouldGet")))).collect()
}

fn pair(got: &str, would_get: &str) -> (String, String) {
    (got.to_owned(), would_get.to_owned())
}

async fn a_stricter_version_turns_approvals_into_holds_and_refusals_and_writes_nothing(backend: Backend) {
    let Org { app, owner, alice, .. } = org(backend).await;
    let from = app.clock.now();
    let minted =
        submit(&app, &owner, json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "a", "amount": "90000" })).await;
    until_state(&app, &owner, &minted, "CONFIRMED").await;

    // Version 1, ACTIVE: held from 10,000.00, refused from 40,000.00.
    let created = app
        .post_as(&owner, "/api/policies", &json!({ "templateKey": TEMPLATE, "content": rules("10000", "40000") }))
        .await;
    created.expect(201);
    let policy = created.body["id"].as_str().expect("policy id").to_owned();
    app.post_as(&owner, &format!("/api/policies/{policy}/activate"), &json!(null)).await.expect(200);

    let mut ids = BTreeMap::new();
    for (amount, state) in [
        ("100.00", "CONFIRMED"),
        ("2000.00", "CONFIRMED"),
        ("5000.00", "CONFIRMED"),
        ("20000.00", "AWAITING_APPROVAL"),
        ("45000.00", "FAILED"),
    ] {
        app.clock.advance_millis(1000);
        let id = submit(&app, &alice, transfer(amount)).await;
        until_state(&app, &alice, &id, state).await;
        ids.insert(amount, id);
    }
    // Version 2, not current: held from 1,000.00, refused from 3,000.00.
    let added = app
        .post_as(&owner, &format!("/api/policies/{policy}/versions"), &json!({ "content": rules("1000", "3000") }))
        .await;
    added.expect(201);
    app.clock.advance_millis(1000);
    let to = app.clock.now();
    let window = |extra: Value| {
        let mut body = json!({ "from": from.to_iso8601(), "to": to.to_iso8601() });
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        body
    };

    let before = everything(&app, &owner).await;
    let stricter = app.post_as(&owner, PATH, &window(json!({ "policyId": policy, "versionNumber": 2 }))).await;
    stricter.expect(200);
    let body = &stricter.body;
    assert_eq!(body["policyId"], policy.as_str(), "{body}");
    assert_eq!(body["versionNumber"], 2);
    assert_eq!(body["action"], "TRANSFER");
    assert_eq!(body["templateKey"], TEMPLATE);
    assert_eq!(body["mode"], "REPLACES", "an ACTIVE policy's version stands in for it");
    assert_eq!((body["operationsInWindow"].as_u64(), body["examined"].as_u64()), (Some(6), Some(6)));
    assert_eq!(body["truncated"], false);
    let got = outcomes(&stricter);
    assert_eq!(got[&ids["100.00"]], pair("APPROVE", "APPROVE"));
    assert_eq!(got[&ids["2000.00"]], pair("APPROVE", "REQUIRE_APPROVAL"));
    assert_eq!(got[&ids["5000.00"]], pair("APPROVE", "REJECT"));
    assert_eq!(got[&ids["20000.00"]], pair("REQUIRE_APPROVAL", "REJECT"));
    assert_eq!(got[&ids["45000.00"]], pair("REJECT", "REJECT"));
    // No ACTIVE policy governs MINT: it passed, and still would, ungoverned.
    assert_eq!(got[&minted], pair("APPROVE", "NOT_GOVERNED"));
    let expected: BTreeMap<_, _> = [
        (pair("APPROVE", "APPROVE"), 1),
        (pair("APPROVE", "NOT_GOVERNED"), 1),
        (pair("APPROVE", "REQUIRE_APPROVAL"), 1),
        (pair("APPROVE", "REJECT"), 1),
        (pair("REQUIRE_APPROVAL", "REJECT"), 1),
        (pair("REJECT", "REJECT"), 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts(&stricter), expected);
    assert_eq!(body["changed"], 4);
    let first = &body["operations"][0];
    assert_eq!(first["transactionId"], ids["45000.00"].as_str(), "newest first: {body}");
    assert_eq!((first["txType"].as_str(), first["amount"].as_str()), (Some("TRANSFER"), Some("45000.00")));
    assert_eq!((first["assetId"].as_str(), first["state"].as_str()), (Some("EUR"), Some("FAILED")));
    assert!(first["submittedAt"].as_str().is_some_and(|t| t.ends_with('Z')), "{first}");

    // The current version (1, by default) decides as the pipeline did.
    let current = app.post_as(&owner, PATH, &window(json!({ "policyId": policy }))).await;
    current.expect(200);
    assert_eq!(current.body["versionNumber"], 1);
    assert!(outcomes(&current).iter().all(|(id, (g, w))| g == w || *id == minted), "{}", current.body);

    // Unsaved content joins the ACTIVE policy: the stricter rules outrank its approvals.
    let content = window(json!({ "templateKey": TEMPLATE, "content": rules("1000", "3000") }));
    let joined = app.post_as(&owner, PATH, &content).await;
    joined.expect(200);
    assert_eq!(joined.body["mode"], "JOINS");
    assert!(joined.body.get("policyId").is_none(), "{}", joined.body);
    assert_eq!(counts(&joined), expected);

    // A hold no one could grant is refused by the pipeline (APPROVERS_UNRESOLVABLE), and so
    // foretold: content sending every transfer to a group that does not exist, beside the
    // ACTIVE policy, would refuse each one.
    let mut unreachable = rules("0.01", "1000000");
    unreachable["rules"][1]["emit"]["approver"] = json!("#nobody");
    let foretold = app.post_as(&owner, PATH, &window(json!({ "templateKey": TEMPLATE, "content": unreachable }))).await;
    foretold.expect(200);
    assert_eq!(foretold.body["mode"], "JOINS", "{}", foretold.body);
    for amount in ["100.00", "2000.00", "5000.00", "20000.00", "45000.00"] {
        assert_eq!(outcomes(&foretold)[&ids[amount]].1, "REJECT", "{amount}: {}", foretold.body);
    }

    // The window is half-open: an end at the newest operation's submission leaves it out.
    let newest = first["submittedAt"].as_str().expect("submittedAt").to_owned();
    let narrow = json!({ "policyId": policy, "versionNumber": 2, "from": from.to_iso8601(), "to": newest });
    let narrowed = app.post_as(&owner, PATH, &narrow).await;
    narrowed.expect(200);
    assert_eq!(narrowed.body["examined"], 5);
    assert!(!outcomes(&narrowed).contains_key(&ids["45000.00"]));

    // Read-only: the audit log, the events, the operations, the policies and the requests are
    // as they were, and the jobs have nothing new to do.
    app.drain_jobs().await;
    assert_eq!(everything(&app, &owner).await, before);

    // Later: a LOCK and its RELEASE (which no policy governs), and a transfer not evaluated yet.
    let later = app.clock.now();
    let lock =
        json!({ "txType": "LOCK", "assetId": "EUR", "accountRef": "a", "counterpartyRef": "b", "amount": "10.00" });
    let locked = submit(&app, &alice, lock).await;
    until_state(&app, &alice, &locked, "CONFIRMED").await;
    let released = submit(&app, &alice, json!({ "txType": "RELEASE", "params": { "lockId": locked } })).await;
    until_state(&app, &alice, &released, "CONFIRMED").await;
    app.clock.advance_millis(1000);
    let waiting = submit(&app, &alice, transfer("50.00")).await;
    app.clock.advance_millis(1000);
    let window = json!({ "policyId": policy, "versionNumber": 2, "from": later.to_iso8601(),
                         "to": app.clock.now().to_iso8601() });
    let latest = app.post_as(&owner, PATH, &window).await;
    latest.expect(200);
    let got = outcomes(&latest);
    assert_eq!(got.len(), 3, "{}", latest.body);
    assert_eq!(got[&locked], pair("APPROVE", "APPROVE"), "a LOCK is governed as a TRANSFER");
    assert_eq!(got[&released], pair("NOT_GOVERNED", "NOT_GOVERNED"));
    assert_eq!(got[&waiting], pair("UNDECIDED", "APPROVE"));
    assert_eq!(latest.body["operations"][1]["action"], Value::Null, "a RELEASE has no policy action");
    assert_eq!(latest.body["operations"][2]["action"], "TRANSFER");
}

async fn each_refusal_of_a_simulation_has_its_status(backend: Backend) {
    let Org { app, owner, tenant, .. } = org(backend).await;
    let created =
        app.post_as(&owner, "/api/policies", &json!({ "templateKey": TEMPLATE, "content": rules("10", "40") })).await;
    created.expect(201);
    let policy = created.body["id"].as_str().expect("policy id").to_owned();
    let now = app.clock.now();
    let (from, to) = (now.minus_millis(3_600_000).to_iso8601(), now.to_iso8601());
    let post = |body: Value| {
        let (app, owner) = (&app, &owner);
        async move { app.post_as(owner, PATH, &body).await }
    };

    // A DRAFT's version simulates (it joins, as it is not ACTIVE).
    let draft = post(json!({ "policyId": policy, "from": from, "to": to })).await;
    draft.expect(200);
    assert_eq!((draft.body["mode"].as_str(), draft.body["examined"].as_u64()), (Some("JOINS"), Some(0)));

    // 400: the window.
    assert_invalid(&post(json!({ "policyId": policy, "from": to, "to": from })).await, "from");
    assert_invalid(&post(json!({ "policyId": policy, "from": to, "to": to })).await, "from");
    assert_invalid(&post(json!({ "policyId": policy, "from": "yesterday", "to": to })).await, "from");
    assert_invalid(&post(json!({ "policyId": policy, "from": from })).await, "to");
    let long = now.minus_millis(32 * 86_400_000).to_iso8601();
    assert_invalid(&post(json!({ "policyId": policy, "from": long, "to": to })).await, "to");
    // 400: the source.
    assert_invalid(&post(json!({ "from": from, "to": to })).await, "policyId");
    let both =
        json!({ "policyId": policy, "templateKey": TEMPLATE, "content": rules("1", "2"), "from": from, "to": to });
    assert_invalid(&post(both).await, "policyId");
    assert_invalid(&post(json!({ "policyId": "not-a-uuid", "from": from, "to": to })).await, "policyId");
    assert_invalid(
        &post(json!({ "policyId": policy, "versionNumber": 0, "from": from, "to": to })).await,
        "versionNumber",
    );
    assert_invalid(&post(json!({ "content": rules("1", "2"), "from": from, "to": to })).await, "templateKey");
    // 400: content that would not save, with the same details as on save.
    let mut bad = rules("1", "2");
    bad["rules"][0]["when"]["amount"] = json!("!= 5");
    bad["rules"][1]["when"]["colour"] = json!("== red");
    let refused = post(json!({ "templateKey": TEMPLATE, "content": bad, "from": from, "to": to })).await;
    assert_invalid(&refused, "content.rules[0].when.amount");
    assert_invalid(&refused, "content.rules[1].when.colour");
    let saved = app.post_as(&owner, "/api/policies", &json!({ "templateKey": TEMPLATE, "content": bad })).await;
    assert_eq!(saved.body["details"], refused.body["details"], "validated exactly as on save");

    // 404: an unknown policy, version or template; another organisation's policy.
    let unknown = post(json!({ "policyId": Uuid::now_v7(), "from": from, "to": to })).await;
    unknown.expect(404);
    assert_eq!(unknown.body["code"], "POLICY_NOT_FOUND", "{}", unknown.body);
    let version = post(json!({ "policyId": policy, "versionNumber": 9, "from": from, "to": to })).await;
    version.expect(404);
    assert_eq!(version.body["code"], "POLICY_VERSION_NOT_FOUND", "{}", version.body);
    post(json!({ "templateKey": "no.such", "content": rules("1", "2"), "from": from, "to": to })).await.expect(404);
    let (_, stranger) = create_organisation(&app, "sam@other.example").await;
    let foreign = json!({ "policyId": policy, "from": from, "to": to });
    call(&app, Method::POST, PATH, Some(&stranger), Some(&foreign)).await.expect(404);

    // 403 without policy:read; 200 with it alone; 401 without a token.
    for (role, permission) in [("Policy Readers", "policy:read"), ("Customer Readers", "customer:read")] {
        let body = json!({ "name": role, "description": "", "permissions": [permission] });
        app.post_as(&owner, &format!("/api/tenants/{tenant}/roles"), &body).await.expect(201);
    }
    let (_, reader) =
        invite_and_activate(&app, &tenant, &owner.token, "rita@bank.example", Some("Policy Readers")).await;
    let (_, outsider) =
        invite_and_activate(&app, &tenant, &owner.token, "otto@bank.example", Some("Customer Readers")).await;
    let body = json!({ "policyId": policy, "from": from, "to": to });
    call(&app, Method::POST, PATH, Some(&reader), Some(&body)).await.expect(200);
    let denied = call(&app, Method::POST, PATH, Some(&outsider), Some(&body)).await;
    denied.expect(403);
    assert_eq!(denied.body["message"], "Missing permission: policy:read", "{}", denied.body);
    call(&app, Method::POST, PATH, None, Some(&body)).await.expect(401);
}
