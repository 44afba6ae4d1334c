//! Remote custody (`TOKENOPS_CUSTODY=remote`) against a real signer over HTTP: the issuer's
//! deployments are signed remotely, account wallets are created there, and a signer that
//! refuses to create a wallet fails the account's provisioning for good, with the reason.

use serde_json::json;
use std::collections::BTreeMap;
use tokenops_testkit::{Backend, TestApp, TestSigner, backends};

backends!(a_custody_refusal_fails_provisioning_with_its_reason);

async fn a_custody_refusal_fails_provisioning_with_its_reason(backend: Backend) {
    let signer = TestSigner::start().await;
    let extra = BTreeMap::from([
        ("TOKENOPS_CUSTODY".to_owned(), "remote".to_owned()),
        ("TOKENOPS_CUSTODY_URL".to_owned(), signer.base_url.clone()),
    ]);
    let app = TestApp::spawn_with(backend, extra).await;
    assert_eq!(signer.key_count(), 1, "the issuer wallet is created at the signer on the first start");

    app.post("/api/contracts", &json!({ "assetId": "EUR" })).await.expect(201);
    app.drain_jobs().await;
    assert_eq!(app.get("/api/contracts/EUR").await.body["status"], "ACTIVE", "deployed with the remote issuer key");
    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);

    signer.refuse_key_creation_for_labels_containing("/refused-");
    let refused = json!({ "accountRef": "refused-1", "customerRef": "c-1", "assetId": "EUR" });
    app.post("/api/accounts", &refused).await.expect(201);
    let accepted = json!({ "accountRef": "fine-1", "customerRef": "c-1", "assetId": "EUR" });
    app.post("/api/accounts", &accepted).await.expect(201);
    let report = app.drain_jobs().await;
    assert_eq!(report.retried, 0, "a refusal is final, not retried: {report:?}");

    let failed = app.get("/api/accounts/refused-1").await;
    assert_eq!(failed.body["status"], "FAILED", "{}", failed.body);
    let reason = failed.body["failureReason"].as_str().unwrap_or_default();
    assert!(reason.contains("custody") && reason.contains("refused"), "{reason}");
    assert!(failed.body.get("walletAddress").is_none());
    app.get("/api/accounts/refused-1/balances").await.expect(422);
    let events = app.get("/api/webhook-events?type=account.provisioning_failed").await;
    let items = events.body["items"].as_array().cloned().unwrap_or_default();
    assert_eq!(items.len(), 1, "{}", events.body);
    assert_eq!(items[0]["resource"]["id"], "refused-1");

    let fine = app.get("/api/accounts/fine-1").await;
    assert_eq!(fine.body["status"], "ACTIVE", "{}", fine.body);
    assert_eq!(signer.key_count(), 2, "the issuer's and fine-1's wallets");
    app.get("/api/accounts/fine-1/balances").await.expect(200);
}
