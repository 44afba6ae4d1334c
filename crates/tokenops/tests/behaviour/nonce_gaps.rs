//! A wallet held back by a nonce gap settles without a restart (issue 16). A crash of the store
//! between signing and recording leaves a nonce handed out whose signature nobody will send; the
//! wallet's later transactions wait on the ledger behind it. The gap sweep (`nonce_gaps.heal`)
//! must use the nonce up, so that they settle, on the embedded ledger (both stores) and on
//! anvil, and the lost signature must never be included.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokenops_app::clock::Clock;
use tokenops_app::jobs::kinds;
use tokenops_app::settlement::encode_signed;
use tokenops_domain::chain::TxHash;
use tokenops_domain::operation::OperationState;
use tokenops_ledger::{Address, LedgerCall, LedgerError, ReceiptStatus, U256};
use tokenops_store::NewJob;
use tokenops_testkit::anvil::Anvil;
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

/// Short, so that the test waits little real time for the sweep to trust that the lost
/// signature is not on its way to the store any more.
const GRACE_MS: u64 = 300;

fn settings() -> BTreeMap<String, String> {
    BTreeMap::from([("TOKENOPS_NONCE_GAP_GRACE_MS".to_owned(), GRACE_MS.to_string())])
}

/// The app of these tests on SQLite with its ledger on anvil, and the node, which must outlive it.
async fn app_on_anvil() -> (Anvil, TestApp) {
    let anvil = Anvil::start().await;
    let mut settings = settings();
    settings.extend(anvil.ledger_settings());
    let app = TestApp::spawn_with(Backend::Sqlite, settings).await;
    (anvil, app)
}

async fn write(app: &TestApp, path: &str, body: Value) -> Reply {
    app.write(Method::POST, path, &Uuid::now_v7().to_string(), &body).await
}

async fn states(app: &TestApp, ids: &[String]) -> Vec<String> {
    let mut states = Vec::new();
    for id in ids {
        let reply = app.get(&format!("/api/transactions/{id}")).await;
        reply.expect(200);
        states.push(reply.body["state"].as_str().unwrap_or_default().to_owned());
    }
    states
}

/// Drains the jobs, moving the manual clock on, until `ids` are all in `state` or `limit` passes
/// (with the gap sweep run each round when `sweep`); the states last seen.
async fn drive(app: &TestApp, ids: &[String], state: &str, sweep: bool, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    loop {
        if sweep {
            app.app.jobs.schedule_periodic(kinds::NONCE_GAPS_HEAL).await.expect("schedule the sweep");
        }
        app.drain_jobs().await;
        let seen = states(app, ids).await;
        if seen.iter().all(|s| s == state) || Instant::now() >= deadline {
            return seen;
        }
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn active(app: &TestApp, path: &str, body: Value, read: &str) -> Value {
    write(app, path, body).await.expect(201);
    app.drain_jobs().await;
    let reply = app.get(read).await;
    assert_eq!(reply.body["status"], "ACTIVE", "{}", reply.body);
    reply.body
}

fn address(value: &Value, field: &str) -> Address {
    value[field].as_str().and_then(|t| t.parse().ok()).unwrap_or_else(|| panic!("{field}: {value}"))
}

async fn total(app: &TestApp, account: &str) -> String {
    let reply = app.get(&format!("/api/accounts/{account}/balances")).await;
    reply.expect(200);
    reply.body["total"].as_str().unwrap_or_default().to_owned()
}

/// A USD contract, accounts `a` and `b` of one customer, and 100.00 minted to `a`, CONFIRMED:
/// the token's address and the two wallets.
async fn funded_pair(app: &TestApp, on_ledger: Duration) -> (Address, Address, Address) {
    let contract = active(app, "/api/contracts", json!({ "assetId": "USD" }), "/api/contracts/USD").await;
    write(app, "/api/customers", json!({ "customerRef": "c-1" })).await.expect(201);
    let mut wallets = Vec::new();
    for account in ["a", "b"] {
        let body = json!({ "accountRef": account, "customerRef": "c-1", "assetId": "USD" });
        let account = active(app, "/api/accounts", body, &format!("/api/accounts/{account}")).await;
        wallets.push(address(&account, "walletAddress"));
    }
    let (token, a, b) = (address(&contract, "contractAddress"), wallets[0], wallets[1]);
    let minted = write(
        app,
        "/api/transactions",
        json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a", "amount": "100.00" }),
    )
    .await;
    minted.expect(202);
    let minted = vec![minted.body["transactionId"].as_str().expect("id").to_owned()];
    assert_eq!(drive(app, &minted, "CONFIRMED", false, on_ledger).await, ["CONFIRMED"]);
    (token, a, b)
}

async fn a_nonce_gap_heals_without_a_restart(app: &TestApp, on_ledger: Duration) {
    let (token, a, b) = funded_pair(app, on_ledger).await;

    // The gap: a's next nonce goes to a signature that is neither recorded nor sent, as when the
    // store fails at the commit that would have recorded it and cannot be read afterwards.
    let ledger = app.app.ledger.clone();
    let custody = app.app.settlement.custody.clone();
    let lost = ledger
        .sign(token, &LedgerCall::Transfer { from: a, to: b, amount: U256::from(1u64) }, custody.as_ref())
        .await
        .expect("sign the lost transfer");
    assert_eq!(ledger.next_nonce(a).await.expect("next nonce"), lost.nonce, "nothing holds the lost nonce");

    // The wallet's next transfers take the nonces after it, are sent, and wait behind it.
    let mut held = Vec::new();
    for _ in 0..3 {
        let reply = write(app, "/api/transactions", json!({ "txType": "TRANSFER", "assetId": "USD", "accountRef": "a", "counterpartyRef": "b", "amount": "1.00" })).await;
        reply.expect(202);
        held.push(reply.body["transactionId"].as_str().expect("id").to_owned());
    }
    let waiting = drive(app, &held, "SETTLING", false, on_ledger).await;
    assert_eq!(waiting, ["SETTLING"; 3], "sent and waiting");
    let before = Instant::now();
    while before.elapsed() < Duration::from_millis(800) {
        app.drain_jobs().await;
        app.clock.advance_millis(250);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(states(app, &held).await, ["SETTLING"; 3], "held back by the gap until it is healed");
    assert_eq!(ledger.next_nonce(a).await.expect("next nonce"), lost.nonce, "the gap is still there");

    // The sweep uses the nonce up; the held transfers settle without a restart.
    let settled = drive(app, &held, "CONFIRMED", true, on_ledger).await;
    assert_eq!(settled, ["CONFIRMED"; 3], "the wallet's transfers settle once the gap is filled");
    assert!(ledger.next_nonce(a).await.expect("next nonce") > lost.nonce + 3, "the filler and the transfers are in");
    assert_eq!(total(app, "a").await, "97.00");
    assert_eq!(total(app, "b").await, "3.00", "the lost transfer moved nothing");
    // The lost bytes can never be included now: their nonce is used by the filler.
    assert_eq!(ledger.receipt(lost.hash).await.expect("receipt"), ReceiptStatus::Unknown);
    let resent = ledger.send(&lost).await;
    assert!(matches!(resent, Err(LedgerError::Superseded { .. })), "the lost signature is void: {resent:?}");

    // The books agree with the ledger: no break, no mismatch.
    app.app.jobs.schedule_periodic(kinds::POSITIONS_RECONCILE).await.expect("schedule reconciliation");
    app.drain_jobs().await;
    let breaks = app.get("/api/transactions/breaks").await;
    breaks.expect(200);
    assert_eq!(breaks.body["totalElements"], 0, "{}", breaks.body);
}

/// Two transfers whose recorded signatures lost their nonces to other transactions of the
/// wallet, as when a restart or an outage let a nonce go out twice: one still to be sent
/// (PENDING_SETTLEMENT), one sent and dropped by the ledger (SETTLING). Their bytes can never be
/// included, so each is signed anew and settles, exactly once; none fails for an outage.
async fn a_superseded_signature_is_signed_anew(app: &TestApp, on_ledger: Duration) {
    let (token, a, b) = funded_pair(app, on_ledger).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let body = json!({ "txType": "TRANSFER", "assetId": "USD", "accountRef": "a", "counterpartyRef": "b", "amount": "1.00" });
        let reply = write(app, "/api/transactions", body).await;
        reply.expect(202);
        ids.push(reply.body["transactionId"].as_str().expect("id").parse::<Uuid>().expect("uuid"));
    }
    // Each transfer's own call, signed, then its nonce handed to a zero transfer that is included.
    let (ledger, custody) = (app.app.ledger.clone(), app.app.settlement.custody.clone());
    let call = LedgerCall::Transfer { from: a, to: b, amount: U256::from(100u64) };
    let mut superseded = Vec::new();
    for _ in &ids {
        superseded.push(ledger.sign(token, &call, custody.as_ref()).await.expect("sign"));
    }
    for lost in superseded.iter().rev() {
        ledger.abandon(lost).await;
    }
    let zero = LedgerCall::Transfer { from: a, to: a, amount: U256::ZERO };
    for lost in &superseded {
        let thief = ledger.sign(token, &zero, custody.as_ref()).await.expect("sign the thief");
        assert_eq!(thief.nonce, lost.nonce, "the nonce goes out a second time");
        ledger.send(&thief).await.expect("send the thief");
        let deadline = Instant::now() + on_ledger;
        while !matches!(ledger.receipt(thief.hash).await.expect("receipt"), ReceiptStatus::Included { .. }) {
            assert!(Instant::now() < deadline, "the thief is not included");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The operations hold the superseded signatures, as if recorded before the nonce went again.
    let tenant = app.tenant.id;
    let mut tx = app.app.store.write().await.expect("write");
    let rows = tx.operations().get_many(&[(tenant, ids[0]), (tenant, ids[1])], true).await.expect("rows");
    let mut jobs = Vec::new();
    for ((row, lost), (state, kind)) in rows.into_iter().zip(&superseded).zip([
        (OperationState::PendingSettlement, kinds::OPERATION_SETTLE),
        (OperationState::Settling, kinds::OPERATION_TRACK),
    ]) {
        let mut operation = row.expect("the transfer");
        operation.state = state;
        operation.signed_transaction = Some(encode_signed(lost).expect("encode"));
        operation.tx_hash = (state == OperationState::Settling).then(|| TxHash::from_bytes(lost.hash.0));
        tx.operations().update(&operation).await.expect("update");
        jobs.push(NewJob {
            kind: kind.to_owned(),
            tenant_id: Some(tenant),
            payload: json!({ "transactionId": operation.id }),
            run_at: app.clock.now(),
            max_attempts: 10,
            dedupe_key: None,
        });
    }
    tx.jobs().enqueue_all(&jobs, app.clock.now()).await.expect("enqueue");
    tx.commit().await.expect("commit");

    let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
    assert_eq!(drive(app, &ids, "CONFIRMED", false, on_ledger).await, ["CONFIRMED"; 2], "signed anew, not failed");
    for (id, lost) in ids.iter().zip(&superseded) {
        let reply = app.get(&format!("/api/transactions/{id}")).await;
        assert_ne!(reply.body["txHash"], format!("{:#x}", lost.hash), "a new signature: {}", reply.body);
        assert_eq!(ledger.receipt(lost.hash).await.expect("receipt"), ReceiptStatus::Unknown, "never included");
    }
    assert_eq!(total(app, "a").await, "98.00");
    assert_eq!(total(app, "b").await, "2.00", "each transfer moved its amount once");
}

backends!(on_the_embedded_ledger, superseded_signatures_on_the_embedded_ledger);

async fn superseded_signatures_on_the_embedded_ledger(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings()).await;
    a_superseded_signature_is_signed_anew(&app, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_signatures_on_anvil() {
    let (_anvil, app) = app_on_anvil().await;
    a_superseded_signature_is_signed_anew(&app, Duration::from_secs(60)).await;
}

async fn on_the_embedded_ledger(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings()).await;
    a_nonce_gap_heals_without_a_restart(&app, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil() {
    let (_anvil, app) = app_on_anvil().await;
    a_nonce_gap_heals_without_a_restart(&app, Duration::from_secs(60)).await;
}
