//! Token operations over HTTP (spec: Resources/Token operation, Balance; States and
//! transitions/Token operation; Endpoints/Token operations rules 1–6; Errors/Token operations
//! and balances; Failed operations; Paging styles A and D; supplement §5), on both stores with
//! the embedded ledger: submission (every cause of 400, 403, 404, 409, 422, 202), the
//! settlement pipeline to CONFIRMED or FAILED (CHAIN_FAILED, UNPROCESSABLE, SIGNING_REJECTED),
//! locks (release, cancel, expiry), reads, breaks and reconciliation. The last test runs the
//! whole lifecycle once on anvil.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokenops_app::clock::Clock;
use tokenops_app::jobs::kinds;
use tokenops_domain::Timestamp;
use tokenops_store::NewJob;
use tokenops_testkit::anvil::Anvil;
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, TestSigner, backends};
use uuid::Uuid;

use crate::fixtures::{active_account, active_contract, customer};
use crate::support::{
    assert_error, assert_iso_utc, assert_retry_after, drain_past_three_attempts, key, three_attempts, write_in_flight,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Runs the pipeline until every operation is terminal: drains the jobs, moving the manual
/// clock past each receipt poll, with a real-time deadline.
async fn settle(app: &TestApp) {
    settle_within(app, Duration::from_secs(20)).await;
}

async fn settle_within(app: &TestApp, limit: Duration) {
    let deadline = Instant::now() + limit;
    loop {
        app.drain_jobs().await;
        let open = app.db.count("operations", "state NOT IN ('CONFIRMED', 'FAILED', 'CANCELLED')").await;
        if open == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{open} operations still in flight");
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A USD contract, customer `c-1` and its ACTIVE USD accounts `a` and `b`.
async fn setup(app: &TestApp) {
    active_contract(app, "USD").await;
    customer(app, "c-1").await;
    for account in ["a", "b"] {
        active_account(app, account, "c-1", "USD").await;
    }
}

fn mint(account: &str, amount: &str) -> Value {
    json!({ "txType": "MINT", "assetId": "USD", "accountRef": account, "amount": amount })
}

fn burn(account: &str, amount: &str) -> Value {
    json!({ "txType": "BURN", "assetId": "USD", "accountRef": account, "amount": amount })
}

fn transfer(from: &str, to: &str, amount: &str) -> Value {
    json!({ "txType": "TRANSFER", "assetId": "USD", "accountRef": from, "counterpartyRef": to, "amount": amount })
}

/// A LOCK of `amount` on `owner`, for `payee` when given, expiring at `expires_at` when given.
fn lock(owner: &str, payee: Option<&str>, amount: &str, expires_at: Option<Value>) -> Value {
    let mut body = json!({ "txType": "LOCK", "assetId": "USD", "accountRef": owner, "amount": amount });
    if let Some(payee) = payee {
        body["counterpartyRef"] = json!(payee);
    }
    if let Some(at) = expires_at {
        body["params"] = json!({ "expiresAt": at });
    }
    body
}

/// Accounts `a` (funded with 100) and `b`, and a settled LOCK of 10 on `a` for `b`: its id.
async fn a_settled_lock(app: &TestApp) -> String {
    setup(app).await;
    funded(app, "a", "100").await;
    let lock_id = id_of(&submit(app, lock("a", Some("b"), "10", None)).await);
    settle(app).await;
    lock_id
}

/// A RELEASE or CANCEL of `lock_id`.
fn complete(tx_type: &str, lock_id: &str) -> Value {
    json!({ "txType": tx_type, "params": { "lockId": lock_id } })
}

/// Submits with a fresh key: 202.
async fn submit(app: &TestApp, body: Value) -> Reply {
    let reply = app.post("/api/transactions", &body).await;
    reply.expect(202);
    reply
}

fn id_of(reply: &Reply) -> String {
    reply.body["transactionId"].as_str().unwrap_or_else(|| panic!("transactionId: {}", reply.body)).to_owned()
}

async fn get_operation(app: &TestApp, id: &str) -> Value {
    let reply = app.get(&format!("/api/transactions/{id}")).await;
    reply.expect(200);
    reply.body
}

async fn operation(app: &TestApp, reply: &Reply) -> Value {
    get_operation(app, &id_of(reply)).await
}

/// Mints `amount` to `account` and settles it: CONFIRMED.
async fn funded(app: &TestApp, account: &str, amount: &str) {
    let minted = submit(app, mint(account, amount)).await;
    settle(app).await;
    let minted = operation(app, &minted).await;
    assert_eq!(minted["state"], "CONFIRMED", "{minted}");
}

async fn balance(app: &TestApp, account: &str) -> Value {
    let reply = app.get(&format!("/api/accounts/{account}/balances")).await;
    reply.expect(200);
    reply.body
}

/// (total, available, locked) of an account's balance.
async fn amounts(app: &TestApp, account: &str) -> (String, String, String) {
    let b = balance(app, account).await;
    let text = |field: &str| b[field].as_str().unwrap_or_else(|| panic!("{field}: {b}")).to_owned();
    (text("total"), text("available"), text("locked"))
}

fn triple(total: &str, available: &str, locked: &str) -> (String, String, String) {
    (total.to_owned(), available.to_owned(), locked.to_owned())
}

/// `0x` and 64 lower-case hex digits.
#[track_caller]
fn assert_hash(value: &Value) {
    let text = value.as_str().unwrap_or_else(|| panic!("txHash is not a string: {value}"));
    assert!(
        text.len() == 66
            && text.starts_with("0x")
            && text[2..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{text:?} is not a transaction hash"
    );
}

/// 400 whose message names `field`.
#[track_caller]
fn assert_invalid(reply: &Reply, field: &str, case: &str) {
    assert_eq!(reply.status, 400, "{case}: expected 400 naming {field}; body: {}", reply.body);
    assert_error(reply, 400);
    let message = reply.body["message"].as_str().unwrap_or_default();
    assert!(message.contains(field), "{case}: the message does not name {field}: {message:?}");
}

/// The events of `event_type` about operation `id`.
async fn events_about(app: &TestApp, event_type: &str, id: &str) -> Vec<Value> {
    let reply = app.get(&format!("/api/webhook-events?type={event_type}&limit=100")).await;
    reply.expect(200);
    let items = reply.body["items"].as_array().cloned().unwrap_or_default();
    items.into_iter().filter(|e| e["resource"]["id"] == id).collect()
}

async fn event_count(app: &TestApp, event_type: &str) -> usize {
    let reply = app.get(&format!("/api/webhook-events?type={event_type}&limit=100")).await;
    reply.expect(200);
    reply.body["items"].as_array().map_or(0, Vec::len)
}

/// `field` of each item of a style A page.
fn listed(reply: &Reply, field: &str) -> Vec<String> {
    reply.expect(200);
    reply.body["content"]
        .as_array()
        .unwrap_or_else(|| panic!("style A content: {}", reply.body))
        .iter()
        .map(|item| item[field].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// `transactionId` of each item of a style D page.
fn items(reply: &Reply) -> Vec<String> {
    reply.expect(200);
    reply.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("style D items: {}", reply.body))
        .iter()
        .map(|item| item["transactionId"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// A token of the default organisation's external provider carrying exactly `scope`.
fn with_scope(app: &TestApp, scope: &str) -> Tenant {
    let subject = Uuid::now_v7().to_string();
    let claims = app.issuer.claims_with_scope(&app.clock, &subject, Some(app.tenant.id), 3_600, Some(scope));
    Tenant { id: app.tenant.id, subject, token: app.issuer.sign(&claims) }
}

async fn with_key(app: &TestApp, key: &str, body: &Value) -> Reply {
    app.write(Method::POST, "/api/transactions", key, body).await
}

/// Moves the clock back to a whole millisecond, so that every timestamp of the test is exactly
/// what the API prints (millisecond precision).
fn align_clock(app: &TestApp) {
    let now = app.clock.now().as_micros();
    app.clock.set(Timestamp::from_micros(now - now % 1_000));
}

/// Runs a periodic job now (as a worker would on its period).
async fn run_periodic(app: &TestApp, kind: &str) {
    app.app.jobs.schedule_periodic(kind).await.expect("schedule");
    app.drain_jobs().await;
}

async fn breaks(app: &TestApp, query: &str) -> Reply {
    let reply = app.get(&format!("/api/transactions/breaks{query}")).await;
    reply.expect(200);
    reply
}

// ---------------------------------------------------------------------------------------------
// POST /api/transactions: 202, 400, 403, 404, 409, 422
// ---------------------------------------------------------------------------------------------

backends!(a_lifecycle_of_mint_transfer_lock_and_release);

async fn a_lifecycle_of_mint_transfer_lock_and_release(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let mint = submit(&app, json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "100.00" })).await;
    assert_eq!(mint.body["state"], "SUBMITTED");
    assert!(mint.body.get("failureCode").is_none());
    let location = mint.header("location").map(str::to_owned);
    assert_eq!(
        location,
        Some(format!("/api/transactions/{}", mint.body["transactionId"].as_str().unwrap_or_default()))
    );
    settle(&app).await;
    let minted = operation(&app, &mint).await;
    assert_eq!(minted["state"], "CONFIRMED", "{minted}");
    assert!(minted["txHash"].is_string() && minted["blockNumber"].is_u64(), "{minted}");
    assert!(minted.get("failureCode").is_none(), "{minted}");
    assert_eq!(balance(&app, "a").await["total"], "100.00");

    let transfer = submit(
        &app,
        json!({ "txType": "TRANSFER", "assetId": "USD", "accountRef": "a", "counterpartyRef": "b", "amount": "30" }),
    )
    .await;
    let too_much = submit(
        &app,
        json!({ "txType": "TRANSFER", "assetId": "USD", "accountRef": "b", "counterpartyRef": "a", "amount": "500" }),
    )
    .await;
    settle(&app).await;
    assert_eq!(operation(&app, &transfer).await["state"], "CONFIRMED");
    let failed = operation(&app, &too_much).await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    assert_eq!(failed["failureCode"], "CHAIN_FAILED", "{failed}");
    assert!(failed["txHash"].is_string() && failed["blockNumber"].is_u64(), "included and reverted: {failed}");
    assert_eq!(failed["reasonCode"], "EXECUTION_REVERTED", "{failed}");
    assert!(failed["revertReason"].as_str().is_some_and(|r| r.contains("Insufficient")), "{failed}");
    assert_eq!(balance(&app, "a").await["total"], "70.00");
    assert_eq!(balance(&app, "b").await["total"], "30.00");
    let breaks = app.get("/api/transactions/breaks").await;
    assert_eq!(breaks.body["totalElements"], 1, "{}", breaks.body);
    assert_eq!(breaks.body["content"][0]["reason"], "CHAIN_FAILED");

    let lock = submit(
        &app,
        json!({ "txType": "LOCK", "assetId": "USD", "accountRef": "a", "counterpartyRef": "b", "amount": "10" }),
    )
    .await;
    let lock_id = lock.body["transactionId"].as_str().expect("id").to_owned();
    // Not visible until the LOCK is processed: 404, retry with the same key.
    let release_body = json!({ "txType": "RELEASE", "params": { "lockId": lock_id } });
    let release = || app.write(reqwest::Method::POST, "/api/transactions", "release-1", &release_body);
    release().await.expect(404);
    settle(&app).await;
    let held = balance(&app, "a").await;
    assert_eq!(
        (held["total"].as_str(), held["available"].as_str(), held["locked"].as_str()),
        (Some("70.00"), Some("60.00"), Some("10.00"))
    );
    let visible = app.get(&format!("/api/locks/{lock_id}")).await;
    visible.expect(200);
    assert_eq!(visible.body["status"], "ACTIVE");
    let release = release().await;
    release.expect(202);
    // A second completion while one is in flight is refused.
    let cancel = app.post("/api/transactions", &json!({ "txType": "CANCEL", "params": { "lockId": lock_id } })).await;
    cancel.expect(400);
    settle(&app).await;
    assert_eq!(operation(&app, &release).await["state"], "CONFIRMED");
    assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "RELEASED");
    assert_eq!(balance(&app, "a").await["total"], "60.00");
    assert_eq!(balance(&app, "b").await["total"], "40.00");
    let events = app.get("/api/webhook-events?type=transaction.confirmed&limit=100").await;
    assert_eq!(events.body["items"].as_array().map(Vec::len), Some(4), "{}", events.body);

    // The service's positions agree with the ledger: reconciliation finds nothing.
    app.app.jobs.schedule_periodic("positions.reconcile").await.expect("schedule");
    app.drain_jobs().await;
    assert_eq!(app.get("/api/transactions/breaks?reason=BALANCE_MISMATCH").await.body["totalElements"], 0);
}

async fn a_submission_is_202_with_the_operation_and_its_location(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let body = json!({
        "txType": "TRANSFER", "assetId": "USD", "accountRef": "a", "counterpartyRef": "b", "amount": "12.5",
        "params": { "reference": "invoice-7", "urgent": true, "priority": 2, "note": null }
    });
    let reply = submit(&app, body).await;
    let id = id_of(&reply);
    assert!(Uuid::parse_str(&id).is_ok(), "transactionId is a UUID: {id}");
    assert_eq!(reply.header("location"), Some(format!("/api/transactions/{id}").as_str()));
    let accepted = &reply.body;
    assert_eq!(accepted["state"], "SUBMITTED", "{accepted}");
    assert_eq!(accepted["txType"], "TRANSFER");
    assert_eq!(accepted["assetId"], "USD");
    assert_eq!(accepted["accountRef"], "a");
    assert_eq!(accepted["counterpartyRef"], "b");
    assert_eq!(accepted["customerRef"], "c-1");
    assert_eq!(accepted["amount"], "12.50", "in the currency's minor unit");
    assert_eq!(accepted["params"]["reference"], "invoice-7", "{accepted}");
    assert_eq!(accepted["params"]["urgent"], true, "{accepted}");
    for absent in ["failureCode", "txHash", "blockNumber", "reasonCode"] {
        assert!(accepted.get(absent).is_none(), "no {absent} (not even null) on acceptance: {accepted}");
    }
    assert_iso_utc(&accepted["createdAt"]);
    assert_iso_utc(&accepted["updatedAt"]);
    // The Location names the operation as GET returns it.
    let read = app.get(reply.header("location").unwrap_or_default()).await;
    read.expect(200);
    assert_eq!(&read.body, accepted, "GET Location returns the accepted operation");
}

async fn every_cause_of_a_submission_400_names_its_field(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    active_contract(&app, "JPY").await;
    active_contract(&app, "GBP").await;
    active_account(&app, "j", "c-1", "JPY").await;
    active_account(&app, "g", "c-1", "GBP").await;
    app.patch("/api/contracts/GBP", &json!({ "status": "INACTIVE" })).await.expect(200);
    active_account(&app, "gone", "c-1", "USD").await;
    app.patch("/api/accounts/gone", &json!({ "status": "INACTIVE" })).await.expect(200);
    funded(&app, "a", "100").await;

    // Locks in every state a completion can meet.
    let released = id_of(&submit(&app, lock("a", Some("b"), "1", None)).await);
    let cancelled = id_of(&submit(&app, lock("a", None, "1", None)).await);
    let busy = id_of(&submit(&app, lock("a", None, "1", None)).await);
    let free = id_of(&submit(&app, lock("a", None, "1", None)).await);
    let failed_lock = id_of(&submit(&app, lock("a", None, "1000", None)).await);
    settle(&app).await;
    assert_eq!(get_operation(&app, &failed_lock).await["failureCode"], "CHAIN_FAILED");
    submit(&app, complete("RELEASE", &released)).await;
    submit(&app, complete("CANCEL", &cancelled)).await;
    settle(&app).await;
    assert_eq!(app.get(&format!("/api/locks/{released}")).await.body["status"], "RELEASED");
    assert_eq!(app.get(&format!("/api/locks/{cancelled}")).await.body["status"], "CANCELLED");
    // A completion in flight (never drained in this test from here on).
    submit(&app, complete("RELEASE", &busy)).await;
    // Registered last and never provisioned or deployed: a PENDING account and contract.
    app.post("/api/accounts", &json!({ "accountRef": "pend", "customerRef": "c-1", "assetId": "USD" }))
        .await
        .expect(201);
    app.post("/api/contracts", &json!({ "assetId": "CHF" })).await.expect(201);
    assert_eq!(app.get("/api/accounts/pend").await.body["status"], "PENDING");
    assert_eq!(app.get("/api/contracts/CHF").await.body["status"], "PENDING");

    let usd = |extra: Value| {
        let mut body = json!({ "assetId": "USD", "accountRef": "a", "amount": "1" });
        if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                body.insert(k.clone(), v.clone());
            }
        }
        body
    };
    let cases: Vec<(&str, Value, &str)> = vec![
        // txType
        ("txType missing", usd(json!({})), "txType"),
        ("txType unknown", usd(json!({ "txType": "SWAP" })), "txType"),
        ("txType in lower case", usd(json!({ "txType": "mint" })), "txType"),
        ("txType not a string", usd(json!({ "txType": 1 })), "txType"),
        // counterpartyRef (rule 1)
        ("counterpartyRef on a MINT", usd(json!({ "txType": "MINT", "counterpartyRef": "b" })), "counterpartyRef"),
        ("counterpartyRef on a BURN", usd(json!({ "txType": "BURN", "counterpartyRef": "b" })), "counterpartyRef"),
        (
            "counterpartyRef on a RELEASE",
            json!({ "txType": "RELEASE", "counterpartyRef": "b", "params": { "lockId": free } }),
            "counterpartyRef",
        ),
        (
            "counterpartyRef on a CANCEL",
            json!({ "txType": "CANCEL", "counterpartyRef": "b", "params": { "lockId": free } }),
            "counterpartyRef",
        ),
        ("counterpartyRef missing on a TRANSFER", usd(json!({ "txType": "TRANSFER" })), "counterpartyRef"),
        ("counterpartyRef equal to accountRef", transfer("a", "a", "1"), "counterpartyRef"),
        // assetId (rule 2)
        ("assetId missing", json!({ "txType": "MINT", "accountRef": "a", "amount": "1" }), "assetId"),
        ("assetId not ISO 4217", usd(json!({ "txType": "MINT", "assetId": "ZZZ" })), "assetId"),
        ("assetId of two letters", usd(json!({ "txType": "MINT", "assetId": "US" })), "assetId"),
        ("assetId with a space before", usd(json!({ "txType": "MINT", "assetId": " USD" })), "assetId"),
        ("assetId with a newline after", usd(json!({ "txType": "MINT", "assetId": "USD\n" })), "assetId"),
        ("assetId a name", usd(json!({ "txType": "MINT", "assetId": "DOLLAR" })), "assetId"),
        ("assetId without a minor unit", usd(json!({ "txType": "MINT", "assetId": "XAU" })), "assetId"),
        ("assetId without any contract", usd(json!({ "txType": "MINT", "assetId": "EUR" })), "assetId"),
        (
            "assetId with an INACTIVE contract",
            json!({ "txType": "MINT", "assetId": "GBP", "accountRef": "g", "amount": "1" }),
            "assetId",
        ),
        ("assetId with a PENDING contract", usd(json!({ "txType": "MINT", "assetId": "CHF" })), "assetId"),
        // amount (rule 2)
        ("amount missing", json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a" }), "amount"),
        ("amount zero", mint("a", "0"), "amount"),
        ("amount zero with decimals", mint("a", "0.00"), "amount"),
        ("amount negative", mint("a", "-1"), "amount"),
        ("amount malformed", mint("a", "abc"), "amount"),
        ("amount with an exponent", mint("a", "1e3"), "amount"),
        ("amount with a separator", mint("a", "1,000"), "amount"),
        ("amount empty", mint("a", ""), "amount"),
        ("amount ending in a point", mint("a", "1."), "amount"),
        ("amount a JSON number", usd(json!({ "txType": "MINT", "amount": 10 })), "amount"),
        ("amount finer than cents", mint("a", "1.001"), "amount"),
        (
            "amount finer than yen",
            json!({ "txType": "MINT", "assetId": "JPY", "accountRef": "j", "amount": "1.5" }),
            "amount",
        ),
        // accountRef (rule 2)
        ("accountRef missing", json!({ "txType": "MINT", "assetId": "USD", "amount": "1" }), "accountRef"),
        ("accountRef names no account", mint("nobody", "1"), "accountRef"),
        ("accountRef holds another asset", mint("j", "1"), "accountRef"),
        ("accountRef INACTIVE", mint("gone", "1"), "accountRef"),
        ("accountRef PENDING", mint("pend", "1"), "accountRef"),
        ("accountRef INACTIVE on a TRANSFER", transfer("gone", "b", "1"), "accountRef"),
        // counterpartyRef accounts (rule 2)
        ("counterpartyRef names no account", transfer("a", "nobody", "1"), "counterpartyRef"),
        ("counterpartyRef holds another asset", transfer("a", "j", "1"), "counterpartyRef"),
        ("counterpartyRef INACTIVE", transfer("a", "gone", "1"), "counterpartyRef"),
        ("counterpartyRef PENDING", transfer("a", "pend", "1"), "counterpartyRef"),
        ("counterpartyRef PENDING on a LOCK", lock("a", Some("pend"), "1", None), "counterpartyRef"),
        // params (rule 3)
        ("params value an object", usd(json!({ "txType": "MINT", "params": { "note": { "a": 1 } } })), "params"),
        ("params value an array", usd(json!({ "txType": "MINT", "params": { "note": [1, 2] } })), "params"),
        ("params a string", usd(json!({ "txType": "MINT", "params": "note" })), "params"),
        ("params an array", usd(json!({ "txType": "MINT", "params": [] })), "params"),
        ("params a number", usd(json!({ "txType": "MINT", "params": 3 })), "params"),
        (
            "params.lockId on a LOCK",
            usd(json!({ "txType": "LOCK", "params": { "lockId": free.clone() } })),
            "params.lockId",
        ),
        // RELEASE and CANCEL (rule 4)
        ("RELEASE without params", json!({ "txType": "RELEASE" }), "params.lockId"),
        ("CANCEL without lockId", json!({ "txType": "CANCEL", "params": {} }), "params.lockId"),
        ("RELEASE with a non-UUID lockId", complete("RELEASE", "not-a-uuid"), "params.lockId"),
        // One lock, one spelling: the undashed and braced forms of its id are not its id.
        ("RELEASE with an undashed lockId", complete("RELEASE", &free.replace('-', "")), "params.lockId"),
        ("CANCEL with a braced lockId", complete("CANCEL", &format!("{{{free}}}")), "params.lockId"),
        ("CANCEL with a numeric lockId", json!({ "txType": "CANCEL", "params": { "lockId": 42 } }), "params.lockId"),
        (
            "RELEASE with assetId",
            json!({ "txType": "RELEASE", "assetId": "USD", "params": { "lockId": free } }),
            "assetId",
        ),
        (
            "RELEASE with accountRef",
            json!({ "txType": "RELEASE", "accountRef": "a", "params": { "lockId": free } }),
            "accountRef",
        ),
        ("CANCEL with amount", json!({ "txType": "CANCEL", "amount": "1", "params": { "lockId": free } }), "amount"),
        ("RELEASE of a RELEASED lock", complete("RELEASE", &released), "params.lockId"),
        ("CANCEL of a RELEASED lock", complete("CANCEL", &released), "params.lockId"),
        ("RELEASE of a CANCELLED lock", complete("RELEASE", &cancelled), "params.lockId"),
        ("RELEASE of a lock whose LOCK failed", complete("RELEASE", &failed_lock), "params.lockId"),
        ("CANCEL of a lock with a RELEASE in flight", complete("CANCEL", &busy), "params.lockId"),
        ("RELEASE of a lock with a RELEASE in flight", complete("RELEASE", &busy), "params.lockId"),
    ];
    let before = app.db.count("operations", "").await;
    for (case, body, field) in &cases {
        let reply = app.post("/api/transactions", body).await;
        assert_invalid(&reply, field, case);
    }
    assert_eq!(app.db.count("operations", "").await, before, "no refused submission was recorded");

    // None of the refusals touched the free lock: it can still be completed.
    let free_lock = app.get(&format!("/api/locks/{free}")).await;
    assert_eq!(free_lock.body["status"], "ACTIVE", "{}", free_lock.body);
    assert!(free_lock.body.get("completedBy").is_none(), "{}", free_lock.body);
    submit(&app, complete("CANCEL", &free)).await;
}

/// A tolerant reader: fields a submission does not take (the record's customerRef, a memo) are
/// ignored, and the operation is accepted as if they were not there.
async fn a_submission_ignores_fields_it_does_not_take(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let mut body = mint("a", "1");
    body["customerRef"] = json!("c-1");
    body["memo"] = json!("hi");
    let accepted = app.post("/api/transactions", &body).await;
    accepted.expect(202);
    assert_eq!(accepted.body["txType"], "MINT", "{}", accepted.body);
    assert!(accepted.body.get("memo").is_none(), "{}", accepted.body);
}

async fn an_idempotency_key_missing_blank_or_over_255_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let body = mint("a", "1");
    let send = |key: Option<String>| {
        let mut request = app.request(Method::POST, "/api/transactions").json(&body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        async move { Reply::read(request.send().await.expect("POST")).await }
    };
    assert_invalid(&send(None).await, "Idempotency-Key", "key missing");
    assert_invalid(&send(Some("   ".to_owned())).await, "Idempotency-Key", "key blank");
    assert_invalid(&send(Some("k".repeat(256))).await, "Idempotency-Key", "key over 255");
    assert_eq!(app.db.count("operations", "").await, 0);
    send(Some("k".repeat(255))).await.expect(202);
    assert_eq!(app.db.count("operations", "").await, 1);
}

async fn a_release_before_its_lock_is_processed_is_404_and_the_same_key_succeeds_later(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let lock_id = id_of(&submit(&app, lock("a", Some("b"), "10", None)).await);
    app.get(&format!("/api/locks/{lock_id}")).await.expect(404);

    let release_key = key();
    let early = with_key(&app, &release_key, &complete("RELEASE", &lock_id)).await;
    assert_error(&early, 404);
    // A lockId that names no operation at all is 404 too (no lock yet).
    assert_error(&app.post("/api/transactions", &complete("CANCEL", &Uuid::now_v7().to_string())).await, 404);
    // Another organisation's lock is no lock of this one.
    let other = app.new_tenant();
    settle(&app).await;
    assert_error(&app.post_as(&other, "/api/transactions", &complete("RELEASE", &lock_id)).await, 404);
    app.get(&format!("/api/locks/{lock_id}")).await.expect(200);

    // The same key, now that the lock is visible: accepted, not a replay of the 404.
    let release = with_key(&app, &release_key, &complete("RELEASE", &lock_id)).await;
    release.expect(202);
    assert!(release.header("idempotent-replayed").is_none(), "the 404 was not stored under the key");
    assert_eq!(release.body["txType"], "RELEASE");
    assert_eq!(release.body["accountRef"], "a", "{}", release.body);
    // The spec's counterpartyRef is "only for TRANSFER or LOCK": the RELEASE pays the lock's
    // counterparty without showing it, and the counterpartyRef filter still finds it.
    assert!(release.body.get("counterpartyRef").is_none(), "{}", release.body);
    assert_eq!(release.body["amount"], "10.00");
    assert_eq!(release.body["assetId"], "USD");
    settle(&app).await;
    let paid_to_b = app.get("/api/transactions?counterpartyRef=b&txType=RELEASE").await;
    paid_to_b.expect(200);
    assert_eq!(paid_to_b.body["content"][0]["transactionId"], release.body["transactionId"], "{}", paid_to_b.body);
    assert_eq!(operation(&app, &release).await["state"], "CONFIRMED");
    assert_eq!(amounts(&app, "b").await, triple("10.00", "10.00", "0.00"));
    // Replaying the key now answers the RELEASE, CONFIRMED.
    let replay = with_key(&app, &release_key, &complete("RELEASE", &lock_id)).await;
    replay.expect(202);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body["transactionId"], release.body["transactionId"]);
    assert_eq!(replay.body["state"], "CONFIRMED");
}

async fn balances_are_not_checked_at_submission_an_overdraft_fails_chain_failed_with_a_break(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let overdraft = submit(&app, transfer("a", "b", "50")).await;
    assert_eq!(overdraft.body["state"], "SUBMITTED", "accepted although a holds nothing");
    let id = id_of(&overdraft);
    settle(&app).await;

    let failed = get_operation(&app, &id).await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    assert_eq!(failed["failureCode"], "CHAIN_FAILED", "{failed}");
    assert_hash(&failed["txHash"]);
    assert!(failed["blockNumber"].as_u64().is_some_and(|b| b > 0), "included and reverted: {failed}");
    assert_eq!(failed["reasonCode"], "EXECUTION_REVERTED", "the spec's code of a revert: {failed}");
    let reason = failed["revertReason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("InsufficientAvailableBalance"), "the decoded revert: {failed}");
    for account in ["a", "b"] {
        assert_eq!(amounts(&app, account).await, triple("0.00", "0.00", "0.00"), "no value moved");
    }

    let listed = breaks(&app, "").await;
    assert_eq!(listed.body["totalElements"], 1, "{}", listed.body);
    let found = &listed.body["content"][0];
    assert_eq!(found["reason"], "CHAIN_FAILED");
    assert_eq!(found["transactionId"], id.as_str());
    assert_eq!(found["accountRef"], "a");
    assert_eq!(found["assetId"], "USD");
    assert!(Uuid::parse_str(found["id"].as_str().unwrap_or_default()).is_ok(), "{found}");
    let detail = found["detail"].as_str().unwrap_or_default();
    assert!(detail.contains(failed["txHash"].as_str().unwrap_or("?")), "the break names the hash: {detail}");
    assert_iso_utc(&found["detectedAt"]);

    let events = events_about(&app, "transaction.failed", &id).await;
    assert_eq!(events.len(), 1, "one transaction.failed");
    assert_eq!(events[0]["data"]["state"], "FAILED");
    assert_eq!(events[0]["data"]["failureCode"], "CHAIN_FAILED");
    assert!(events_about(&app, "transaction.confirmed", &id).await.is_empty());
}

async fn the_same_key_returns_the_operation_as_it_is_now_failed_ones_included(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let mint_key = key();
    let minted = with_key(&app, &mint_key, &mint("a", "100")).await;
    minted.expect(202);
    // Replayed while in flight: the same operation, still SUBMITTED.
    let early = with_key(&app, &mint_key, &mint("a", "100")).await;
    early.expect(202);
    assert_eq!(early.header("idempotent-replayed"), Some("true"));
    assert_eq!(early.body["transactionId"], minted.body["transactionId"]);
    assert_eq!(early.header("location"), minted.header("location"));

    let overdraft_key = key();
    let overdraft = with_key(&app, &overdraft_key, &transfer("b", "a", "500")).await;
    overdraft.expect(202);
    settle(&app).await;

    // The key's record keeps the operation's id: a replay reads the operation by it, not by the
    // stored Location (dropped here to show it).
    let stored_id = format!("idempotency_key = '{mint_key}' AND resource_id = '{}'", id_of(&minted));
    assert_eq!(app.db.count("idempotency_records", &stored_id).await, 1);
    app.db
        .execute(&format!(
            "UPDATE idempotency_records SET response_headers = '[]' WHERE idempotency_key = '{mint_key}'"
        ))
        .await;
    // A record completed before the store kept resource ids: read from its stored Location.
    app.db
        .execute(&format!(
            "UPDATE idempotency_records SET resource_id = NULL WHERE idempotency_key = '{overdraft_key}'"
        ))
        .await;

    let replay = with_key(&app, &mint_key, &mint("a", "100")).await;
    replay.expect(202);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("location"), minted.header("location"));
    assert_eq!(replay.body["transactionId"], minted.body["transactionId"]);
    assert_eq!(replay.body["state"], "CONFIRMED", "the operation as it is now: {}", replay.body);
    assert_hash(&replay.body["txHash"]);
    assert_eq!(replay.body, operation(&app, &minted).await);

    let failed = with_key(&app, &overdraft_key, &transfer("b", "a", "500")).await;
    failed.expect(202);
    assert_eq!(failed.header("idempotent-replayed"), Some("true"));
    assert_eq!(failed.body["transactionId"], overdraft.body["transactionId"]);
    assert_eq!(failed.body["state"], "FAILED", "{}", failed.body);
    assert_eq!(failed.body["failureCode"], "CHAIN_FAILED", "{}", failed.body);

    assert_eq!(app.db.count("operations", "").await, 2, "replays create nothing");
    assert_eq!(amounts(&app, "a").await, triple("100.00", "100.00", "0.00"), "minted once");
}

async fn a_key_in_flight_is_409_and_a_key_reused_with_another_payload_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let body = mint("a", "5");
    let reply = write_in_flight(&app, "transaction.submit", Method::POST, "/api/transactions", &body).await;
    assert_error(&reply, 409);
    assert_retry_after(&reply);
    assert_eq!(app.db.count("operations", "").await, 0, "nothing accepted while the key is in flight");

    let used = key();
    let first = with_key(&app, &used, &body).await;
    first.expect(202);
    for other in [mint("a", "6"), mint("b", "5"), burn("a", "5")] {
        assert_error(&with_key(&app, &used, &other).await, 422);
    }
    assert_eq!(app.db.count("operations", "").await, 1);
    settle(&app).await;
    assert_eq!(amounts(&app, "a").await.0, "5.00");
    assert_eq!(amounts(&app, "b").await.0, "0.00");
}

async fn submitting_needs_transaction_submit_and_mint_and_burn_need_transaction_mint(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let before = app.db.count("operations", "").await;

    let reader = with_scope(&app, "transaction:read");
    assert_error(&app.post_as(&reader, "/api/transactions", &transfer("a", "b", "1")).await, 403);
    app.get_as(&reader, "/api/transactions").await.expect(200);

    let submitter = with_scope(&app, "transaction:submit transaction:read");
    app.post_as(&submitter, "/api/transactions", &transfer("a", "b", "1")).await.expect(202);
    app.post_as(&submitter, "/api/transactions", &lock("a", None, "1", None)).await.expect(202);
    assert_error(&app.post_as(&submitter, "/api/transactions", &mint("a", "1")).await, 403);
    assert_error(&app.post_as(&submitter, "/api/transactions", &burn("a", "1")).await, 403);

    let mint_only = with_scope(&app, "transaction:mint");
    assert_error(&app.post_as(&mint_only, "/api/transactions", &mint("a", "1")).await, 403);

    let minter = with_scope(&app, "transaction:submit transaction:mint");
    app.post_as(&minter, "/api/transactions", &mint("a", "1")).await.expect(202);
    app.post_as(&minter, "/api/transactions", &burn("a", "1")).await.expect(202);
    assert_eq!(app.db.count("operations", "").await, before + 4, "only the permitted submissions were accepted");

    // Reading needs transaction:read.
    settle(&app).await;
    let id = app.db.strings("SELECT CAST(id AS TEXT) FROM operations WHERE tx_type = 'LOCK'").await;
    let lock_id = id.first().expect("the LOCK");
    for path in [
        "/api/transactions".to_owned(),
        format!("/api/transactions/{lock_id}"),
        "/api/transactions/breaks".to_owned(),
        format!("/api/locks/{lock_id}"),
        "/api/accounts/a/locks".to_owned(),
    ] {
        assert_error(&app.get_as(&minter, &path).await, 403);
        app.get_as(&reader, &path).await.expect(200);
    }
}

// ---------------------------------------------------------------------------------------------
// The pipeline: CONFIRMED, FAILED, states only forward, events
// ---------------------------------------------------------------------------------------------

async fn a_confirmed_operation_has_its_hash_and_block_and_never_a_failure_code(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let minted = submit(&app, mint("a", "100")).await;
    let id = id_of(&minted);
    let submitted = get_operation(&app, &id).await;
    assert_eq!(submitted["state"], "SUBMITTED");
    assert!(submitted.get("failureCode").is_none(), "{submitted}");
    // One round of the pipeline: signed and sent, perhaps not yet included.
    app.drain_jobs().await;
    let moving = get_operation(&app, &id).await;
    assert!(
        ["PENDING_SETTLEMENT", "SETTLING", "CONFIRMED"].contains(&moving["state"].as_str().unwrap_or_default()),
        "{moving}"
    );
    assert!(moving.get("failureCode").is_none(), "no failureCode in flight: {moving}");
    if moving["state"] == "SETTLING" {
        assert_hash(&moving["txHash"]);
    }
    settle(&app).await;
    let confirmed = get_operation(&app, &id).await;
    assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
    assert_hash(&confirmed["txHash"]);
    assert!(confirmed["blockNumber"].as_u64().is_some_and(|b| b > 0), "{confirmed}");
    assert!(confirmed.get("failureCode").is_none(), "no failureCode when confirmed: {confirmed}");
    assert!(confirmed.get("reasonCode").is_none(), "{confirmed}");
    assert_eq!(amounts(&app, "a").await, triple("100.00", "100.00", "0.00"));

    // BURN debits; a BURN beyond the balance reverts.
    let burnt = id_of(&submit(&app, burn("a", "30")).await);
    let too_much = id_of(&submit(&app, burn("a", "1000")).await);
    settle(&app).await;
    assert_eq!(get_operation(&app, &burnt).await["state"], "CONFIRMED");
    let failed = get_operation(&app, &too_much).await;
    assert_eq!((failed["state"].as_str(), failed["failureCode"].as_str()), (Some("FAILED"), Some("CHAIN_FAILED")));
    assert_eq!(amounts(&app, "a").await, triple("70.00", "70.00", "0.00"));

    // Events: one transaction.confirmed per confirmation, carrying the operation.
    let confirmed_events = events_about(&app, "transaction.confirmed", &id).await;
    assert_eq!(confirmed_events.len(), 1);
    assert_eq!(confirmed_events[0]["data"]["state"], "CONFIRMED");
    assert_eq!(confirmed_events[0]["data"]["txHash"], confirmed["txHash"]);
    assert!(confirmed_events[0]["data"].get("failureCode").is_none());
    assert_eq!(events_about(&app, "transaction.confirmed", &burnt).await.len(), 1);
    assert_eq!(events_about(&app, "transaction.failed", &too_much).await.len(), 1);
    assert!(events_about(&app, "transaction.failed", &id).await.is_empty());

    // States only move forward: every pipeline job run again for the terminal operations
    // changes nothing.
    let snapshots = [get_operation(&app, &id).await, get_operation(&app, &too_much).await];
    let (confirmations, failures) =
        (event_count(&app, "transaction.confirmed").await, event_count(&app, "transaction.failed").await);
    let mut tx = app.app.store.write().await.expect("write");
    for target in [&id, &too_much] {
        for kind in [kinds::OPERATION_EVALUATE, kinds::OPERATION_SETTLE, kinds::OPERATION_TRACK] {
            let job = NewJob {
                kind: kind.to_owned(),
                tenant_id: Some(app.tenant.id),
                payload: json!({ "transactionId": target }),
                run_at: app.clock.now(),
                max_attempts: 3,
                dedupe_key: None,
            };
            tx.jobs().enqueue(&job, app.clock.now()).await.expect("enqueue");
        }
    }
    tx.commit().await.expect("commit");
    app.clock.advance_millis(5_000);
    settle(&app).await;
    assert_eq!(get_operation(&app, &id).await, snapshots[0], "a CONFIRMED operation never changes");
    assert_eq!(get_operation(&app, &too_much).await, snapshots[1], "a FAILED operation never changes");
    assert_eq!(event_count(&app, "transaction.confirmed").await, confirmations);
    assert_eq!(event_count(&app, "transaction.failed").await, failures);
    assert_eq!(amounts(&app, "a").await, triple("70.00", "70.00", "0.00"), "nothing executed twice");
}

async fn an_operation_that_cannot_be_processed_fails_unprocessable(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    active_account(&app, "c", "c-1", "USD").await;
    funded(&app, "a", "100").await;
    let past = app.clock.now().minus_millis(1_000).to_iso8601();
    let expired = id_of(&submit(&app, lock("a", Some("b"), "10", Some(json!(past)))).await);
    let not_a_date = id_of(&submit(&app, lock("a", None, "10", Some(json!("next tuesday")))).await);
    let a_number = id_of(&submit(&app, lock("a", None, "10", Some(json!(1_893_456_000)))).await);
    // Accounts and contract are checked again when the operation is evaluated.
    let to_inactive = id_of(&submit(&app, transfer("a", "b", "10")).await);
    let from_inactive = id_of(&submit(&app, transfer("c", "a", "10")).await);
    app.patch("/api/accounts/b", &json!({ "status": "INACTIVE" })).await.expect(200);
    app.patch("/api/accounts/c", &json!({ "status": "INACTIVE" })).await.expect(200);
    settle(&app).await;

    let ids = [&expired, &not_a_date, &a_number, &to_inactive, &from_inactive];
    for id in ids {
        let failed = get_operation(&app, id).await;
        assert_eq!(failed["state"], "FAILED", "{failed}");
        assert_eq!(failed["failureCode"], "UNPROCESSABLE", "{failed}");
        assert!(failed.get("txHash").is_none() && failed.get("blockNumber").is_none(), "never reached the ledger");
        assert_eq!(events_about(&app, "transaction.failed", id).await.len(), 1, "{id}");
    }
    for lock_id in [&expired, &not_a_date, &a_number] {
        app.get(&format!("/api/locks/{lock_id}")).await.expect(404);
    }

    // The contract made INACTIVE after acceptance.
    let no_contract = id_of(&submit(&app, mint("a", "5")).await);
    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
    settle(&app).await;
    let failed = get_operation(&app, &no_contract).await;
    assert_eq!((failed["state"].as_str(), failed["failureCode"].as_str()), (Some("FAILED"), Some("UNPROCESSABLE")));
    app.patch("/api/contracts/USD", &json!({ "status": "ACTIVE" })).await.expect(200);

    assert_eq!(amounts(&app, "a").await, triple("100.00", "100.00", "0.00"), "no value moved");
    assert_eq!(breaks(&app, "").await.body["totalElements"], 0, "UNPROCESSABLE never reached the ledger: no break");
}

/// The pipeline takes its jobs in batches (one commit for many operations). A batch settles the
/// common case together and leaves the unusual operation to a run of its own, with the outcome
/// a run of its own would give.
async fn a_batch_settles_the_common_case_together_and_the_unusual_alone(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let past = app.clock.now().minus_millis(1_000).to_iso8601();
    let mut transfers = Vec::new();
    for _ in 0..5 {
        transfers.push(id_of(&submit(&app, transfer("a", "b", "1")).await));
    }
    let expired = id_of(&submit(&app, lock("a", Some("b"), "10", Some(json!(past)))).await);
    let overdraft = id_of(&submit(&app, transfer("b", "a", "500")).await);
    settle(&app).await;

    for id in &transfers {
        let confirmed = get_operation(&app, id).await;
        assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
        assert_eq!(events_about(&app, "transaction.confirmed", id).await.len(), 1, "one event each");
    }
    let unprocessable = get_operation(&app, &expired).await;
    assert_eq!(
        (unprocessable["state"].as_str(), unprocessable["failureCode"].as_str()),
        (Some("FAILED"), Some("UNPROCESSABLE"))
    );
    let reverted = get_operation(&app, &overdraft).await;
    assert_eq!((reverted["state"].as_str(), reverted["failureCode"].as_str()), (Some("FAILED"), Some("CHAIN_FAILED")));
    assert_eq!(amounts(&app, "a").await, triple("95.00", "95.00", "0.00"));
    assert_eq!(amounts(&app, "b").await, triple("5.00", "5.00", "0.00"));
    assert_eq!(app.db.count("jobs", "status = 'dead'").await, 0);
    // Evaluations go straight on into settlement, in a batch and alone (the mint, a batch of
    // one) alike: none needed a settle job of its own.
    assert_eq!(app.db.count("jobs", "kind = 'operation.settle'").await, 0);
}

/// The stored signed transaction of operation `id`.
async fn signature_of(app: &TestApp, id: &str) -> Vec<String> {
    app.db.strings(&format!("SELECT signed_transaction FROM operations WHERE CAST(id AS TEXT) = '{id}'")).await
}

/// `count` transfers of 3.00 from a to b that an evaluation batch signs and sends, then stops
/// before moving them to SETTLING (that update fails): each is PENDING_SETTLEMENT with its
/// signature recorded. Returns their ids with their signatures.
async fn signed_and_sent_but_not_settling(app: &TestApp, count: usize) -> Vec<(String, Vec<String>)> {
    app.db.fail_updates_of_where("operations", "NEW.state = 'SETTLING'").await;
    let mut ids = Vec::new();
    for _ in 0..count {
        ids.push(id_of(&submit(app, transfer("a", "b", "3")).await));
    }
    app.drain_jobs().await;
    app.db.heal_inserts_into("operations").await;
    let mut signed = Vec::new();
    for id in ids {
        let waiting = get_operation(app, &id).await;
        assert_eq!(waiting["state"], "PENDING_SETTLEMENT", "{waiting}");
        let signature = signature_of(app, &id).await;
        signed.push((id, signature));
    }
    signed
}

/// A batch of evaluations approves and signs in one commit, then sends. When the batch stops
/// after that commit (here: moving to SETTLING fails), each evaluation job, run again, finds its
/// operation signed but unsent and settles it from the recorded signature: the same bytes, once.
async fn an_evaluation_stopped_after_signing_settles_from_the_recorded_signature(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let signed = signed_and_sent_but_not_settling(&app, 3).await;
    settle(&app).await;
    for (id, before) in &signed {
        let confirmed = get_operation(&app, id).await;
        assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
        assert_eq!(&signature_of(&app, id).await, before, "settled from the signature recorded first");
    }
    assert_eq!(amounts(&app, "b").await, triple("9.00", "9.00", "0.00"), "each applied once");
}

/// The jobs about operation `id`: `status` (a SQL condition on the job) and payload.
fn jobs_about(id: &str, condition: &str) -> String {
    format!("{condition} AND CAST(payload ->> 'transactionId' AS TEXT) = '{id}'")
}

/// The safety net under the pipeline: an in-flight operation that no job carries any more is
/// given the job its state calls for by the `operations.resume` sweep, once it has been
/// unchanged for the sweep's period (60 s by default), and settles once. Here the jobs are
/// finished behind the service's back, in each state a job carries: SUBMITTED, PENDING_SETTLEMENT
/// signed and sent by an evaluation batch (the shape a lost race once left under load), and
/// SETTLING. An operation whose job is only waiting is left to that job.
async fn an_operation_no_job_carries_is_resumed_by_the_sweep(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let db = &app.db;
    let strand = |id: String| async move {
        db.execute(&format!("UPDATE jobs SET status = 'done' WHERE {}", jobs_about(&id, "status <> 'done'"))).await;
        id
    };
    let settling = id_of(&submit(&app, transfer("a", "b", "2")).await);
    app.drain_jobs().await;
    assert_eq!(get_operation(&app, &settling).await["state"], "SETTLING");
    let settling = strand(settling).await;

    let signatures = signed_and_sent_but_not_settling(&app, 3).await;
    for (id, _) in &signatures {
        strand(id.clone()).await;
    }
    let signed: Vec<String> = signatures.iter().map(|(id, _)| id.clone()).collect();
    let submitted = strand(id_of(&submit(&app, transfer("a", "b", "4")).await)).await;
    let carried = id_of(&submit(&app, transfer("a", "b", "5")).await);
    app.db
        .execute(&format!("UPDATE jobs SET run_at = run_at + 3600000000 WHERE {}", jobs_about(&carried, "1 = 1")))
        .await;
    let stranded: Vec<&String> = signed.iter().chain([&settling, &submitted]).collect();
    let live = |id: &str| jobs_about(id, "status IN ('queued', 'running')");

    // Unchanged for less than the period: not yet taken for stranded.
    app.clock.advance_millis(30_000);
    run_periodic(&app, kinds::OPERATIONS_RESUME).await;
    for id in &stranded {
        assert_eq!(app.db.count("jobs", &live(id)).await, 0, "{id} resumed too early");
    }

    app.clock.advance_millis(31_000);
    run_periodic(&app, kinds::OPERATIONS_RESUME).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    for id in &stranded {
        loop {
            let now = get_operation(&app, id).await;
            if now["state"] == "CONFIRMED" {
                break;
            }
            if Instant::now() >= deadline {
                let jobs = app.db.strings("SELECT kind || ' ' || status || ' ' || CAST(payload AS TEXT) || ' ' || COALESCE(last_error, '-') FROM jobs").await;
                panic!("{id} not resumed: {now} {jobs:#?}");
            }
            app.clock.advance_millis(250);
            app.drain_jobs().await;
        }
        assert_eq!(events_about(&app, "transaction.confirmed", id).await.len(), 1, "one event each");
    }
    for (id, before) in &signatures {
        assert_eq!(&signature_of(&app, id).await, before, "resumed from the signature recorded first");
    }
    assert_eq!(amounts(&app, "b").await, triple("15.00", "15.00", "0.00"), "each applied once");

    // The carried operation's job was waiting, not lost: no second job was given to it.
    assert_eq!(get_operation(&app, &carried).await["state"], "SUBMITTED");
    assert_eq!(app.db.count("jobs", &jobs_about(&carried, "1 = 1")).await, 1);
    app.db.execute(&format!("UPDATE jobs SET run_at = 0 WHERE {}", jobs_about(&carried, "1 = 1"))).await;
    settle(&app).await;
    assert_eq!(amounts(&app, "b").await, triple("20.00", "20.00", "0.00"));
}

/// An evaluation that runs out of attempts does not leave its operation waiting: FAILED
/// `RETRY_EXHAUSTED`, with a break and `transaction.failed`.
async fn an_evaluation_out_of_attempts_fails_retry_exhausted(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    setup(&app).await;
    app.db.fail_updates_of_where("operations", "NEW.state = 'PENDING_SETTLEMENT'").await;
    let id = id_of(&submit(&app, transfer("a", "b", "1")).await);
    drain_past_three_attempts(&app).await;
    app.db.heal_inserts_into("operations").await;
    let failed = get_operation(&app, &id).await;
    assert_eq!(
        (failed["state"].as_str(), failed["failureCode"].as_str()),
        (Some("FAILED"), Some("RETRY_EXHAUSTED")),
        "{failed}"
    );
    let listed = breaks(&app, "?reason=RETRY_EXHAUSTED").await;
    assert_eq!(listed.body["totalElements"], 1, "{}", listed.body);
    assert_eq!(events_about(&app, "transaction.failed", &id).await.len(), 1);
}

/// Signatures are recorded before they are sent. When recording them fails, nothing is sent and
/// their nonces are given back: once the store recovers, the same operations settle (a nonce
/// lost to an unrecorded signature would leave every later transaction of the wallet waiting
/// behind the gap).
async fn a_signature_that_could_not_be_recorded_gives_its_nonce_back(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    app.db
        .fail_updates_of_where("operations", "NEW.signed_transaction IS NOT NULL AND OLD.signed_transaction IS NULL")
        .await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(id_of(&submit(&app, transfer("a", "b", "2")).await));
    }
    app.drain_jobs().await;
    for id in &ids {
        let waiting = get_operation(&app, id).await;
        assert_eq!(waiting["state"], "PENDING_SETTLEMENT", "{waiting}");
        assert!(waiting.get("txHash").is_none(), "nothing sent: {waiting}");
    }
    app.db.heal_inserts_into("operations").await;
    settle(&app).await;
    for id in &ids {
        let confirmed = get_operation(&app, id).await;
        assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
    }
    assert_eq!(amounts(&app, "b").await, triple("6.00", "6.00", "0.00"));
}

async fn a_custody_refusal_fails_signing_rejected_with_nothing_on_the_ledger(backend: Backend) {
    let signer = TestSigner::start().await;
    let extra = BTreeMap::from([
        ("TOKENOPS_CUSTODY".to_owned(), "remote".to_owned()),
        ("TOKENOPS_CUSTODY_URL".to_owned(), signer.base_url.clone()),
    ]);
    let app = TestApp::spawn_with(backend, extra).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let lock_id = id_of(&submit(&app, lock("a", Some("b"), "10", None)).await);
    settle(&app).await;
    assert_eq!(amounts(&app, "a").await, triple("100.00", "90.00", "10.00"));

    let wallet = app.get("/api/accounts/a").await.body["walletAddress"].as_str().expect("wallet").to_owned();
    signer.refuse_signing_for(&wallet);
    let refused_transfer = id_of(&submit(&app, transfer("a", "b", "10")).await);
    let refused_lock = id_of(&submit(&app, lock("a", None, "5", None)).await);
    let refused_release = id_of(&submit(&app, complete("RELEASE", &lock_id)).await);
    // b's wallet still signs.
    let fine = id_of(&submit(&app, transfer("b", "a", "0.01")).await);
    let report = app.drain_jobs().await;
    assert_eq!(report.retried, 0, "a refusal is final, not retried: {report:?}");
    settle(&app).await;

    for id in [&refused_transfer, &refused_lock, &refused_release] {
        let failed = get_operation(&app, id).await;
        assert_eq!(failed["state"], "FAILED", "{failed}");
        assert_eq!(failed["failureCode"], "SIGNING_REJECTED", "{failed}");
        assert!(failed.get("txHash").is_none() && failed.get("blockNumber").is_none(), "nothing sent: {failed}");
        let events = events_about(&app, "transaction.failed", id).await;
        assert_eq!(events.len(), 1, "{id}");
        assert_eq!(events[0]["data"]["failureCode"], "SIGNING_REJECTED");
    }
    assert_eq!(get_operation(&app, &fine).await["state"], "FAILED", "b holds nothing: a revert, not a refusal");
    app.get(&format!("/api/locks/{refused_lock}")).await.expect(404);
    // The refused RELEASE leaves the lock ACTIVE and free for another completion.
    let still = app.get(&format!("/api/locks/{lock_id}")).await;
    assert_eq!(still.body["status"], "ACTIVE", "{}", still.body);
    assert!(still.body.get("completedBy").is_none(), "{}", still.body);
    submit(&app, complete("CANCEL", &lock_id)).await;
    settle(&app).await;

    // Nothing reached the ledger: balances as before, and no break.
    assert_eq!(amounts(&app, "a").await, triple("100.00", "90.00", "10.00"));
    assert_eq!(amounts(&app, "b").await, triple("0.00", "0.00", "0.00"));
    let reverted = breaks(&app, "?reason=CHAIN_FAILED").await;
    assert_eq!(reverted.body["totalElements"], 1, "only b's revert: {}", reverted.body);
    assert_eq!(reverted.body["content"][0]["transactionId"], fine.as_str());
    assert_eq!(breaks(&app, "?reason=RETRY_EXHAUSTED").await.body["totalElements"], 0);
}

// ---------------------------------------------------------------------------------------------
// Locks
// ---------------------------------------------------------------------------------------------

async fn locks_hold_funds_until_released_to_the_payee_or_owner_or_cancelled(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let for_b = submit(&app, lock("a", Some("b"), "10", None)).await;
    assert_eq!(for_b.body["state"], "SUBMITTED");
    let for_b = id_of(&for_b);
    app.get(&format!("/api/locks/{for_b}")).await.expect(404);
    settle(&app).await;
    // One at a time, so that the locks' order is certain.
    app.clock.advance_millis(1);
    let no_payee = id_of(&submit(&app, lock("a", None, "20", None)).await);
    settle(&app).await;
    app.clock.advance_millis(1);
    let to_cancel = id_of(&submit(&app, lock("a", Some("b"), "5", None)).await);
    settle(&app).await;

    let visible = app.get(&format!("/api/locks/{for_b}")).await;
    visible.expect(200);
    let l = &visible.body;
    assert_eq!(l["lockId"], for_b.as_str(), "a lock's id is its LOCK's transactionId: {l}");
    assert_eq!((l["accountRef"].as_str(), l["counterpartyRef"].as_str()), (Some("a"), Some("b")));
    assert_eq!((l["assetId"].as_str(), l["amount"].as_str()), (Some("USD"), Some("10.00")));
    assert_eq!(l["status"], "ACTIVE");
    assert!(l.get("completedBy").is_none() && l.get("expiresAt").is_none(), "{l}");
    assert!(app.get(&format!("/api/locks/{no_payee}")).await.body.get("counterpartyRef").is_none());
    assert_eq!(amounts(&app, "a").await, triple("100.00", "65.00", "35.00"));
    app.get("/api/locks/not-a-uuid").await.expect(400);
    app.get(&format!("/api/locks/{}", Uuid::now_v7())).await.expect(404);
    let other = app.new_tenant();
    app.get_as(&other, &format!("/api/locks/{for_b}")).await.expect(404);

    // RELEASE pays the counterparty; without one, back to the owner. CANCEL returns to the owner.
    let release_b = submit(&app, complete("RELEASE", &for_b)).await;
    let release_own = submit(&app, complete("RELEASE", &no_payee)).await;
    assert!(release_own.body.get("counterpartyRef").is_none(), "{}", release_own.body);
    let cancel = submit(&app, complete("CANCEL", &to_cancel)).await;
    assert!(cancel.body.get("counterpartyRef").is_none(), "a CANCEL pays nobody: {}", cancel.body);
    assert_eq!(cancel.body["amount"], "5.00");
    let in_flight = app.get(&format!("/api/locks/{for_b}")).await;
    assert_eq!(in_flight.body["status"], "ACTIVE");
    assert_eq!(in_flight.body["completedBy"], release_b.body["transactionId"], "{}", in_flight.body);
    settle(&app).await;
    for reply in [&release_b, &release_own, &cancel] {
        assert_eq!(operation(&app, reply).await["state"], "CONFIRMED");
    }
    assert_eq!(amounts(&app, "a").await, triple("90.00", "90.00", "0.00"));
    assert_eq!(amounts(&app, "b").await, triple("10.00", "10.00", "0.00"));
    let done = app.get(&format!("/api/locks/{for_b}")).await;
    assert_eq!(done.body["status"], "RELEASED");
    assert_eq!(done.body["completedBy"], release_b.body["transactionId"]);
    assert_eq!(app.get(&format!("/api/locks/{no_payee}")).await.body["status"], "RELEASED");
    assert_eq!(app.get(&format!("/api/locks/{to_cancel}")).await.body["status"], "CANCELLED");

    // Each completes once.
    for (tx_type, lock_id) in [("RELEASE", &for_b), ("CANCEL", &for_b), ("RELEASE", &to_cancel), ("CANCEL", &no_payee)]
    {
        assert_invalid(
            &app.post("/api/transactions", &complete(tx_type, lock_id)).await,
            "params.lockId",
            "second completion",
        );
    }

    // An account's locks, newest first; the status filter.
    let all = app.get("/api/accounts/a/locks").await;
    assert_eq!(listed(&all, "lockId"), vec![to_cancel.clone(), no_payee.clone(), for_b.clone()]);
    assert_eq!(all.body["totalElements"], 3);
    assert_eq!(all.body["page"], 0);
    assert_eq!(all.body["size"], 20);
    assert_eq!(all.body["totalPages"], 1);
    let released = app.get("/api/accounts/a/locks?status=RELEASED").await;
    assert_eq!(listed(&released, "lockId"), vec![no_payee.clone(), for_b.clone()]);
    assert_eq!(listed(&app.get("/api/accounts/a/locks?status=CANCELLED").await, "lockId"), vec![to_cancel.clone()]);
    assert!(listed(&app.get("/api/accounts/a/locks?status=ACTIVE").await, "lockId").is_empty());
    let paged = app.get("/api/accounts/a/locks?size=2&page=1").await;
    assert_eq!(listed(&paged, "lockId"), vec![for_b.clone()]);
    assert_eq!(paged.body["totalPages"], 2);
    assert!(listed(&app.get("/api/accounts/b/locks").await, "lockId").is_empty(), "b owns no lock");
    assert_invalid(&app.get("/api/accounts/a/locks?status=BOGUS").await, "status", "unknown lock status");
    assert_invalid(&app.get("/api/accounts/a/locks?size=0").await, "size", "lock list size 0");
    assert_invalid(&app.get("/api/accounts/a/locks?page=-1").await, "page", "lock list page -1");
    assert_error(&app.get("/api/accounts/nobody/locks").await, 404);
    assert_error(&app.get_as(&other, "/api/accounts/a/locks").await, 404);

    let confirmations = event_count(&app, "transaction.confirmed").await;
    assert_eq!(confirmations, 7, "mint, three LOCKs, two RELEASEs, one CANCEL");

    // Only the expiry sweep expires a lock: a client's CANCEL cancels it, whatever its params say.
    let unexpiring = id_of(&submit(&app, lock("a", None, "1", None)).await);
    settle(&app).await;
    submit(&app, json!({ "txType": "CANCEL", "params": { "lockId": unexpiring, "expired": true } })).await;
    settle(&app).await;
    let cancelled = app.get(&format!("/api/locks/{unexpiring}")).await;
    assert_eq!(cancelled.body["status"], "CANCELLED", "{}", cancelled.body);
}

async fn concurrent_completions_of_one_lock_accept_exactly_one(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let lock_id = a_settled_lock(&app).await;
    let bodies: Vec<Value> =
        (0..10).map(|i| complete(if i % 2 == 0 { "RELEASE" } else { "CANCEL" }, &lock_id)).collect();
    let replies = futures::future::join_all(bodies.iter().map(|b| app.post("/api/transactions", b))).await;
    let accepted: Vec<&Reply> = replies.iter().filter(|r| r.status == 202).collect();
    assert_eq!(accepted.len(), 1, "{:?}", replies.iter().map(|r| r.status).collect::<Vec<_>>());
    for refused in replies.iter().filter(|r| r.status != 202) {
        assert_invalid(refused, "params.lockId", "a concurrent second completion");
    }
    settle(&app).await;
    let done = app.get(&format!("/api/locks/{lock_id}")).await;
    assert_eq!(done.body["completedBy"], accepted[0].body["transactionId"], "{}", done.body);
    let (a, b) = (amounts(&app, "a").await, amounts(&app, "b").await);
    if accepted[0].body["txType"] == "RELEASE" {
        assert_eq!((a, b), (triple("90.00", "90.00", "0.00"), triple("10.00", "10.00", "0.00")));
    } else {
        assert_eq!((a, b), (triple("100.00", "100.00", "0.00"), triple("0.00", "0.00", "0.00")));
    }
}

async fn a_lock_holds_until_its_expiry_to_the_millisecond(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    // The ledger keeps an expiry in whole seconds. A LOCK expiring within the second its block
    // is made in (0.9 s ahead) still holds, and a RELEASE sent before expiresAt pays out.
    let second = (app.clock.now().as_micros() / 1_000_000 + 120) * 1_000_000;
    app.clock.set(Timestamp::from_micros(second));
    let expires_at = Timestamp::from_micros(second + 900_000);
    let lock_id = id_of(&submit(&app, lock("a", Some("b"), "10", Some(json!(expires_at.to_iso8601())))).await);
    let held = settled_before(&app, &lock_id, Timestamp::from_micros(second + 500_000)).await;
    assert_eq!(held["state"], "CONFIRMED", "{held}");
    assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "ACTIVE");
    let release = id_of(&submit(&app, complete("RELEASE", &lock_id)).await);
    let paid = settled_before(&app, &release, Timestamp::from_micros(second + 1_000_000)).await;
    assert_eq!(paid["state"], "CONFIRMED", "{paid}");
    assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "RELEASED");
    assert_eq!(amounts(&app, "b").await, triple("10.00", "10.00", "0.00"));

    // From expiresAt on, to the millisecond, a RELEASE is refused and a CANCEL returns the
    // hold to its owner.
    let next = second + 10_000_000;
    app.clock.set(Timestamp::from_micros(next));
    let expires_at = Timestamp::from_micros(next + 900_000);
    let lock_id = id_of(&submit(&app, lock("a", Some("b"), "10", Some(json!(expires_at.to_iso8601())))).await);
    settled_before(&app, &lock_id, Timestamp::from_micros(next + 500_000)).await;
    assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "ACTIVE");
    app.clock.set(expires_at);
    let refused = app.post("/api/transactions", &complete("RELEASE", &lock_id)).await;
    assert_invalid(&refused, "params.lockId", "a RELEASE at the expiry");
    assert!(refused.body["message"].as_str().is_some_and(|m| m.contains("expired at")), "{}", refused.body);
    let cancel = id_of(&submit(&app, complete("CANCEL", &lock_id)).await);
    settle(&app).await;
    assert_eq!(get_operation(&app, &cancel).await["state"], "CONFIRMED");
    assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "CANCELLED");
    assert_eq!(amounts(&app, "a").await, triple("90.00", "90.00", "0.00"));
}

/// Settles the operation moving the clock 10 ms a step, never to `until` (`settle` moves it
/// 250 ms a step, faster than blocks come), so that its block's timestamp is before `until`.
async fn settled_before(app: &TestApp, id: &str, until: Timestamp) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        app.drain_jobs().await;
        let operation = get_operation(app, id).await;
        if ["CONFIRMED", "FAILED"].contains(&operation["state"].as_str().unwrap_or_default()) {
            return operation;
        }
        assert!(Instant::now() < deadline, "not settled: {operation}");
        if app.clock.now().plus_millis(10) < until {
            app.clock.advance_millis(10);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The LOCK committed the funds while both accounts were ACTIVE: its completion goes ahead when
/// either has been set INACTIVE since (the payee is paid, the owner refunded).
async fn a_lock_is_completed_whatever_its_accounts_became(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let paid_out = id_of(&submit(&app, lock("a", Some("b"), "10", None)).await);
    let refunded = id_of(&submit(&app, lock("a", Some("b"), "20", None)).await);
    settle(&app).await;
    app.patch("/api/accounts/b", &json!({ "status": "INACTIVE" })).await.expect(200);
    let release = id_of(&submit(&app, complete("RELEASE", &paid_out)).await);
    app.patch("/api/accounts/a", &json!({ "status": "INACTIVE" })).await.expect(200);
    let cancel = id_of(&submit(&app, complete("CANCEL", &refunded)).await);
    settle(&app).await;
    for id in [&release, &cancel] {
        let done = get_operation(&app, id).await;
        assert_eq!(done["state"], "CONFIRMED", "{done}");
    }
    assert_eq!(amounts(&app, "a").await, triple("90.00", "90.00", "0.00"));
    assert_eq!(amounts(&app, "b").await, triple("10.00", "10.00", "0.00"));
}

/// A RELEASE or CANCEL names no asset, but its lock's asset needs an ACTIVE contract like any
/// other submission: 400 at once, the lock left free.
async fn completing_a_lock_of_a_switched_off_contract_is_refused(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let lock_id = a_settled_lock(&app).await;
    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
    for tx_type in ["RELEASE", "CANCEL"] {
        let refused = app.post("/api/transactions", &complete(tx_type, &lock_id)).await;
        assert_invalid(&refused, "params.lockId", "a completion of a lock whose contract is INACTIVE");
        assert!(refused.body["message"].as_str().is_some_and(|m| m.contains("no ACTIVE contract")), "{}", refused.body);
    }
    app.patch("/api/contracts/USD", &json!({ "status": "ACTIVE" })).await.expect(200);
    let lock = app.get(&format!("/api/locks/{lock_id}")).await;
    assert!(lock.body.get("completedBy").is_none(), "{}", lock.body);
    let release = id_of(&submit(&app, complete("RELEASE", &lock_id)).await);
    settle(&app).await;
    assert_eq!(get_operation(&app, &release).await["state"], "CONFIRMED");
    assert_eq!(amounts(&app, "b").await, triple("10.00", "10.00", "0.00"));
}

async fn an_expired_lock_returns_to_its_owner(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    // Far enough ahead that settling (which moves the clock) never reaches it.
    let expires_at = app.clock.now().plus_millis(120_000);
    let expiring = id_of(&submit(&app, lock("a", Some("b"), "30", Some(json!(expires_at.to_iso8601())))).await);
    let late_release = id_of(&submit(&app, lock("a", Some("b"), "10", Some(json!(expires_at.to_iso8601())))).await);
    let lasting = id_of(&submit(&app, lock("a", None, "5", None)).await);
    settle(&app).await;
    let held = app.get(&format!("/api/locks/{expiring}")).await;
    assert_eq!(held.body["status"], "ACTIVE", "{}", held.body);
    assert_eq!(held.body["expiresAt"], expires_at.to_iso8601().as_str(), "{}", held.body);
    assert_eq!(amounts(&app, "a").await, triple("100.00", "55.00", "45.00"));

    // Not yet expired: the sweep leaves it alone.
    run_periodic(&app, "locks.expire").await;
    assert_eq!(app.db.count("operations", "tx_type = 'CANCEL'").await, 0);
    assert_eq!(app.get(&format!("/api/locks/{expiring}")).await.body["status"], "ACTIVE");

    // A RELEASE sent before the expiry but settled after it reverts on the ledger (the hold
    // expired): the lock stays ACTIVE and free.
    let release = id_of(&submit(&app, complete("RELEASE", &late_release)).await);
    app.clock.advance_millis(121_000);
    settle(&app).await;
    let reverted = get_operation(&app, &release).await;
    assert_eq!((reverted["state"].as_str(), reverted["failureCode"].as_str()), (Some("FAILED"), Some("CHAIN_FAILED")));
    assert_eq!(reverted["reasonCode"], "EXECUTION_REVERTED", "{reverted}");
    assert!(reverted["revertReason"].as_str().is_some_and(|r| r.starts_with("HoldExpired")), "{reverted}");
    let after_revert = app.get(&format!("/api/locks/{late_release}")).await;
    assert_eq!(after_revert.body["status"], "ACTIVE", "{}", after_revert.body);
    assert!(after_revert.body.get("completedBy").is_none(), "{}", after_revert.body);
    // One sent after the expiry is refused at once: nothing would pay it out.
    let too_late = app.post("/api/transactions", &complete("RELEASE", &late_release)).await;
    assert_invalid(&too_late, "params.lockId", "a RELEASE past the expiry");
    assert!(too_late.body["message"].as_str().is_some_and(|m| m.contains("expired at")), "{}", too_late.body);

    run_periodic(&app, "locks.expire").await;
    settle(&app).await;
    for lock_id in [&expiring, &late_release] {
        let lock = app.get(&format!("/api/locks/{lock_id}")).await;
        assert_eq!(lock.body["status"], "EXPIRED", "{}", lock.body);
    }
    assert_eq!(app.get(&format!("/api/locks/{lasting}")).await.body["status"], "ACTIVE", "no expiry, no sweep");
    assert_eq!(amounts(&app, "a").await, triple("100.00", "95.00", "5.00"), "expired funds are the owner's again");
    assert_eq!(amounts(&app, "b").await, triple("0.00", "0.00", "0.00"));
    let cancels = app.get("/api/transactions?txType=CANCEL").await;
    assert_eq!(cancels.body["totalElements"], 2, "{}", cancels.body);
    for cancel in cancels.body["content"].as_array().cloned().unwrap_or_default() {
        assert_eq!(cancel["state"], "CONFIRMED", "{cancel}");
        assert_eq!(cancel["accountRef"], "a");
    }
    // An expired lock cannot be completed again, and the sweep does not come back to it.
    assert_invalid(&app.post("/api/transactions", &complete("RELEASE", &expiring)).await, "params.lockId", "expired");
    run_periodic(&app, "locks.expire").await;
    settle(&app).await;
    assert_eq!(app.db.count("operations", "tx_type = 'CANCEL'").await, 2);
    let statuses = app.get("/api/accounts/a/locks?status=EXPIRED").await;
    assert_eq!(statuses.body["totalElements"], 2, "{}", statuses.body);

    run_periodic(&app, "positions.reconcile").await;
    assert_eq!(breaks(&app, "?reason=BALANCE_MISMATCH").await.body["totalElements"], 0);
}

// ---------------------------------------------------------------------------------------------
// Reads: GET /api/transactions (styles A and D), GET by id
// ---------------------------------------------------------------------------------------------

async fn transactions_are_listed_newest_first_with_filters_in_style_a(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    active_account(&app, "c", "c-1", "USD").await;
    let bodies = [
        mint("a", "100"),
        transfer("a", "b", "10"),
        transfer("b", "c", "5"),
        lock("a", None, "5", None),
        transfer("c", "a", "1000"),
        mint("c", "1"),
    ];
    let mut ids = Vec::new();
    for body in bodies {
        ids.push(id_of(&submit(&app, body).await));
        app.clock.advance_millis(1_000);
        // One at a time, so that the overdraft really is one.
        settle(&app).await;
    }
    let [mint_a, a_to_b, b_to_c, lock_a, c_to_a, mint_c] = <[String; 6]>::try_from(ids.clone()).expect("six");
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();

    let all = app.get("/api/transactions").await;
    assert_eq!(listed(&all, "transactionId"), newest_first);
    assert_eq!(
        (all.body["page"].as_u64(), all.body["size"].as_u64(), all.body["totalElements"].as_u64()),
        (Some(0), Some(20), Some(6))
    );
    assert_eq!(all.body["totalPages"], 1);
    let page = app.get("/api/transactions?page=1&size=4").await;
    assert_eq!(listed(&page, "transactionId"), newest_first[4..].to_vec());
    assert_eq!((page.body["totalElements"].as_u64(), page.body["totalPages"].as_u64()), (Some(6), Some(2)));
    assert!(listed(&app.get("/api/transactions?page=5").await, "transactionId").is_empty(), "past the end");

    let cases: [(&str, Vec<&String>); 12] = [
        ("state=FAILED", vec![&c_to_a]),
        ("state=CONFIRMED", vec![&mint_c, &lock_a, &b_to_c, &a_to_b, &mint_a]),
        ("state=SUBMITTED", vec![]),
        ("txType=TRANSFER", vec![&c_to_a, &b_to_c, &a_to_b]),
        ("txType=MINT&state=CONFIRMED", vec![&mint_c, &mint_a]),
        // accountRef is the originating account, as on the record; counterpartyRef the other side.
        ("accountRef=a", vec![&lock_a, &a_to_b, &mint_a]),
        ("accountRef=b", vec![&b_to_c]),
        ("accountRef=c&txType=TRANSFER", vec![&c_to_a]),
        ("counterpartyRef=a", vec![&c_to_a]),
        ("counterpartyRef=b", vec![&a_to_b]),
        ("counterpartyRef=c&state=CONFIRMED", vec![&b_to_c]),
        ("accountRef=a&counterpartyRef=b", vec![&a_to_b]),
    ];
    for (query, expected) in cases {
        let reply = app.get(&format!("/api/transactions?{query}")).await;
        let expected: Vec<String> = expected.into_iter().cloned().collect();
        assert_eq!(listed(&reply, "transactionId"), expected, "{query}");
        assert_eq!(reply.body["totalElements"].as_u64(), Some(expected.len() as u64), "{query}");
    }
    assert!(listed(&app.get("/api/transactions?accountRef=nobody").await, "transactionId").is_empty());

    for (query, field) in [
        ("state=PENDING", "state"),
        ("state=confirmed", "state"),
        ("txType=SWAP", "txType"),
        ("txType=transfer", "txType"),
        ("size=0", "size"),
        ("size=101", "size"),
        ("page=-1", "page"),
        ("page=x", "page"),
    ] {
        assert_invalid(&app.get(&format!("/api/transactions?{query}")).await, field, query);
    }
    app.get("/api/transactions?size=100").await.expect(200);
    app.get("/api/transactions?size=1").await.expect(200);
}

async fn transactions_are_walked_by_cursor_in_style_d_without_gaps(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    // Seven operations, several accepted at the same instant (ties are broken, not lost).
    let mut accepted = Vec::new();
    for i in 0..7 {
        let account = if i % 2 == 0 { "a" } else { "b" };
        accepted.push(id_of(&submit(&app, mint(account, "1")).await));
        if i % 3 == 2 {
            app.clock.advance_millis(1_000);
        }
    }
    settle(&app).await;
    let style_a = listed(&app.get("/api/transactions?size=100").await, "transactionId");
    let mut sorted = style_a.clone();
    sorted.sort();
    let mut expected = accepted.clone();
    expected.sort();
    assert_eq!(sorted, expected, "style A lists each once");

    for limit in [1usize, 2, 3, 7, 100] {
        let mut walked = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..20 {
            let path = match &cursor {
                None => format!("/api/transactions?limit={limit}"),
                Some(c) => format!("/api/transactions?limit={limit}&cursor={c}"),
            };
            let page = app.get(&path).await;
            let got = items(&page);
            assert!(got.len() <= limit, "{}", page.body);
            assert_eq!(page.body["limit"].as_u64(), Some(limit as u64));
            assert!(page.body.as_object().is_some_and(|o| o.contains_key("nextCursor")), "{}", page.body);
            walked.extend(got);
            match page.body["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => break,
            }
        }
        assert_eq!(walked, style_a, "limit {limit}: the same operations in the same order, no gap, no repeat");
    }
    // A cursor alone is style D with the default limit (20): the rest at once, nextCursor null.
    let first = app.get("/api/transactions?limit=3").await;
    let cursor = first.body["nextCursor"].as_str().expect("a next cursor").to_owned();
    let rest = app.get(&format!("/api/transactions?cursor={cursor}")).await;
    assert_eq!(items(&rest), style_a[3..].to_vec());
    assert_eq!(rest.body["limit"], 20);
    assert!(rest.body["nextCursor"].is_null(), "{}", rest.body);
    // An edited cursor (one character in the middle changed) is refused.
    let mut edited: Vec<char> = cursor.chars().collect();
    let middle = edited.len() / 2;
    edited[middle] = if edited[middle] == 'A' { 'B' } else { 'A' };
    let edited: String = edited.into_iter().collect();

    // Filters walk too, and a cursor belongs to its filters.
    let only_a = app.get("/api/transactions?accountRef=a&limit=2").await;
    assert_eq!(items(&only_a).len(), 2);
    let a_cursor = only_a.body["nextCursor"].as_str().expect("more of a").to_owned();
    let rest = app.get(&format!("/api/transactions?accountRef=a&limit=2&cursor={a_cursor}")).await;
    assert_eq!(items(&rest).len(), 2);
    assert!(rest.body["nextCursor"].is_null(), "four of a in all: {}", rest.body);
    for query in [
        format!("accountRef=b&limit=2&cursor={a_cursor}"),
        format!("accountRef=a&counterpartyRef=b&limit=2&cursor={a_cursor}"),
        format!("limit=2&cursor={a_cursor}"),
        format!("accountRef=a&state=CONFIRMED&limit=2&cursor={a_cursor}"),
        format!("accountRef=a&txType=MINT&limit=2&cursor={a_cursor}"),
        format!("accountRef=a&limit=2&cursor={cursor}"),
        "limit=2&cursor=not-a-cursor".to_owned(),
        format!("limit=3&cursor={edited}"),
    ] {
        assert_error(&app.get(&format!("/api/transactions?{query}")).await, 400);
    }
    // Another organisation cannot use this one's cursor.
    let other = app.new_tenant();
    assert_error(&app.get_as(&other, &format!("/api/transactions?limit=3&cursor={cursor}")).await, 400);

    // Mixing the styles is 400; limit outside 1 to 100 is 400.
    for query in [
        "page=0&limit=5".to_owned(),
        "size=5&limit=5".to_owned(),
        format!("page=1&cursor={cursor}"),
        format!("size=3&cursor={cursor}"),
    ] {
        assert_error(&app.get(&format!("/api/transactions?{query}")).await, 400);
    }
    assert_invalid(&app.get("/api/transactions?limit=0").await, "limit", "limit 0");
    assert_invalid(&app.get("/api/transactions?limit=101").await, "limit", "limit 101");
    assert_invalid(&app.get("/api/transactions?limit=5&state=BOGUS").await, "state", "unknown state in style D");
    let empty = app.get("/api/transactions?state=FAILED&limit=5").await;
    assert!(items(&empty).is_empty());
    assert!(empty.body["nextCursor"].is_null());
}

async fn get_by_id_is_400_for_a_non_uuid_and_404_for_an_unknown_or_foreign_operation(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let id = id_of(&submit(&app, mint("a", "1")).await);
    get_operation(&app, &id).await;
    assert_error(&app.get("/api/transactions/not-a-uuid").await, 400);
    assert_error(&app.get("/api/transactions/12345").await, 400);
    assert_error(&app.get(&format!("/api/transactions/{}", Uuid::now_v7())).await, 404);
    let other = app.new_tenant();
    assert_error(&app.get_as(&other, &format!("/api/transactions/{id}")).await, 404);
    let theirs = app.get_as(&other, "/api/transactions").await;
    assert_eq!(theirs.body["totalElements"], 0, "{}", theirs.body);
    let theirs = app.get_as(&other, "/api/transactions?limit=10").await;
    assert!(items(&theirs).is_empty());
    assert_eq!(app.get_as(&other, "/api/transactions/breaks").await.body["totalElements"], 0);
}

// ---------------------------------------------------------------------------------------------
// Breaks and reconciliation
// ---------------------------------------------------------------------------------------------

async fn breaks_are_listed_newest_first_with_reason_account_and_a_half_open_window(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    align_clock(&app);
    setup(&app).await;
    let mut failed = Vec::new();
    for (from, to) in [("a", "b"), ("b", "a"), ("a", "b")] {
        failed.push(id_of(&submit(&app, transfer(from, to, "5")).await));
        settle(&app).await;
        app.clock.advance_millis(10_000);
    }
    let all = breaks(&app, "").await;
    assert_eq!(listed(&all, "transactionId"), vec![failed[2].clone(), failed[1].clone(), failed[0].clone()]);
    assert_eq!((all.body["totalElements"].as_u64(), all.body["totalPages"].as_u64()), (Some(3), Some(1)));
    let at: Vec<String> = listed(&all, "detectedAt");
    let [third, second, first] = <[String; 3]>::try_from(at).expect("three");

    let cases: Vec<(String, Vec<&String>)> = vec![
        ("reason=CHAIN_FAILED".to_owned(), vec![&failed[2], &failed[1], &failed[0]]),
        ("reason=BALANCE_MISMATCH".to_owned(), vec![]),
        ("reason=NOT_A_REASON".to_owned(), vec![]),
        ("accountRef=a".to_owned(), vec![&failed[2], &failed[0]]),
        ("accountRef=b&reason=CHAIN_FAILED".to_owned(), vec![&failed[1]]),
        ("accountRef=nobody".to_owned(), vec![]),
        (format!("from={second}"), vec![&failed[2], &failed[1]]),
        (format!("to={second}"), vec![&failed[0]]),
        (format!("from={first}&to={third}"), vec![&failed[1], &failed[0]]),
        (format!("from={second}&to={third}&accountRef=b"), vec![&failed[1]]),
        ("size=1&page=1".to_owned(), vec![&failed[1]]),
    ];
    for (query, expected) in cases {
        let reply = breaks(&app, &format!("?{query}")).await;
        let expected: Vec<String> = expected.into_iter().cloned().collect();
        assert_eq!(listed(&reply, "transactionId"), expected, "{query}");
    }
    let unknown = breaks(&app, "?reason=NOT_A_REASON").await;
    assert_eq!((unknown.body["totalElements"].as_u64(), unknown.body["page"].as_u64()), (Some(0), Some(0)));

    for (query, field) in [
        (format!("from={second}&to={second}"), "from"),
        (format!("from={third}&to={first}"), "from"),
        ("from=yesterday".to_owned(), "from"),
        ("to=2026-13-01T00:00:00Z".to_owned(), "to"),
        ("page=-1".to_owned(), "page"),
        ("size=0".to_owned(), "size"),
        ("size=101".to_owned(), "size"),
    ] {
        assert_invalid(&app.get(&format!("/api/transactions/breaks?{query}")).await, field, &query);
    }
}

async fn reconciliation_records_one_balance_mismatch_per_difference(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    submit(&app, transfer("a", "b", "10")).await;
    let released = id_of(&submit(&app, lock("a", Some("b"), "5", None)).await);
    let cancelled = id_of(&submit(&app, lock("b", None, "2", None)).await);
    let open = id_of(&submit(&app, lock("a", None, "3", None)).await);
    settle(&app).await;
    submit(&app, complete("RELEASE", &released)).await;
    submit(&app, complete("CANCEL", &cancelled)).await;
    settle(&app).await;
    assert_eq!(app.get(&format!("/api/locks/{open}")).await.body["status"], "ACTIVE");

    run_periodic(&app, "positions.reconcile").await;
    assert_eq!(breaks(&app, "").await.body["totalElements"], 0, "normal activity leaves no break");

    // The service's expectation of a drifts from the ledger.
    app.db.execute("UPDATE positions SET total = total + 1 WHERE account_ref = 'a'").await;
    run_periodic(&app, "positions.reconcile").await;
    let found = breaks(&app, "?reason=BALANCE_MISMATCH").await;
    assert_eq!(found.body["totalElements"], 1, "{}", found.body);
    let mismatch = &found.body["content"][0];
    assert_eq!(mismatch["accountRef"], "a");
    assert_eq!(mismatch["assetId"], "USD");
    assert!(mismatch.get("transactionId").is_none(), "{mismatch}");
    assert!(mismatch["detail"].as_str().is_some_and(|d| !d.is_empty()), "{mismatch}");
    assert_iso_utc(&mismatch["detectedAt"]);

    // The same difference is recorded once, however often reconciliation runs.
    for _ in 0..2 {
        app.clock.advance_millis(60_000);
        run_periodic(&app, "positions.reconcile").await;
    }
    assert_eq!(breaks(&app, "?reason=BALANCE_MISMATCH").await.body["totalElements"], 1);

    // Another difference (b's held amount) is a break of its own.
    app.db.execute("UPDATE positions SET held = held + 7 WHERE account_ref = 'b'").await;
    run_periodic(&app, "positions.reconcile").await;
    let both = breaks(&app, "?reason=BALANCE_MISMATCH").await;
    assert_eq!(listed(&both, "accountRef"), vec!["b".to_owned(), "a".to_owned()], "newest first");
    assert_eq!(breaks(&app, "?reason=BALANCE_MISMATCH&accountRef=b").await.body["totalElements"], 1);
}

/// An account the ledger has paid ahead of the service's confirmation is settlement catching
/// up, not a break: while an operation paying it (a transfer it receives) is between the ledger
/// and its confirmation, reconciliation leaves it for a later round, on the receiving side as on
/// the sending one. Once nothing is in flight, the same difference is a break.
async fn reconciliation_waits_for_what_an_account_receives_to_confirm(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    funded(&app, "a", "100").await;
    let paid = id_of(&submit(&app, transfer("a", "b", "10")).await);
    settle(&app).await;
    // As between the ledger's receipt and the confirmation: the ledger has paid b, b's position
    // does not show it yet, and the transfer is SETTLING.
    app.db.execute("UPDATE positions SET total = total - 1000 WHERE account_ref = 'b'").await;
    app.db.execute(&format!("UPDATE operations SET state = 'SETTLING' WHERE id = '{paid}'")).await;
    run_periodic(&app, "positions.reconcile").await;
    let none = breaks(&app, "?reason=BALANCE_MISMATCH").await;
    assert_eq!(none.body["totalElements"], 0, "b waits for the transfer it receives: {}", none.body);

    // Nothing in flight any more, and the position still short: a break of b's.
    app.db.execute(&format!("UPDATE operations SET state = 'CONFIRMED' WHERE id = '{paid}'")).await;
    run_periodic(&app, "positions.reconcile").await;
    let found = breaks(&app, "?reason=BALANCE_MISMATCH").await;
    assert_eq!(listed(&found, "accountRef"), vec!["b".to_owned()], "{}", found.body);
}

/// The ledger's balances are 256-bit, the service's positions 64-bit: mints of the largest
/// amount the API takes, past what a position can hold, settle as the ledger settled them
/// (CONFIRMED, the balance read from the ledger), and reconciliation reports that the service's
/// record cannot follow the account, instead of the operations ending FAILED with value moved.
async fn a_balance_past_what_a_position_holds_confirms_and_is_reported_as_a_break(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    setup(&app).await;
    let largest = "92233720368547758.07";
    let mut minted = Vec::new();
    for _ in 0..3 {
        minted.push(submit(&app, mint("a", largest)).await);
    }
    settle(&app).await;
    for reply in &minted {
        let done = operation(&app, reply).await;
        assert_eq!(done["state"], "CONFIRMED", "{done}");
    }
    assert_eq!(balance(&app, "a").await["total"], "276701161105643274.21");
    run_periodic(&app, "positions.reconcile").await;
    let found = breaks(&app, "?reason=BALANCE_MISMATCH&accountRef=a").await;
    assert_eq!(found.body["totalElements"], 1, "{}", found.body);
    let detail = found.body["content"][0]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("ledger total 27670116110564327421"), "{detail}");
}

backends!(a_balance_past_what_a_position_holds_confirms_and_is_reported_as_a_break);

backends!(
    a_submission_is_202_with_the_operation_and_its_location,
    every_cause_of_a_submission_400_names_its_field,
    a_submission_ignores_fields_it_does_not_take,
    an_idempotency_key_missing_blank_or_over_255_is_400,
    a_release_before_its_lock_is_processed_is_404_and_the_same_key_succeeds_later,
    balances_are_not_checked_at_submission_an_overdraft_fails_chain_failed_with_a_break,
    the_same_key_returns_the_operation_as_it_is_now_failed_ones_included,
    a_key_in_flight_is_409_and_a_key_reused_with_another_payload_is_422,
    submitting_needs_transaction_submit_and_mint_and_burn_need_transaction_mint,
    a_confirmed_operation_has_its_hash_and_block_and_never_a_failure_code,
    an_operation_that_cannot_be_processed_fails_unprocessable,
    a_batch_settles_the_common_case_together_and_the_unusual_alone,
    a_signature_that_could_not_be_recorded_gives_its_nonce_back,
    an_evaluation_stopped_after_signing_settles_from_the_recorded_signature,
    an_evaluation_out_of_attempts_fails_retry_exhausted,
    an_operation_no_job_carries_is_resumed_by_the_sweep,
    a_custody_refusal_fails_signing_rejected_with_nothing_on_the_ledger,
    locks_hold_funds_until_released_to_the_payee_or_owner_or_cancelled,
    concurrent_completions_of_one_lock_accept_exactly_one,
    an_expired_lock_returns_to_its_owner,
    a_lock_holds_until_its_expiry_to_the_millisecond,
    completing_a_lock_of_a_switched_off_contract_is_refused,
    a_lock_is_completed_whatever_its_accounts_became,
    transactions_are_listed_newest_first_with_filters_in_style_a,
    transactions_are_walked_by_cursor_in_style_d_without_gaps,
    get_by_id_is_400_for_a_non_uuid_and_404_for_an_unknown_or_foreign_operation,
    breaks_are_listed_newest_first_with_reason_account_and_a_half_open_window,
    reconciliation_records_one_balance_mismatch_per_difference,
    reconciliation_waits_for_what_an_account_receives_to_confirm,
);

// ---------------------------------------------------------------------------------------------
// On anvil
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil_transfers_reverts_and_locks_settle() {
    let anvil = Anvil::start().await;
    let app = TestApp::spawn_with(Backend::Sqlite, anvil.ledger_settings()).await;
    setup(&app).await;
    let on_node = Duration::from_secs(60);
    submit(&app, mint("a", "100")).await;
    settle_within(&app, on_node).await;
    let sent = submit(&app, transfer("a", "b", "30")).await;
    let overdraft = submit(&app, transfer("b", "a", "500")).await;
    settle_within(&app, on_node).await;

    let confirmed = operation(&app, &sent).await;
    assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
    assert_hash(&confirmed["txHash"]);
    let receipt = anvil.rpc("eth_getTransactionReceipt", json!([confirmed["txHash"]])).await;
    assert_eq!(receipt["status"], "0x1", "{receipt}");
    let block = u64::from_str_radix(receipt["blockNumber"].as_str().unwrap_or("0x0").trim_start_matches("0x"), 16)
        .expect("block");
    assert_eq!(confirmed["blockNumber"].as_u64(), Some(block), "the node's block");

    let failed = operation(&app, &overdraft).await;
    assert_eq!((failed["state"].as_str(), failed["failureCode"].as_str()), (Some("FAILED"), Some("CHAIN_FAILED")));
    assert_hash(&failed["txHash"]);
    assert!(failed["blockNumber"].is_u64(), "included and reverted: {failed}");
    assert!(
        failed["reasonCode"] == "EXECUTION_REVERTED"
            && failed["revertReason"].as_str().is_some_and(|r| r.starts_with("InsufficientAvailableBalance")),
        "the revert decoded: {failed}"
    );
    let reverted = anvil.rpc("eth_getTransactionReceipt", json!([failed["txHash"]])).await;
    assert_eq!(reverted["status"], "0x0", "{reverted}");
    let found = breaks(&app, "").await;
    assert_eq!(found.body["totalElements"], 1);
    assert_eq!(found.body["content"][0]["transactionId"], failed["transactionId"]);
    assert_eq!(amounts(&app, "a").await, triple("70.00", "70.00", "0.00"));
    assert_eq!(amounts(&app, "b").await, triple("30.00", "30.00", "0.00"));

    let for_b = id_of(&submit(&app, lock("a", Some("b"), "10", None)).await);
    let to_cancel = id_of(&submit(&app, lock("a", None, "5", None)).await);
    settle_within(&app, on_node).await;
    assert_eq!(amounts(&app, "a").await, triple("70.00", "55.00", "15.00"));
    for lock_id in [&for_b, &to_cancel] {
        assert_eq!(app.get(&format!("/api/locks/{lock_id}")).await.body["status"], "ACTIVE");
    }
    let release = submit(&app, complete("RELEASE", &for_b)).await;
    let cancel = submit(&app, complete("CANCEL", &to_cancel)).await;
    settle_within(&app, on_node).await;
    assert_eq!(operation(&app, &release).await["state"], "CONFIRMED");
    assert_eq!(operation(&app, &cancel).await["state"], "CONFIRMED");
    assert_eq!(app.get(&format!("/api/locks/{for_b}")).await.body["status"], "RELEASED");
    assert_eq!(app.get(&format!("/api/locks/{to_cancel}")).await.body["status"], "CANCELLED");
    assert_eq!(amounts(&app, "a").await, triple("60.00", "60.00", "0.00"));
    assert_eq!(amounts(&app, "b").await, triple("40.00", "40.00", "0.00"));

    run_periodic(&app, "positions.reconcile").await;
    assert_eq!(breaks(&app, "?reason=BALANCE_MISMATCH").await.body["totalElements"], 0);
}

/// The node cannot be reached after an operation's transaction was sent: its outcome is not
/// known, so the operation waits SETTLING past every retry budget (a FAILED operation must have
/// moved no value) and is CONFIRMED, once, when the node answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil_a_sent_transaction_outlives_an_outage_of_the_node() {
    let anvil = Anvil::start().await;
    let path = CuttablePath::to(&anvil.url).await;
    let mut settings = anvil.ledger_settings();
    settings.insert("TOKENOPS_EVM_RPC_URL".to_owned(), path.url.clone());
    settings.insert("TOKENOPS_JOB_MAX_ATTEMPTS".to_owned(), "3".to_owned());
    let app = TestApp::spawn_with(Backend::Sqlite, settings).await;
    setup(&app).await;
    submit(&app, mint("a", "100")).await;
    settle_within(&app, Duration::from_secs(60)).await;

    let sent = id_of(&submit(&app, transfer("a", "b", "10")).await);
    // Evaluated, signed and sent; its first receipt poll is not due on the test's clock yet.
    app.drain_jobs().await;
    let settling = get_operation(&app, &sent).await;
    assert_eq!(settling["state"], "SETTLING", "{settling}");
    assert!(settling["txHash"].is_string(), "{settling}");

    path.cut();
    // Far past three attempts' backoff: the operation keeps waiting for the node.
    for _ in 0..40 {
        app.clock.advance_millis(30_000);
        app.drain_jobs().await;
    }
    let waiting = get_operation(&app, &sent).await;
    assert_eq!(waiting["state"], "SETTLING", "an unknown outcome is not a failure: {waiting}");
    assert!(waiting.get("failureCode").is_none(), "{waiting}");
    assert_eq!(breaks(&app, "?reason=RETRY_EXHAUSTED").await.body["totalElements"], 0);

    path.restore();
    settle_within(&app, Duration::from_secs(60)).await;
    let confirmed = get_operation(&app, &sent).await;
    assert_eq!(confirmed["state"], "CONFIRMED", "{confirmed}");
    assert_eq!(confirmed["txHash"], settling["txHash"], "the transaction sent before the outage");
    assert_eq!(events_about(&app, "transaction.confirmed", &sent).await.len(), 1);
    assert!(events_about(&app, "transaction.failed", &sent).await.is_empty());
    let balance = app.get("/api/accounts/b/balances").await;
    assert_eq!(balance.body["total"], "10.00", "moved once: {}", balance.body);
}

/// A TCP path to a node that a test can cut (every connection through it dropped, new ones
/// closed at once) and restore, as a network failure between the service and its ledger.
struct CuttablePath {
    url: String,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
    open: std::sync::Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl CuttablePath {
    async fn to(node_url: &str) -> CuttablePath {
        let target = node_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let open = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (is_cut, connections) = (cut.clone(), open.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                if is_cut.load(std::sync::atomic::Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let target = target.clone();
                let relay = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                connections.lock().expect("lock").push(relay);
            }
        });
        CuttablePath { url, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, std::sync::atomic::Ordering::SeqCst);
        for relay in self.open.lock().expect("lock").drain(..) {
            relay.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The node goes away before an operation is sent: settlement retries, then gives up with
/// RETRY_EXHAUSTED and a break; nothing reached the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil_an_unreachable_node_fails_retry_exhausted_with_a_break() {
    let anvil = Anvil::start().await;
    let mut settings = anvil.ledger_settings();
    settings.insert("TOKENOPS_JOB_MAX_ATTEMPTS".to_owned(), "3".to_owned());
    let app = TestApp::spawn_with(Backend::Sqlite, settings).await;
    setup(&app).await;
    submit(&app, mint("a", "100")).await;
    settle_within(&app, Duration::from_secs(60)).await;

    anvil.stop().await;
    let stranded = id_of(&submit(&app, transfer("a", "b", "10")).await);
    // Past each retry's backoff (base 1 s, doubling, jitter), within a real-time deadline.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        app.drain_jobs().await;
        if get_operation(&app, &stranded).await["state"] == "FAILED" {
            break;
        }
        assert!(Instant::now() < deadline, "still {}", get_operation(&app, &stranded).await);
        app.clock.advance_millis(5_000);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let failed = get_operation(&app, &stranded).await;
    assert_eq!(failed["failureCode"], "RETRY_EXHAUSTED", "{failed}");
    assert!(failed.get("blockNumber").is_none(), "{failed}");
    assert_eq!(events_about(&app, "transaction.failed", &stranded).await.len(), 1);
    let found = breaks(&app, "?reason=RETRY_EXHAUSTED").await;
    assert_eq!(found.body["totalElements"], 1, "{}", found.body);
    assert_eq!(found.body["content"][0]["transactionId"], stranded.as_str());
    assert_eq!(found.body["content"][0]["accountRef"], "a");
}
