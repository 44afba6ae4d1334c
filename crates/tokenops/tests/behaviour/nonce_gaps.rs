//! A wallet held back by a nonce gap settles without a restart (issue 16). A crash of the store
//! between signing and recording leaves a nonce handed out whose signature nobody will send; the
//! wallet's later transactions wait on the ledger behind it. The gap sweep (`nonce_gaps.heal`)
//! must use the nonce up, so that they settle, on the embedded ledger (both stores) and on
//! anvil, and the lost signature must never be included.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use tokenops_app::jobs::kinds;
use tokenops_ledger::{Address, LedgerCall, LedgerError, ReceiptStatus, U256};
use tokenops_testkit::anvil::Anvil;
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

/// Short, so that the test waits little real time for the sweep to trust that the lost
/// signature is not on its way to the store any more.
const GRACE_MS: u64 = 300;

fn settings() -> BTreeMap<String, String> {
    BTreeMap::from([("TOKENOPS_NONCE_GAP_GRACE_MS".to_owned(), GRACE_MS.to_string())])
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

async fn a_nonce_gap_heals_without_a_restart(app: &TestApp, on_ledger: Duration) {
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
    assert!(matches!(resent, Err(LedgerError::Final { .. })), "the lost signature is void: {resent:?}");

    // The books agree with the ledger: no break, no mismatch.
    app.app.jobs.schedule_periodic(kinds::POSITIONS_RECONCILE).await.expect("schedule reconciliation");
    app.drain_jobs().await;
    let breaks = app.get("/api/transactions/breaks").await;
    breaks.expect(200);
    assert_eq!(breaks.body["totalElements"], 0, "{}", breaks.body);
}

backends!(on_the_embedded_ledger);

async fn on_the_embedded_ledger(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings()).await;
    a_nonce_gap_heals_without_a_restart(&app, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil() {
    let anvil = Anvil::start().await;
    let mut settings = settings();
    settings.extend(anvil.ledger_settings());
    let app = TestApp::spawn_with(Backend::Sqlite, settings).await;
    a_nonce_gap_heals_without_a_restart(&app, Duration::from_secs(60)).await;
}
