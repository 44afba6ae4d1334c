//! The resources the contract, account and transaction areas start from, made over HTTP as an
//! integrator makes them: an ACTIVE contract, a customer, an ACTIVE account with its wallet.

use serde_json::{Value, json};
use tokenops_testkit::{Tenant, TestApp};

/// `0x` and 40 lower-case hex digits.
#[track_caller]
pub fn assert_address(value: &Value) {
    let text = value.as_str().unwrap_or_else(|| panic!("address is not a string: {value}"));
    assert!(
        text.len() == 42
            && text.starts_with("0x")
            && text[2..].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
        "{text:?} is not an address"
    );
}

/// Registers `asset`'s contract as `tenant` and runs its deployment: ACTIVE, with an address.
pub async fn active_contract_as(app: &TestApp, tenant: &Tenant, asset: &str) -> Value {
    app.post_as(tenant, "/api/contracts", &json!({ "assetId": asset })).await.expect(201);
    app.drain_jobs().await;
    let contract = app.get_as(tenant, &format!("/api/contracts/{asset}")).await;
    contract.expect(200);
    assert_eq!(contract.body["status"], "ACTIVE", "{}", contract.body);
    assert_address(&contract.body["contractAddress"]);
    contract.body
}

pub async fn active_contract(app: &TestApp, asset: &str) -> Value {
    active_contract_as(app, &app.tenant, asset).await
}

pub async fn customer_as(app: &TestApp, tenant: &Tenant, customer_ref: &str) {
    app.post_as(tenant, "/api/customers", &json!({ "customerRef": customer_ref })).await.expect(201);
}

pub async fn customer(app: &TestApp, customer_ref: &str) {
    customer_as(app, &app.tenant, customer_ref).await;
}

/// Registers an account as `tenant` and runs its provisioning: ACTIVE, with a wallet.
pub async fn active_account_as(
    app: &TestApp,
    tenant: &Tenant,
    account_ref: &str,
    customer_ref: &str,
    asset: &str,
) -> Value {
    let body = json!({ "accountRef": account_ref, "customerRef": customer_ref, "assetId": asset });
    app.post_as(tenant, "/api/accounts", &body).await.expect(201);
    app.drain_jobs().await;
    let account = app.get_as(tenant, &format!("/api/accounts/{account_ref}")).await;
    account.expect(200);
    assert_eq!(account.body["status"], "ACTIVE", "{}", account.body);
    assert_address(&account.body["walletAddress"]);
    account.body
}

pub async fn active_account(app: &TestApp, account_ref: &str, customer_ref: &str, asset: &str) -> Value {
    active_account_as(app, &app.tenant, account_ref, customer_ref, asset).await
}
