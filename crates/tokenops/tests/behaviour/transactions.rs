//! Token operations over HTTP with the embedded ledger: submission (202), the settlement
//! pipeline to CONFIRMED or FAILED, locks, breaks and balances.

use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokenops_testkit::{Backend, Reply, TestApp, backends};

/// Runs the pipeline until every operation is terminal: drains the jobs, moving the manual
/// clock past each receipt poll, with a real-time deadline.
async fn settle(app: &TestApp) {
    let deadline = Instant::now() + Duration::from_secs(20);
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

async fn setup(app: &TestApp) {
    app.post("/api/contracts", &json!({ "assetId": "USD" })).await.expect(201);
    app.drain_jobs().await;
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    for account in ["a", "b"] {
        app.post("/api/accounts", &json!({ "accountRef": account, "customerRef": "c-1", "assetId": "USD" }))
            .await
            .expect(201);
    }
    app.drain_jobs().await;
}

async fn submit(app: &TestApp, body: Value) -> Reply {
    let reply = app.post("/api/transactions", &body).await;
    reply.expect(202);
    reply
}

async fn operation(app: &TestApp, reply: &Reply) -> Value {
    let id = reply.body["transactionId"].as_str().expect("transactionId");
    app.get(&format!("/api/transactions/{id}")).await.body
}

async fn balance(app: &TestApp, account: &str) -> Value {
    let reply = app.get(&format!("/api/accounts/{account}/balances")).await;
    reply.expect(200);
    reply.body
}

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
    assert!(failed["reasonCode"].as_str().is_some_and(|r| r.contains("Insufficient")), "{failed}");
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
    let early = app
        .write(
            reqwest::Method::POST,
            "/api/transactions",
            "release-1",
            &json!({ "txType": "RELEASE", "params": { "lockId": lock_id } }),
        )
        .await;
    early.expect(404);
    settle(&app).await;
    let held = balance(&app, "a").await;
    assert_eq!(
        (held["total"].as_str(), held["available"].as_str(), held["locked"].as_str()),
        (Some("70.00"), Some("60.00"), Some("10.00"))
    );
    let visible = app.get(&format!("/api/locks/{lock_id}")).await;
    visible.expect(200);
    assert_eq!(visible.body["status"], "ACTIVE");
    let release = app
        .write(
            reqwest::Method::POST,
            "/api/transactions",
            "release-1",
            &json!({ "txType": "RELEASE", "params": { "lockId": lock_id } }),
        )
        .await;
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
