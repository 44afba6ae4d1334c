//! Store failures while requests are in flight, over HTTP, on both stores (spec: Failed
//! operations, Errors/Status codes 500). A table that cannot be read, as after a lost
//! connection, is the service's failure: 500 `System error occurred`, never the caller's 4xx,
//! whatever the request was looking up (a contract, a role, the caller itself, the signing
//! keys, a balance). A write rolls back and releases its Idempotency-Key, so the same request
//! with the same key succeeds once the store is back, and takes effect once. Only a genuine
//! absence is the caller's answer, stored under its key.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::organisation::{NEW_PASSWORD, call, create_organisation, login};
use tokenops_testkit::{API_VERSION, Backend, Reply, TestApp, backends};

use crate::fixtures::{active_account, active_contract, customer};
use crate::support::key;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// An internal failure's envelope with `code`, answered afresh (a 500 is never stored).
#[track_caller]
fn assert_system_error(reply: &Reply, code: &str) {
    assert_eq!(reply.status, 500, "unexpected status; body: {}", reply.body);
    assert_eq!(reply.body["status"], 500, "{}", reply.body);
    assert_eq!(reply.body["error"], "Internal Server Error", "{}", reply.body);
    assert_eq!(reply.body["message"], "System error occurred", "{}", reply.body);
    assert_eq!(reply.body["code"], code, "{}", reply.body);
    assert!(reply.header("idempotent-replayed").is_none(), "a 500 is no replay");
}

/// `status`, run now rather than replayed.
#[track_caller]
fn assert_fresh(reply: &Reply, status: u16) {
    reply.expect(status);
    assert!(reply.header("idempotent-replayed").is_none(), "not a replay: the failure left the key free");
}

/// `status`, replayed from the key's stored outcome.
#[track_caller]
fn assert_replayed(reply: &Reply, status: u16) {
    reply.expect(status);
    assert_eq!(reply.header("idempotent-replayed"), Some("true"), "the key's stored outcome");
}

/// How many outcomes or claims the store holds under `key`.
async fn held_under(app: &TestApp, key: &str) -> i64 {
    app.db.count("idempotency_records", &format!("idempotency_key = '{key}'")).await
}

/// What `request` answers while `table` can be neither read nor written; the table is back
/// afterwards.
async fn while_broken<T>(app: &TestApp, table: &str, request: impl AsyncFnOnce() -> T) -> T {
    app.db.break_table(table).await;
    let answer = request().await;
    app.db.restore_table(table).await;
    answer
}

/// A write that failed in the store: a 500 `INTERNAL_ERROR`, and its key released, not bound to
/// the failure.
async fn assert_failed_and_released(app: &TestApp, reply: &Reply, key: &str) {
    assert_system_error(reply, "INTERNAL_ERROR");
    assert_eq!(held_under(app, key).await, 0, "the key was released, not bound to the failure");
}

/// A JSON write with `token` and this Idempotency-Key.
async fn send(app: &TestApp, token: &str, method: Method, path: &str, key: &str, body: &Value) -> Reply {
    let request = app
        .raw(method, path)
        .header("API-Version", API_VERSION)
        .bearer_auth(token)
        .header("Idempotency-Key", key)
        .json(body);
    Reply::read(request.send().await.expect("request")).await
}

// ---------------------------------------------------------------------------------------------
// Token operations, accounts and balances
// ---------------------------------------------------------------------------------------------

async fn a_submission_whose_contract_cannot_be_read_is_500_and_its_key_works_once_the_store_is_back(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    active_account(&app, "a-1", "c-1", "USD").await;
    let k = key();
    let mint = json!({ "txType": "MINT", "assetId": "USD", "accountRef": "a-1", "amount": "10.00" });

    let failed =
        while_broken(&app, "contracts", async || app.write(Method::POST, "/api/transactions", &k, &mint).await).await;
    assert_failed_and_released(&app, &failed, &k).await;
    assert_eq!(app.db.count("operations", "").await, 0);
    assert_eq!(app.db.count("jobs", "kind = 'operation.evaluate'").await, 0);

    let retried = app.write(Method::POST, "/api/transactions", &k, &mint).await;
    assert_fresh(&retried, 202);
    assert_eq!(retried.body["txType"], "MINT", "{}", retried.body);
    assert_eq!(retried.body["state"], "SUBMITTED", "{}", retried.body);
    assert_eq!(retried.body["amount"], "10.00", "{}", retried.body);
    let id = retried.body["transactionId"].as_str().expect("transactionId").to_owned();
    assert_eq!(retried.header("location"), Some(format!("/api/transactions/{id}").as_str()));
    let replay = app.write(Method::POST, "/api/transactions", &k, &mint).await;
    assert_replayed(&replay, 202);
    assert_eq!(replay.body["transactionId"], id.as_str());
    assert_eq!(app.db.count("operations", "").await, 1, "accepted once");
    assert_eq!(app.db.count("operations", &format!("idempotency_key = '{k}'")).await, 1);
    assert_eq!(app.db.count("jobs", "kind = 'operation.evaluate'").await, 1);

    // An asset without an ACTIVE contract is the caller's mistake (400), not the store's: it
    // binds nothing to the key, so the same request is answered anew, not replayed.
    let other = key();
    let euros = json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "a-1", "amount": "10.00" });
    let refused = app.write(Method::POST, "/api/transactions", &other, &euros).await;
    assert_fresh(&refused, 400);
    assert_eq!(refused.body["message"], "assetId: EUR has no ACTIVE contract", "{}", refused.body);
    assert_eq!(refused.body["details"], json!([{ "field": "assetId", "message": "EUR has no ACTIVE contract" }]));
    let again = app.write(Method::POST, "/api/transactions", &other, &euros).await;
    assert_fresh(&again, 400);
    assert_eq!(again.body["message"], refused.body["message"]);
    assert_eq!(app.db.count("operations", "").await, 1);
    assert_eq!(app.db.count("idempotency_records", &format!("idempotency_key = '{other}'")).await, 0);
}

async fn an_account_registration_whose_contract_cannot_be_read_is_500_and_its_key_works_once_the_store_is_back(
    backend: Backend,
) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let k = key();
    let body = json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "USD" });

    let failed =
        while_broken(&app, "contracts", async || app.write(Method::POST, "/api/accounts", &k, &body).await).await;
    assert_failed_and_released(&app, &failed, &k).await;
    assert_eq!(app.db.count("accounts", "").await, 0);
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 0);

    let retried = app.write(Method::POST, "/api/accounts", &k, &body).await;
    assert_fresh(&retried, 201);
    assert_eq!(retried.body["accountRef"], "a-1", "{}", retried.body);
    assert_eq!(retried.body["status"], "PENDING", "{}", retried.body);
    assert_replayed(&app.write(Method::POST, "/api/accounts", &k, &body).await, 201);
    assert_eq!(app.db.count("accounts", "").await, 1, "registered once");
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 1);

    // An asset without an ACTIVE contract is the same 404 as ever, kept under its key.
    let other = key();
    let euros = json!({ "accountRef": "a-2", "customerRef": "c-1", "assetId": "EUR" });
    let refused = app.write(Method::POST, "/api/accounts", &other, &euros).await;
    assert_fresh(&refused, 404);
    assert_eq!(refused.body["message"], "Asset EUR has no ACTIVE contract", "{}", refused.body);
    assert_eq!(refused.body["code"], "NO_ACTIVE_CONTRACT", "{}", refused.body);
    assert_replayed(&app.write(Method::POST, "/api/accounts", &other, &euros).await, 404);
    assert_eq!(app.db.count("accounts", "").await, 1);
}

async fn a_balance_that_cannot_be_read_is_500_never_404_or_zero(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    active_account(&app, "a-1", "c-1", "USD").await;
    let path = "/api/accounts/a-1/balances";
    let before = app.get(path).await;
    before.expect(200);
    assert_eq!(before.body["total"], "0.00", "{}", before.body);

    // The contract cannot be read: not "no ACTIVE contract" (404).
    let no_contract = while_broken(&app, "contracts", async || app.get(path).await).await;
    assert_system_error(&no_contract, "INTERNAL_ERROR");
    assert!(no_contract.body.get("total").is_none(), "{}", no_contract.body);

    // The embedded ledger keeps its balances in the store: unreadable, they are no zero.
    let no_ledger = while_broken(&app, "ledger_balances", async || app.get(path).await).await;
    assert_system_error(&no_ledger, "LEDGER_UNAVAILABLE");
    for field in ["total", "available", "locked"] {
        assert!(no_ledger.body.get(field).is_none(), "no {field} without a ledger: {}", no_ledger.body);
    }

    let after = app.get(path).await;
    after.expect(200);
    assert_eq!(after.body["total"], "0.00", "{}", after.body);
}

// ---------------------------------------------------------------------------------------------
// Who the caller is
// ---------------------------------------------------------------------------------------------

async fn a_caller_that_cannot_be_resolved_is_500_not_401_or_403(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.get("/api/customers").await.expect(200);
    let k = key();
    let body = json!({ "customerRef": "c-1" });

    // Who the token's subject is to tokenops is read from the store at every request.
    let (read, write) = while_broken(&app, "users", async || {
        (app.get("/api/customers").await, app.write(Method::POST, "/api/customers", &k, &body).await)
    })
    .await;
    assert_system_error(&read, "INTERNAL_ERROR");
    assert_failed_and_released(&app, &write, &k).await;
    assert_eq!(app.db.count("customers", "").await, 0);

    assert_fresh(&app.write(Method::POST, "/api/customers", &k, &body).await, 201);
    assert_replayed(&app.write(Method::POST, "/api/customers", &k, &body).await, 201);
    assert_eq!(app.db.count("customers", "").await, 1);
}

/// With the embedded provider a token's key is checked against the signing keys in the store:
/// keys that cannot be read are the service's failure, not an invalid token.
async fn embedded_signing_keys_that_cannot_be_read_are_500_not_401(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let (_, owner) = create_organisation(&app, "olivia@bank.example").await;
    call(&app, Method::GET, "/api/customers", Some(&owner), None).await.expect(200);
    let k = key();
    let body = json!({ "customerRef": "c-1" });

    // Past the 30 s a node keeps its copy of the keys, the next request reads them again.
    app.clock.advance_millis(30_001);
    let (read, write) = while_broken(&app, "signing_keys", async || {
        (
            call(&app, Method::GET, "/api/customers", Some(&owner), None).await,
            send(&app, &owner, Method::POST, "/api/customers", &k, &body).await,
        )
    })
    .await;
    assert_system_error(&read, "INTERNAL_ERROR");
    assert_failed_and_released(&app, &write, &k).await;
    assert_eq!(app.db.count("customers", "").await, 0);

    assert_fresh(&send(&app, &owner, Method::POST, "/api/customers", &k, &body).await, 201);
    assert_replayed(&send(&app, &owner, Method::POST, "/api/customers", &k, &body).await, 201);
    assert_eq!(app.db.count("customers", "").await, 1);
}

// ---------------------------------------------------------------------------------------------
// Identity: roles and sign-in
// ---------------------------------------------------------------------------------------------

async fn identity_lookups_that_fail_are_500_and_their_keys_work_once_the_store_is_back(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let email = "olivia@bank.example";
    let (tenant, owner) = create_organisation(&app, email).await;

    // An invitation's role cannot be looked up: not "Role ADMIN not found" (404).
    let users = format!("/api/tenants/{tenant}/users");
    let invitation =
        json!({ "email": "ivan@bank.example", "firstName": "Ivan", "lastName": "Tester", "roleName": "ADMIN" });
    let k = key();
    let failed =
        while_broken(&app, "roles", async || send(&app, &owner, Method::POST, &users, &k, &invitation).await).await;
    assert_failed_and_released(&app, &failed, &k).await;
    assert_eq!(app.db.count("users", "email = 'ivan@bank.example'").await, 0);
    let invited = send(&app, &owner, Method::POST, &users, &k, &invitation).await;
    assert_fresh(&invited, 200);
    assert_eq!(invited.body["status"], "INVITED", "{}", invited.body);
    assert_eq!(invited.body["role"], "ADMIN", "{}", invited.body);
    assert_replayed(&send(&app, &owner, Method::POST, &users, &k, &invitation).await, 200);
    assert_eq!(app.db.count("users", "email = 'ivan@bank.example'").await, 1, "invited once");

    // A machine client's role, likewise.
    let clients = format!("/api/tenants/{tenant}/clients");
    let client = json!({ "name": "settlement bot", "roleName": "USER" });
    let k = key();
    let failed =
        while_broken(&app, "roles", async || send(&app, &owner, Method::POST, &clients, &k, &client).await).await;
    assert_failed_and_released(&app, &failed, &k).await;
    assert_eq!(app.db.count("machine_clients", "name = 'settlement bot'").await, 0);
    let created = send(&app, &owner, Method::POST, &clients, &k, &client).await;
    assert_fresh(&created, 201);
    assert_eq!(created.body["role"], "USER", "{}", created.body);
    assert_replayed(&send(&app, &owner, Method::POST, &clients, &k, &client).await, 201);
    assert_eq!(app.db.count("machine_clients", "name = 'settlement bot'").await, 1, "created once");

    // A sign-in whose user cannot be looked up is no "Invalid credentials." (401).
    let refused = while_broken(&app, "users", async || login(&app, email, NEW_PASSWORD).await).await;
    assert_system_error(&refused, "INTERNAL_ERROR");
    login(&app, email, NEW_PASSWORD).await.expect(200);
}

backends!(
    a_submission_whose_contract_cannot_be_read_is_500_and_its_key_works_once_the_store_is_back,
    an_account_registration_whose_contract_cannot_be_read_is_500_and_its_key_works_once_the_store_is_back,
    a_balance_that_cannot_be_read_is_500_never_404_or_zero,
    a_caller_that_cannot_be_resolved_is_500_not_401_or_403,
    embedded_signing_keys_that_cannot_be_read_are_500_not_401,
    identity_lookups_that_fail_are_500_and_their_keys_work_once_the_store_is_back,
);
