//! Contracts, accounts and balances over HTTP (spec: Resources/Account, Token contract, Balance;
//! States and transitions/Account; Endpoints/Customers, accounts, contracts; Errors/Customers and
//! accounts, Contracts, and the balances rows of Token operations and balances), on both stores
//! with the embedded ledger: a contract is deployed (or an existing token adopted) in the
//! background and becomes ACTIVE or FAILED; an account is provisioned in the background and gets
//! its wallet, or FAILED with a reason; balances are read from the ledger. The last tests run the
//! same flow once on anvil (`TOKENOPS_LEDGER=evm`), where the ledger can really go away.

use reqwest::Method;
use serde_json::{Value, json};
use tokenops_app::clock::Clock;
use tokenops_testkit::anvil::Anvil;
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

use crate::fixtures::{
    active_account, active_account_as, active_contract, active_contract_as, assert_address, customer, customer_as,
};
use crate::support::{
    assert_bad_keys_refused, assert_bodies_refused, assert_body_texts_refused, assert_empty_style_a, assert_error,
    assert_get_refused, assert_iso_utc, assert_refused, assert_retry_after, drain_past_three_attempts, key, strings,
    three_attempts, write_correlated, write_in_flight,
};

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The contract of `asset` as `tenant` reads it.
async fn contract_as(app: &TestApp, tenant: &Tenant, asset: &str) -> Value {
    let reply = app.get_as(tenant, &format!("/api/contracts/{asset}")).await;
    reply.expect(200);
    reply.body
}

async fn contract(app: &TestApp, asset: &str) -> Value {
    contract_as(app, &app.tenant, asset).await
}

/// Registers a contract that adopts `address` and runs the adoption.
async fn adopted_contract_as(app: &TestApp, tenant: &Tenant, asset: &str, address: &str) -> Value {
    let created = app.post_as(tenant, "/api/contracts", &json!({ "assetId": asset, "contractAddress": address })).await;
    created.expect(201);
    assert_eq!(created.body["status"], "PENDING");
    app.drain_jobs().await;
    contract_as(app, tenant, asset).await
}

async fn set_customer_status(app: &TestApp, customer_ref: &str, status: &str) -> Reply {
    let reply = app.patch(&format!("/api/customers/{customer_ref}"), &json!({ "status": status })).await;
    reply.expect(200);
    reply
}

fn account_body(account_ref: &str, customer_ref: &str, asset: &str) -> Value {
    json!({ "accountRef": account_ref, "customerRef": customer_ref, "assetId": asset })
}

async fn register_as(app: &TestApp, tenant: &Tenant, account_ref: &str, customer_ref: &str, asset: &str) -> Reply {
    app.post_as(tenant, "/api/accounts", &account_body(account_ref, customer_ref, asset)).await
}

async fn register(app: &TestApp, account_ref: &str, customer_ref: &str, asset: &str) -> Reply {
    register_as(app, &app.tenant, account_ref, customer_ref, asset).await
}

/// Registers an account: 201, PENDING, no wallet yet.
async fn pending_account(app: &TestApp, account_ref: &str, customer_ref: &str, asset: &str) -> Value {
    let reply = register(app, account_ref, customer_ref, asset).await;
    reply.expect(201);
    assert_eq!(reply.body["status"], "PENDING", "{}", reply.body);
    reply.body
}

async fn account_as(app: &TestApp, tenant: &Tenant, account_ref: &str) -> Value {
    let reply = app.get_as(tenant, &format!("/api/accounts/{account_ref}")).await;
    reply.expect(200);
    reply.body
}

async fn account(app: &TestApp, account_ref: &str) -> Value {
    account_as(app, &app.tenant, account_ref).await
}

/// A USD contract, customer `c-1` and its ACTIVE account `a-1`.
async fn one_active_account(app: &TestApp) -> Value {
    active_contract(app, "USD").await;
    customer(app, "c-1").await;
    active_account(app, "a-1", "c-1", "USD").await
}

async fn set_account_status(app: &TestApp, account_ref: &str, status: &str) -> Reply {
    app.patch(&format!("/api/accounts/{account_ref}"), &json!({ "status": status })).await
}

/// Registers an account whose provisioning really fails: custody cannot store the wallet's key
/// (an injected store fault). See [`provisioning_fails`].
async fn failed_account(app: &TestApp, account_ref: &str, customer_ref: &str, asset: &str) -> Value {
    app.db.fail_inserts_into("custody_keys").await;
    pending_account(app, account_ref, customer_ref, asset).await;
    provisioning_fails(app, account_ref).await
}

/// Runs the provisioning of a PENDING account while custody's store fault is injected: every
/// attempt is retried until the app's attempts (three, see [`three_attempts`]) run out, moving
/// the clock past each backoff. Heals the fault, and returns the FAILED account.
async fn provisioning_fails(app: &TestApp, account_ref: &str) -> Value {
    for _ in 0..10 {
        app.drain_jobs().await;
        let account = account(app, account_ref).await;
        if account["status"] != "PENDING" {
            app.db.heal_inserts_into("custody_keys").await;
            assert_eq!(account["status"], "FAILED", "{account}");
            return account;
        }
        // Past the longest backoff of a third attempt (base 1 s, doubling, jitter ±20 %).
        app.clock.advance_millis(60_000);
    }
    panic!("provisioning of {account_ref} did not fail within ten backoffs");
}

/// The events of `event_type`, newest first.
async fn events(app: &TestApp, event_type: &str) -> Vec<Value> {
    events_as(app, &app.tenant, event_type).await
}

async fn events_as(app: &TestApp, tenant: &Tenant, event_type: &str) -> Vec<Value> {
    let reply = app.get_as(tenant, &format!("/api/webhook-events?type={event_type}&limit=100")).await;
    reply.expect(200);
    reply.body["items"].as_array().expect("style D items").clone()
}

/// The events of `event_type` about `account_ref`, newest first.
async fn account_events(app: &TestApp, event_type: &str, account_ref: &str) -> Vec<Value> {
    events(app, event_type).await.into_iter().filter(|e| e["resource"]["id"] == account_ref).collect()
}

/// `field` of each item of a style A page.
fn listed(reply: &Reply, field: &str) -> Vec<String> {
    strings(&reply.body["content"], field)
}

/// The list at `path` refuses, with 400, a status filter that names no status (as spelled) and
/// a page or size out of range or not a number.
async fn assert_list_refuses_an_unknown_status_and_invalid_paging(app: &TestApp, path: &str) {
    for query in [
        "status=CLOSED",
        "status=active",
        "status=",
        "page=-1",
        "page=x",
        "size=0",
        "size=101",
        "size=-1",
        "size=-5",
        "size=x",
        "size=ten",
    ] {
        assert_get_refused(app, &format!("{path}?{query}"), 400).await;
    }
}

// ---------------------------------------------------------------------------------------------
// POST /api/contracts
// ---------------------------------------------------------------------------------------------

async fn a_contract_is_registered_pending_then_deployed_active(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let created = app.post("/api/contracts", &json!({ "assetId": "usd" })).await;
    created.expect(201);
    assert_eq!(created.header("location"), Some("/api/contracts/USD"));
    assert_eq!(created.body["assetId"], "USD", "stored upper-case");
    assert_eq!(created.body["symbol"], "USD");
    assert_eq!(created.body["name"], "United States dollar", "the currency's name by default");
    assert_eq!(created.body["decimals"], 2);
    assert_eq!(created.body["status"], "PENDING");
    assert!(created.body.get("contractAddress").is_none(), "no address while PENDING: {}", created.body);
    assert!(created.body.get("failureReason").is_none());
    assert_iso_utc(&created.body["createdAt"]);
    assert_eq!(created.body["createdAt"], app.clock.now().to_iso8601());
    assert_eq!(app.get("/api/contracts/USD").await.body, created.body, "the read returns it as registered");
    assert_eq!(app.db.count("jobs", "kind = 'contract.deploy' AND status = 'queued'").await, 1);

    app.clock.advance_millis(1_000);
    app.drain_jobs().await;
    let deployed = contract(&app, "usd").await;
    assert_eq!(deployed["status"], "ACTIVE", "{deployed}");
    assert_address(&deployed["contractAddress"]);
    assert_eq!(deployed["createdAt"], created.body["createdAt"]);
    assert_eq!(deployed["updatedAt"], app.clock.now().to_iso8601(), "updatedAt is the deployment's time");
    assert!(deployed.get("failureReason").is_none());

    // Each currency with its own minor unit, and a chosen name.
    let yen = app.post("/api/contracts", &json!({ "assetId": "JPY", "name": "Tokenised yen" })).await;
    yen.expect(201);
    assert_eq!(yen.body["decimals"], 0);
    assert_eq!(yen.body["name"], "Tokenised yen");
    let dinar = app.post("/api/contracts", &json!({ "assetId": "BHD" })).await;
    dinar.expect(201);
    assert_eq!(dinar.body["decimals"], 3);
    app.drain_jobs().await;
    let yen = contract(&app, "JPY").await;
    assert_eq!(yen["status"], "ACTIVE");
    assert_ne!(yen["contractAddress"], deployed["contractAddress"], "one token per asset");
    assert_eq!(contract(&app, "BHD").await["status"], "ACTIVE");
}

/// With workers running (as `serve` runs them), a registration answers once its deployment has
/// settled: the asset is usable as soon as the answer arrives. The Idempotency-Key is optional on
/// contract writes (the spec requires it on customers, accounts, transactions and the rest, not
/// on contracts).
async fn with_workers_running_a_registration_answers_the_deployed_contract(backend: Backend) {
    let app = TestApp::spawn_with(
        backend,
        [("TOKENOPS_CONTRACT_REGISTER_WAIT_MS", "20000"), ("TOKENOPS_WORKER_POLL_MS", "50")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
    .await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let workers = tokio::spawn(app.app.jobs.clone().run(shutdown.clone()));

    let unkeyed = |method: Method, path: &str, body: Value| {
        let request = app.request(method, path).json(&body);
        async move { Reply::read(request.send().await.expect("request")).await }
    };
    let created = unkeyed(Method::POST, "/api/contracts", json!({ "assetId": "USD" })).await;
    created.expect(201);
    assert_eq!(created.header("location"), Some("/api/contracts/USD"));
    assert_eq!(created.body["status"], "ACTIVE", "{}", created.body);
    assert_address(&created.body["contractAddress"]);
    assert_eq!(app.get("/api/contracts/USD").await.body, created.body, "the answer is the contract as stored");
    // Usable at once: no polling between the answer and the first account.
    customer(&app, "c-1").await;
    app.post("/api/accounts", &json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "USD" }))
        .await
        .expect(201);
    let renamed = unkeyed(Method::PATCH, "/api/contracts/USD", json!({ "name": "Tokenised dollar" })).await;
    renamed.expect(200);
    assert_eq!(renamed.body["name"], "Tokenised dollar");

    // A replay answers what the first caller got in kind: the contract as it is now, not the
    // PENDING registration the key stored.
    let k = key();
    let first = app.write(Method::POST, "/api/contracts", &k, &json!({ "assetId": "IDR" })).await;
    first.expect(201);
    assert_eq!(first.body["status"], "ACTIVE", "{}", first.body);
    let replay = app.write(Method::POST, "/api/contracts", &k, &json!({ "assetId": "IDR" })).await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("location"), Some("/api/contracts/IDR"));
    assert_eq!(replay.body, app.get("/api/contracts/IDR").await.body, "the replay is the contract as a read shows it");

    shutdown.cancel();
    workers.await.expect("workers");
}

/// A replayed registration answers the contract as it is now (as a replayed submission answers
/// the operation as it is now): here the first answer did not wait, and was PENDING.
async fn a_replayed_registration_answers_the_contract_as_it_is_now(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let k = key();
    let first = app.write(Method::POST, "/api/contracts", &k, &json!({ "assetId": "IDR" })).await;
    first.expect(201);
    assert_eq!(first.body["status"], "PENDING", "{}", first.body);
    app.drain_jobs().await;
    app.patch("/api/contracts/IDR", &json!({ "name": "Tokenised rupiah" })).await.expect(200);
    let replay = app.write(Method::POST, "/api/contracts", &k, &json!({ "assetId": "IDR" })).await;
    replay.expect(201);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.header("location"), Some("/api/contracts/IDR"));
    let now = app.get("/api/contracts/IDR").await;
    assert_eq!(now.body["status"], "ACTIVE");
    assert_eq!(replay.body, now.body, "the replay is the contract as a read shows it");
    assert_eq!(app.db.count("contracts", "").await, 1, "the replay registered nothing");
    // A refused registration is still replayed as stored.
    let refused_key = key();
    let again = app.write(Method::POST, "/api/contracts", &refused_key, &json!({ "assetId": "IDR" })).await;
    assert_error(&again, 409);
    let replayed_refusal = app.write(Method::POST, "/api/contracts", &refused_key, &json!({ "assetId": "IDR" })).await;
    assert_eq!((replayed_refusal.status, &replayed_refusal.body), (409, &again.body));
    assert_eq!(replayed_refusal.header("idempotent-replayed"), Some("true"));
}

async fn contract_registration_with_a_missing_or_invalid_asset_id_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_bodies_refused(
        &app,
        Method::POST,
        "/api/contracts",
        &[
            json!({}),
            json!({ "name": "No asset" }),
            json!({ "assetId": null }),
            json!({ "assetId": "" }),
            json!({ "assetId": "   " }),
            json!({ "assetId": "US" }),
            json!({ "assetId": "USDX" }),
            json!({ "assetId": "ABC" }),
            json!({ "assetId": "U$D" }),
            json!({ "assetId": " USD" }),
            json!({ "assetId": "USD\t" }),
            json!({ "assetId": "XAU" }),
            json!({ "assetId": "XAG" }),
            json!({ "assetId": 840 }),
            json!({ "assetId": ["USD"] }),
        ],
    )
    .await;
    let gold = app.post("/api/contracts", &json!({ "assetId": "XAU" })).await;
    assert!(gold.body["message"].as_str().unwrap_or_default().contains("assetId"), "{}", gold.body);
    assert_eq!(app.db.count("contracts", "").await, 0, "no refused registration created a contract");
    assert_eq!(app.db.count("jobs", "kind = 'contract.deploy'").await, 0);
}

async fn contract_registration_with_an_invalid_contract_address_or_name_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let hex40 = "ab".repeat(20);
    assert_bodies_refused(
        &app,
        Method::POST,
        "/api/contracts",
        &[
            json!({ "assetId": "USD", "contractAddress": "" }),
            json!({ "assetId": "USD", "contractAddress": "0x123" }),
            json!({ "assetId": "USD", "contractAddress": "not an address" }),
            json!({ "assetId": "USD", "contractAddress": hex40 }),
            json!({ "assetId": "USD", "contractAddress": format!("0x{}", "g".repeat(40)) }),
            json!({ "assetId": "USD", "contractAddress": format!("0x{hex40}00") }),
            json!({ "assetId": "USD", "contractAddress": 42 }),
            json!({ "assetId": "USD", "name": "" }),
            json!({ "assetId": "USD", "name": "   " }),
            json!({ "assetId": "USD", "name": "n".repeat(101) }),
        ],
    )
    .await;
    assert_eq!(app.db.count("contracts", "").await, 0);
}

async fn an_existing_contract_is_409_with_asset_id_and_existing_status(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/contracts", &json!({ "assetId": "USD" })).await.expect(201);
    let pending = app.post("/api/contracts", &json!({ "assetId": "usd" })).await;
    assert_error(&pending, 409);
    assert_eq!(pending.body["assetId"], "USD", "{}", pending.body);
    assert_eq!(pending.body["existingStatus"], "PENDING");
    assert!(pending.header("retry-after").is_none(), "an existing contract is not a retry case");

    app.drain_jobs().await;
    let active = app.post("/api/contracts", &json!({ "assetId": "USD", "name": "Other" })).await;
    assert_error(&active, 409);
    assert_eq!(active.body["existingStatus"], "ACTIVE");

    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
    let inactive = app.post("/api/contracts", &json!({ "assetId": "USD" })).await;
    assert_error(&inactive, 409);
    assert_eq!(inactive.body["assetId"], "USD");
    assert_eq!(inactive.body["existingStatus"], "INACTIVE");

    assert_eq!(app.db.count("contracts", "").await, 1);
    assert_eq!(app.db.count("jobs", "kind = 'contract.deploy'").await, 1, "no second deployment");
    assert_eq!(contract(&app, "USD").await["name"], "United States dollar", "the refused registration changed nothing");
}

async fn adopting_an_address_without_a_token_fails_and_the_asset_can_be_registered_again(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let nowhere = "0x000000000000000000000000000000000000dead";
    let failed = adopted_contract_as(&app, &app.tenant, "USD", nowhere).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    let reason = failed["failureReason"].as_str().unwrap_or_default();
    assert!(reason.contains("no token contract"), "the reason says why: {failed}");
    assert!(failed.get("contractAddress").is_none(), "a FAILED contract has no address: {failed}");
    let listed_failed = app.get("/api/contracts?status=FAILED").await;
    listed_failed.expect(200);
    assert_eq!(listed(&listed_failed, "assetId"), ["USD"]);

    // A FAILED contract does not let accounts use the asset, and cannot be switched.
    customer(&app, "c-1").await;
    assert_error(&register(&app, "a-1", "c-1", "USD").await, 404);
    assert_error(&app.patch("/api/contracts/USD", &json!({ "status": "ACTIVE" })).await, 422);
    assert_error(&app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await, 422);

    // Registered again: PENDING without the old reason, then deployed.
    app.clock.advance_millis(1_000);
    let again = app.post("/api/contracts", &json!({ "assetId": "USD" })).await;
    again.expect(201);
    assert_eq!(again.body["status"], "PENDING");
    assert!(again.body.get("failureReason").is_none(), "{}", again.body);
    assert!(again.body.get("contractAddress").is_none(), "{}", again.body);
    app.drain_jobs().await;
    let deployed = contract(&app, "USD").await;
    assert_eq!(deployed["status"], "ACTIVE", "{deployed}");
    assert_address(&deployed["contractAddress"]);
    assert_ne!(deployed["contractAddress"], nowhere);
    assert!(deployed.get("failureReason").is_none(), "{deployed}");
    assert_eq!(app.db.count("contracts", "").await, 1, "the same contract, registered again");
    pending_account(&app, "a-1", "c-1", "USD").await;
}

/// A token already on the ledger (deployed by this service's issuer, say by an earlier
/// installation) is adopted; a token serves one contract of one organisation, so no other
/// organisation may adopt it too (it could mint on the first one's currency).
async fn an_existing_token_is_adopted_and_serves_one_contract_only(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let spec = tokenops_ledger::TokenSpec { name: "US Dollar".into(), symbol: "USD".into(), decimals: 2 };
    let token = app.app.ledger.deploy_token(&spec).await.expect("deploy a token outside any contract");
    let address = format!("{token:#x}");

    // Hex digits in any case name the same address.
    let shouted = format!("0x{}", address[2..].to_ascii_uppercase());
    let adopted = adopted_contract_as(&app, &app.tenant, "USD", &shouted).await;
    assert_eq!(adopted["status"], "ACTIVE", "{adopted}");
    assert_eq!(adopted["contractAddress"], address.as_str(), "the adopted token's address");
    assert_eq!(adopted["decimals"], 2);

    let other = app.new_tenant();
    let refused = adopted_contract_as(&app, &other, "USD", &address).await;
    assert_eq!(refused["status"], "FAILED", "{refused}");
    assert!(refused["failureReason"].as_str().unwrap_or_default().contains("another contract uses it"), "{refused}");
    assert_eq!(app.db.count("contracts", "").await, 2);

    // The adopting organisation uses it like a deployed one.
    customer_as(&app, &app.tenant, "c-1").await;
    active_account_as(&app, &app.tenant, "a-1", "c-1", "USD").await;
    let balance = app.get_as(&app.tenant, "/api/accounts/a-1/balances").await;
    balance.expect(200);
    assert_eq!(balance.body["total"], "0.00");
}

async fn adopting_a_token_with_other_decimals_or_a_non_token_address_fails_with_a_reason(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let yen = active_contract(&app, "JPY").await;
    let yen_address = yen["contractAddress"].as_str().expect("address").to_owned();
    let other = app.new_tenant();

    // USD needs 2 decimals; the yen token has none.
    let wrong_decimals = adopted_contract_as(&app, &other, "USD", &yen_address).await;
    assert_eq!(wrong_decimals["status"], "FAILED", "{wrong_decimals}");
    assert!(
        wrong_decimals["failureReason"].as_str().unwrap_or_default().contains("decimals"),
        "the reason names the decimals: {wrong_decimals}"
    );

    // An account's wallet is an address, but no token.
    customer(&app, "c-1").await;
    let wallet = active_account(&app, "a-1", "c-1", "JPY").await["walletAddress"].as_str().expect("wallet").to_owned();
    let not_a_token = adopted_contract_as(&app, &other, "EUR", &wallet).await;
    assert_eq!(not_a_token["status"], "FAILED", "{not_a_token}");
    assert!(not_a_token["failureReason"].as_str().is_some_and(|r| !r.is_empty()), "{not_a_token}");
    assert!(not_a_token.get("contractAddress").is_none(), "{not_a_token}");
}

/// A token is one currency: adopting the USD token for EUR would put EUR balances on the USD
/// token (both have two decimals, so the decimals check alone lets it through).
async fn adopting_the_token_of_another_currency_fails(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let dollar = active_contract(&app, "USD").await;
    let address = dollar["contractAddress"].as_str().expect("address");
    let euro = adopted_contract_as(&app, &app.tenant, "EUR", address).await;
    assert_eq!(euro["status"], "FAILED", "EUR must not adopt the USD token: {euro}");
    assert!(euro.get("contractAddress").is_none(), "{euro}");
}

/// As for accounts: a deployment whose outcome cannot be written until its attempts are spent
/// must not leave the contract PENDING for ever (409 to a new registration, 422 to a PATCH).
async fn a_contract_does_not_stay_pending_after_its_deployment_job_ran_out_of_attempts(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    app.post("/api/contracts", &json!({ "assetId": "USD" })).await.expect(201);
    // The deployment's outcome commits with its audit record: make that insert fail.
    app.db.fail_inserts_into("audit_records").await;
    drain_past_three_attempts(&app).await;
    app.db.heal_inserts_into("audit_records").await;
    drain_past_three_attempts(&app).await;
    let contract = contract(&app, "USD").await;
    assert_ne!(
        contract["status"],
        "PENDING",
        "the contract is stranded PENDING ({} dead deployment jobs): {contract}",
        app.db.count("jobs", "kind = 'contract.deploy' AND status = 'dead'").await
    );
}

// ---------------------------------------------------------------------------------------------
// PATCH /api/contracts/{assetId}
// ---------------------------------------------------------------------------------------------

async fn contract_patch_switches_between_active_and_inactive(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let deployed = active_contract(&app, "USD").await;
    app.clock.advance_millis(1_000);

    let inactive = app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await;
    inactive.expect(200);
    assert_eq!(inactive.body["status"], "INACTIVE");
    assert_eq!(inactive.body["contractAddress"], deployed["contractAddress"]);
    assert_eq!(inactive.body["updatedAt"], app.clock.now().to_iso8601());
    assert_eq!(contract(&app, "USD").await, inactive.body);

    // The path's asset is case-insensitive.
    let active = app.patch("/api/contracts/usd", &json!({ "status": "ACTIVE" })).await;
    active.expect(200);
    assert_eq!(active.body["status"], "ACTIVE");
    assert_eq!(active.body["assetId"], "USD");

    let same = app.patch("/api/contracts/USD", &json!({ "status": "ACTIVE" })).await;
    same.expect(200);
    assert_eq!(same.body["status"], "ACTIVE");

    let renamed = app.patch("/api/contracts/USD", &json!({ "name": "Tokenised dollar" })).await;
    renamed.expect(200);
    assert_eq!(renamed.body["name"], "Tokenised dollar");
    assert_eq!(renamed.body["status"], "ACTIVE", "a rename leaves the status");
}

async fn contract_patch_with_an_unknown_status_or_nothing_to_change_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    assert_bodies_refused(
        &app,
        Method::PATCH,
        "/api/contracts/USD",
        &[
            json!({}),
            json!({ "status": null }),
            json!({ "status": "PENDING" }),
            json!({ "status": "FAILED" }),
            json!({ "status": "CLOSED" }),
            json!({ "status": "active" }),
            json!({ "status": "" }),
            json!({ "status": 1 }),
            json!({ "name": "" }),
        ],
    )
    .await;
    assert_eq!(contract(&app, "USD").await["status"], "ACTIVE");
}

async fn contract_patch_without_a_contract_for_the_asset_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    for path in ["/api/contracts/EUR", "/api/contracts/eur", "/api/contracts/ZZZ", "/api/contracts/U%20SD"] {
        let reply = app.patch(path, &json!({ "status": "INACTIVE" })).await;
        assert_refused(&reply, 404, &format!("PATCH {path}"));
    }
    // Another organisation's contract is not found either.
    let other = app.new_tenant();
    assert_error(&app.patch_as(&other, "/api/contracts/USD", &json!({ "status": "INACTIVE" })).await, 404);
    assert_error(&app.get_as(&other, "/api/contracts/USD").await, 404);
    assert_eq!(app.get_as(&other, "/api/contracts").await.body["totalElements"], 0);
    assert_eq!(contract(&app, "USD").await["status"], "ACTIVE");
    assert_eq!(app.db.count("contracts", "").await, 1, "a PATCH never creates a contract");
    assert_error(&app.get("/api/contracts/EUR").await, 404);
}

async fn contract_patch_of_a_pending_contract_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.post("/api/contracts", &json!({ "assetId": "USD" })).await.expect(201);
    for status in ["ACTIVE", "INACTIVE"] {
        let reply = app.patch("/api/contracts/USD", &json!({ "status": status })).await;
        assert_refused(&reply, 422, &format!("PENDING → {status}"));
    }
    assert_eq!(contract(&app, "USD").await["status"], "PENDING");
    app.drain_jobs().await;
    assert_eq!(contract(&app, "USD").await["status"], "ACTIVE", "the refused changes did not stop the deployment");
    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// GET /api/contracts
// ---------------------------------------------------------------------------------------------

async fn contract_list_is_style_a_oldest_first_with_asset_and_status_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_empty_style_a(&app, "/api/contracts").await;

    let assets = ["JPY", "USD", "EUR", "GBP", "CHF"];
    for asset in assets {
        app.post("/api/contracts", &json!({ "assetId": asset })).await.expect(201);
        app.clock.advance_millis(10);
    }
    let pending = app.get("/api/contracts?status=PENDING").await;
    pending.expect(200);
    assert_eq!(listed(&pending, "assetId"), assets, "oldest first");
    app.drain_jobs().await;
    app.patch("/api/contracts/EUR", &json!({ "status": "INACTIVE" })).await.expect(200);

    let all = app.get("/api/contracts").await;
    all.expect(200);
    assert_eq!(listed(&all, "assetId"), assets);
    assert_eq!((&all.body["page"], &all.body["size"]), (&json!(0), &json!(20)));
    assert_eq!((&all.body["totalElements"], &all.body["totalPages"]), (&json!(5), &json!(1)));
    let page = app.get("/api/contracts?page=1&size=2").await;
    page.expect(200);
    assert_eq!(listed(&page, "assetId"), ["EUR", "GBP"]);
    assert_eq!((&page.body["totalElements"], &page.body["totalPages"]), (&json!(5), &json!(3)));

    for filter in ["assetId=usd", "assetId=USD", "assetId=Usd"] {
        let one = app.get(&format!("/api/contracts?{filter}")).await;
        one.expect(200);
        assert_eq!(listed(&one, "assetId"), ["USD"], "{filter}");
    }
    let none = app.get("/api/contracts?assetId=ZZZ").await;
    none.expect(200);
    assert_eq!(none.body["totalElements"], 0);
    let inactive = app.get("/api/contracts?status=INACTIVE").await;
    assert_eq!(listed(&inactive, "assetId"), ["EUR"]);
    let active = app.get("/api/contracts?status=ACTIVE").await;
    assert_eq!(listed(&active, "assetId"), ["JPY", "USD", "GBP", "CHF"]);
    assert_eq!(app.get("/api/contracts?status=PENDING").await.body["totalElements"], 0);
    let both = app.get("/api/contracts?assetId=eur&status=ACTIVE").await;
    assert_eq!(both.body["totalElements"], 0, "filters combine");
}

async fn contract_list_refuses_an_unknown_status_and_invalid_paging(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    assert_list_refuses_an_unknown_status_and_invalid_paging(&app, "/api/contracts").await;
    app.get("/api/contracts?size=100&page=7").await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// Only an ACTIVE contract lets accounts use its asset
// ---------------------------------------------------------------------------------------------

async fn only_an_active_contract_lets_accounts_use_the_asset(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    customer(&app, "c-2").await;

    // PENDING: not yet.
    app.post("/api/contracts", &json!({ "assetId": "EUR" })).await.expect(201);
    let pending = register(&app, "a-eur", "c-1", "EUR").await;
    assert_error(&pending, 404);

    // INACTIVE: no new accounts, no balances.
    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
    let refused = register(&app, "a-2", "c-2", "USD").await;
    assert_error(&refused, 404);
    assert_error(&app.get("/api/accounts/a-1/balances").await, 404);
    assert_eq!(app.db.count("accounts", "").await, 1);

    // ACTIVE again: both work.
    app.patch("/api/contracts/USD", &json!({ "status": "ACTIVE" })).await.expect(200);
    app.get("/api/accounts/a-1/balances").await.expect(200);
    pending_account(&app, "a-2", "c-2", "USD").await;
}

// ---------------------------------------------------------------------------------------------
// POST /api/accounts
// ---------------------------------------------------------------------------------------------

async fn an_account_is_provisioned_and_its_balance_read(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let contract = app.post("/api/contracts", &json!({ "assetId": "usd" })).await;
    contract.expect(201);
    assert_eq!(contract.body["assetId"], "USD");
    assert_eq!(contract.body["status"], "PENDING");
    assert_eq!(contract.body["decimals"], 2);
    assert_eq!(contract.header("location"), Some("/api/contracts/USD"));
    app.drain_jobs().await;
    let contract = app.get("/api/contracts/USD").await;
    contract.expect(200);
    assert_eq!(contract.body["status"], "ACTIVE", "{}", contract.body);
    assert!(contract.body["contractAddress"].as_str().is_some_and(|a| a.starts_with("0x") && a.len() == 42));

    app.post("/api/customers", &json!({ "customerRef": "c-1" })).await.expect(201);
    let account =
        app.post("/api/accounts", &json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "USD" })).await;
    account.expect(201);
    assert_eq!(account.body["status"], "PENDING");
    assert!(account.body.get("walletAddress").is_none());
    app.get("/api/accounts/a-1/balances").await.expect(422);
    app.drain_jobs().await;
    let account = app.get("/api/accounts/a-1").await;
    assert_eq!(account.body["status"], "ACTIVE", "{}", account.body);
    assert!(account.body["walletAddress"].as_str().is_some_and(|a| a.starts_with("0x") && a.len() == 42));
    let balance = app.get("/api/accounts/a-1/balances").await;
    balance.expect(200);
    assert_eq!(balance.body["total"], "0.00");
    assert_eq!(balance.body["available"], "0.00");
    assert_eq!(balance.body["locked"], "0.00");
    assert_eq!(balance.body["customerRef"], "c-1");
    let events = app.get("/api/webhook-events?type=account.provisioned").await;
    events.expect(200);
    assert_eq!(events.body["items"].as_array().map(Vec::len), Some(1), "{}", events.body);
}

async fn registering_an_account_is_201_pending_with_location_then_active_with_a_wallet(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let created = register(&app, "acc-0001", "c-1", "usd").await;
    created.expect(201);
    assert_eq!(created.header("location"), Some("/api/accounts/acc-0001"));
    assert_eq!(created.body["accountRef"], "acc-0001");
    assert_eq!(created.body["customerRef"], "c-1");
    assert_eq!(created.body["assetId"], "USD", "the asset's code, upper-case");
    assert_eq!(created.body["status"], "PENDING");
    for absent in ["walletAddress", "failureReason", "provisionedAt"] {
        assert!(created.body.get(absent).is_none(), "no {absent} while PENDING: {}", created.body);
    }
    assert_iso_utc(&created.body["createdAt"]);
    assert_eq!(created.body["createdAt"], app.clock.now().to_iso8601());
    assert_eq!(created.body["createdAt"], created.body["updatedAt"]);
    assert_eq!(account(&app, "acc-0001").await, created.body, "the read returns it as registered");
    assert_eq!(app.db.count("jobs", "kind = 'account.provision' AND status = 'queued'").await, 1);

    app.clock.advance_millis(2_000);
    app.drain_jobs().await;
    let active = account(&app, "acc-0001").await;
    assert_eq!(active["status"], "ACTIVE", "{active}");
    assert_address(&active["walletAddress"]);
    assert_eq!(active["provisionedAt"], app.clock.now().to_iso8601());
    assert_eq!(active["updatedAt"], app.clock.now().to_iso8601());
    assert_eq!(active["createdAt"], created.body["createdAt"]);
    assert!(active.get("failureReason").is_none());
    let wallet = active["walletAddress"].as_str().expect("wallet");
    assert_eq!(app.db.count("custody_keys", &format!("address = '{wallet}'")).await, 1, "custody holds its key");

    // The longest reference of the whole alphabet.
    let longest = format!("{}{}", "Az09._:-", "x".repeat(56));
    let long = register(&app, &longest, "c-1", "USD").await;
    long.expect(201);
    assert_eq!(long.body["accountRef"], longest.as_str());
    app.get(&format!("/api/accounts/{longest}")).await.expect(200);
}

async fn account_registration_with_a_missing_or_invalid_field_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let long = "x".repeat(65);
    assert_bodies_refused(
        &app,
        Method::POST,
        "/api/accounts",
        &[
            json!({}),
            json!({ "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "a-1", "assetId": "USD" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1" }),
            json!({ "accountRef": null, "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "a b", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "a/b", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "..", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": ".", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "käse", "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": long, "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": 7, "customerRef": "c-1", "assetId": "USD" }),
            json!({ "accountRef": "a-1", "customerRef": "", "assetId": "USD" }),
            json!({ "accountRef": "a-1", "customerRef": "c 1", "assetId": "USD" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "ABC" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "US" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": "XAU" }),
            json!({ "accountRef": "a-1", "customerRef": "c-1", "assetId": 840 }),
        ],
    )
    .await;
    assert_body_texts_refused(&app, "/api/accounts", &[r#"["a-1"]"#, "42", "null", r#"{"accountRef": "a-1""#, ""])
        .await;
    // Every field found wrong is named at once.
    let all_wrong = app.post("/api/accounts", &json!({ "accountRef": "a b", "assetId": "XAU" })).await;
    assert_eq!(all_wrong.status, 400, "{}", all_wrong.body);
    let fields: Vec<&str> =
        all_wrong.body["details"].as_array().expect("details").iter().filter_map(|d| d["field"].as_str()).collect();
    assert_eq!(fields, ["accountRef", "customerRef", "assetId"], "{}", all_wrong.body);
    assert_eq!(app.db.count("accounts", "").await, 0, "no refused registration created an account");
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 0);
}

async fn account_idempotency_key_missing_blank_or_over_255_is_400(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    let body = account_body("a-2", "c-1", "USD");
    let patch = json!({ "status": "INACTIVE" });
    for (method, path, body) in [(Method::POST, "/api/accounts", &body), (Method::PATCH, "/api/accounts/a-1", &patch)] {
        assert_bad_keys_refused(&app, method, path, body).await;
    }
    assert_eq!(app.db.count("accounts", "").await, 1, "no account registered under a bad key");
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE", "no change under a bad key");
    let longest = "k".repeat(255);
    app.write(Method::POST, "/api/accounts", &longest, &body).await.expect(201);
    app.write(Method::PATCH, "/api/accounts/a-1", &longest, &patch).await.expect(200);
}

async fn account_registration_for_a_missing_customer_or_an_asset_without_active_contract_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    app.post("/api/contracts", &json!({ "assetId": "JPY" })).await.expect(201); // PENDING

    let no_customer = register(&app, "a-1", "c-404", "USD").await;
    assert_error(&no_customer, 404);
    let no_contract = register(&app, "a-1", "c-1", "EUR").await;
    assert_error(&no_contract, 404);
    let pending_contract = register(&app, "a-1", "c-1", "JPY").await;
    assert_error(&pending_contract, 404);
    // Another organisation's customer is no customer here.
    let other = app.new_tenant();
    customer_as(&app, &other, "c-theirs").await;
    assert_error(&register(&app, "a-1", "c-theirs", "USD").await, 404);
    // Nor is another organisation's contract a contract here.
    active_contract_as(&app, &other, "GBP").await;
    assert_error(&register(&app, "a-1", "c-1", "GBP").await, 404);

    assert_eq!(app.db.count("accounts", "").await, 0);
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 0);
}

async fn an_existing_account_ref_is_409_with_account_ref_and_existing_status(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    active_contract(&app, "EUR").await;
    customer(&app, "c-1").await;
    customer(&app, "c-2").await;

    pending_account(&app, "a-1", "c-1", "USD").await;
    let pending = register(&app, "a-1", "c-1", "USD").await;
    assert_error(&pending, 409);
    assert_eq!(pending.body["accountRef"], "a-1");
    assert_eq!(pending.body["existingStatus"], "PENDING");
    assert!(pending.header("retry-after").is_none(), "an existing account is not a retry case");

    app.drain_jobs().await;
    // Another customer or asset does not make it another account.
    let active = register(&app, "a-1", "c-2", "EUR").await;
    assert_error(&active, 409);
    assert_eq!(active.body["accountRef"], "a-1");
    assert_eq!(active.body["existingStatus"], "ACTIVE");

    set_account_status(&app, "a-1", "INACTIVE").await.expect(200);
    let inactive = register(&app, "a-1", "c-1", "USD").await;
    assert_error(&inactive, 409);
    assert_eq!(inactive.body["existingStatus"], "INACTIVE");

    assert_eq!(app.db.count("accounts", "").await, 1);
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 1, "no second provisioning");
    let read = account(&app, "a-1").await;
    assert_eq!((&read["customerRef"], &read["assetId"]), (&json!("c-1"), &json!("USD")), "unchanged: {read}");
}

async fn concurrent_registrations_of_one_account_ref_create_one_account(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let body = account_body("a-race", "c-1", "USD");
    let replies = futures::future::join_all((0..10).map(|_| app.post("/api/accounts", &body))).await;
    assert_eq!(replies.iter().filter(|r| r.status == 201).count(), 1, "exactly one registration wins");
    for reply in replies.iter().filter(|r| r.status != 201) {
        assert_error(reply, 409);
        assert_eq!(reply.body["accountRef"], "a-race");
        assert_eq!(reply.body["existingStatus"], "PENDING");
    }
    assert_eq!(app.db.count("accounts", "").await, 1);
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 1);
    app.drain_jobs().await;
    assert_eq!(account_events(&app, "account.provisioned", "a-race").await.len(), 1);
}

async fn account_writes_with_a_key_in_flight_are_409_with_retry_after(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;

    let body = account_body("a-2", "c-1", "USD");
    let reply = write_in_flight(&app, "account.create", Method::POST, "/api/accounts", &body).await;
    assert_error(&reply, 409);
    assert_retry_after(&reply);
    assert_eq!(app.db.count("accounts", "").await, 1, "nothing registered while the key is in flight");

    let patch = json!({ "status": "INACTIVE" });
    let reply = write_in_flight(&app, "account.update_status", Method::PATCH, "/api/accounts/a-1", &patch).await;
    assert_error(&reply, 409);
    assert_retry_after(&reply);
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE", "no change while in flight");
}

async fn account_registration_for_an_inactive_customer_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    set_customer_status(&app, "c-1", "INACTIVE").await;
    let reply = register(&app, "a-1", "c-1", "USD").await;
    assert_error(&reply, 422);
    app.post("/api/customers", &json!({ "customerRef": "c-born-inactive", "status": "INACTIVE" })).await.expect(201);
    assert_error(&register(&app, "a-2", "c-born-inactive", "USD").await, 422);
    assert_eq!(app.db.count("accounts", "").await, 0);

    // Reactivated, the customer may open accounts again.
    set_customer_status(&app, "c-1", "ACTIVE").await;
    pending_account(&app, "a-1", "c-1", "USD").await;
}

async fn account_writes_reusing_a_key_with_a_different_payload_are_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    customer(&app, "c-2").await;
    let k = key();
    app.write(Method::POST, "/api/accounts", &k, &account_body("a-2", "c-1", "USD")).await.expect(201);
    for other in [account_body("a-3", "c-1", "USD"), account_body("a-2", "c-2", "USD")] {
        let reply = app.write(Method::POST, "/api/accounts", &k, &other).await;
        assert_refused(&reply, 422, &format!("{other} under a used key"));
    }
    assert_eq!(app.db.count("accounts", "").await, 2);
    assert_error(&app.get("/api/accounts/a-3").await, 404);

    let p = key();
    app.write(Method::PATCH, "/api/accounts/a-1", &p, &json!({ "status": "INACTIVE" })).await.expect(200);
    let other_status = app.write(Method::PATCH, "/api/accounts/a-1", &p, &json!({ "status": "ACTIVE" })).await;
    assert_error(&other_status, 422);
    assert_eq!(account(&app, "a-1").await["status"], "INACTIVE");
}

async fn an_idempotent_replay_returns_the_same_response(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    let k = key();
    let body = account_body("a-2", "c-1", "USD");
    let first = app.write(Method::POST, "/api/accounts", &k, &body).await;
    first.expect(201);
    let replay = app.write(Method::POST, "/api/accounts", &k, &body).await;
    replay.expect(201);
    assert_eq!(replay.body, first.body);
    assert_eq!(replay.header("location"), first.header("location"));
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(app.db.count("jobs", "kind = 'account.provision'").await, 2, "the replay queued nothing");

    // Even once provisioned, the replay is the original response.
    app.drain_jobs().await;
    assert_eq!(account(&app, "a-2").await["status"], "ACTIVE");
    let later = app.write(Method::POST, "/api/accounts", &k, &body).await;
    later.expect(201);
    assert_eq!(later.body, first.body);
    assert_eq!(account_events(&app, "account.provisioned", "a-2").await.len(), 1);

    // A refusal is replayed too.
    let refused_key = key();
    let refused_body = account_body("a-3", "c-404", "USD");
    let refused = app.write(Method::POST, "/api/accounts", &refused_key, &refused_body).await;
    assert_error(&refused, 404);
    customer(&app, "c-404").await;
    let refused_again = app.write(Method::POST, "/api/accounts", &refused_key, &refused_body).await;
    assert_eq!(refused_again.status, 404);
    assert_eq!(refused_again.body, refused.body);

    // And a status change.
    let p = key();
    let changed = app.write(Method::PATCH, "/api/accounts/a-2", &p, &json!({ "status": "INACTIVE" })).await;
    changed.expect(200);
    app.patch("/api/accounts/a-2", &json!({ "status": "ACTIVE" })).await.expect(200);
    let replayed = app.write(Method::PATCH, "/api/accounts/a-2", &p, &json!({ "status": "INACTIVE" })).await;
    replayed.expect(200);
    assert_eq!(replayed.body, changed.body);
    assert_eq!(account(&app, "a-2").await["status"], "ACTIVE", "the replay changed nothing");
    assert_eq!(account_events(&app, "account.status_changed", "a-2").await.len(), 2);
}

// ---------------------------------------------------------------------------------------------
// Provisioning failure and registering a FAILED reference again
// ---------------------------------------------------------------------------------------------

async fn a_failed_account_reference_can_be_registered_again(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let correlation = "corr-failed";
    app.db.fail_inserts_into("custody_keys").await;
    let k = key();
    let created =
        write_correlated(&app, Method::POST, "/api/accounts", &k, correlation, &account_body("a-1", "c-1", "USD"))
            .await;
    created.expect(201);
    let failed = provisioning_fails(&app, "a-1").await;
    let reason = failed["failureReason"].as_str().unwrap_or_default();
    assert!(reason.contains("RETRY_EXHAUSTED"), "the reason says the retries ran out: {failed}");
    assert!(failed.get("walletAddress").is_none(), "a FAILED account has no wallet: {failed}");
    assert!(failed.get("provisionedAt").is_none(), "{failed}");
    assert_eq!(app.db.count("jobs", "kind = 'account.provision' AND status = 'done'").await, 1);

    let failures = account_events(&app, "account.provisioning_failed", "a-1").await;
    assert_eq!(failures.len(), 1, "one failure event: {failures:?}");
    assert_eq!(failures[0]["resource"], json!({ "type": "account", "id": "a-1" }));
    assert_eq!(failures[0]["data"], failed, "data is the account as the API returns it");
    assert_eq!(failures[0]["correlationId"], correlation);
    assert!(account_events(&app, "account.provisioned", "a-1").await.is_empty());

    // FAILED: no balance, no status change, listed by status.
    assert_error(&app.get("/api/accounts/a-1/balances").await, 422);
    for status in ["ACTIVE", "INACTIVE"] {
        assert_error(&set_account_status(&app, "a-1", status).await, 422);
    }
    assert_eq!(listed(&app.get("/api/accounts?status=FAILED").await, "accountRef"), ["a-1"]);

    // Registered again (the fault healed), here for another customer and asset: 201, PENDING,
    // then ACTIVE.
    active_contract(&app, "EUR").await;
    customer(&app, "c-2").await;
    app.clock.advance_millis(1_000);
    let again = register(&app, "a-1", "c-2", "EUR").await;
    again.expect(201);
    assert_eq!(again.body["status"], "PENDING");
    assert_eq!((&again.body["customerRef"], &again.body["assetId"]), (&json!("c-2"), &json!("EUR")));
    assert!(again.body.get("failureReason").is_none(), "the old reason is gone: {}", again.body);
    app.drain_jobs().await;
    let active = account(&app, "a-1").await;
    assert_eq!(active["status"], "ACTIVE", "{active}");
    assert_address(&active["walletAddress"]);
    assert!(active.get("failureReason").is_none(), "{active}");
    assert_eq!((&active["customerRef"], &active["assetId"]), (&json!("c-2"), &json!("EUR")));
    assert_eq!(active["createdAt"], failed["createdAt"], "the same account, registered again");
    assert_eq!(app.db.count("accounts", "").await, 1, "the same account, registered again");
    assert_eq!(account_events(&app, "account.provisioned", "a-1").await.len(), 1);
    assert_eq!(account_events(&app, "account.provisioning_failed", "a-1").await.len(), 1);
    assert_eq!(app.get("/api/accounts/a-1/balances").await.body["assetId"], "EUR");

    // Once ACTIVE, the reference is taken again.
    let taken = register(&app, "a-1", "c-2", "EUR").await;
    assert_error(&taken, 409);
    assert_eq!(taken.body["existingStatus"], "ACTIVE");
}

/// A store outage that outlasts the provisioning job's attempts must not strand the account:
/// PENDING forever would be a dead end (its reference 409, its status 422, no outcome event).
/// Here the provisioning's own outcome cannot be written (the outbox refuses inserts) until
/// every attempt is spent; once the store is healthy again the account must reach an outcome.
async fn an_account_does_not_stay_pending_after_its_provisioning_job_ran_out_of_attempts(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    pending_account(&app, "a-1", "c-1", "USD").await;
    app.db.fail_inserts_into("events").await;
    drain_past_three_attempts(&app).await;
    app.db.heal_inserts_into("events").await;
    drain_past_three_attempts(&app).await;
    let account = account(&app, "a-1").await;
    let outcomes = account_events(&app, "account.provisioned", "a-1").await.len()
        + account_events(&app, "account.provisioning_failed", "a-1").await.len();
    assert!(
        account["status"] != "PENDING" && outcomes == 1,
        "the account is stranded PENDING with {outcomes} outcome events ({} dead provisioning jobs): {account}",
        app.db.count("jobs", "kind = 'account.provision' AND status = 'dead'").await
    );
}

/// The registration's events carry its Idempotency-Key, as every event does whose originating
/// request had one (spec: Events/Event body).
async fn provisioning_events_carry_the_registrations_idempotency_key(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let k = key();
    app.write(Method::POST, "/api/accounts", &k, &account_body("a-1", "c-1", "USD")).await.expect(201);
    app.drain_jobs().await;
    let provisioned = account_events(&app, "account.provisioned", "a-1").await;
    assert_eq!(provisioned.len(), 1);
    assert_eq!(provisioned[0]["idempotencyKey"], k.as_str(), "{}", provisioned[0]);
}

// ---------------------------------------------------------------------------------------------
// PATCH /api/accounts/{accountRef}: the transition table
// ---------------------------------------------------------------------------------------------

async fn patch_switches_a_provisioned_account_and_emits_account_status_changed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let provisioned = one_active_account(&app).await;
    app.clock.advance_millis(1_000);

    let k = key();
    let body = json!({ "status": "INACTIVE" });
    let inactive = write_correlated(&app, Method::PATCH, "/api/accounts/a-1", &k, "corr-7", &body).await;
    inactive.expect(200);
    assert_eq!(inactive.body["status"], "INACTIVE");
    assert_eq!(inactive.body["walletAddress"], provisioned["walletAddress"], "an INACTIVE account keeps its wallet");
    assert_eq!(inactive.body["updatedAt"], app.clock.now().to_iso8601());
    assert_eq!(account(&app, "a-1").await, inactive.body);

    let changes = account_events(&app, "account.status_changed", "a-1").await;
    assert_eq!(changes.len(), 1, "{changes:?}");
    let event = &changes[0];
    assert_eq!(event["resource"], json!({ "type": "account", "id": "a-1" }));
    assert_eq!(event["data"]["status"], "INACTIVE");
    assert_eq!(event["data"]["previousStatus"], "ACTIVE");
    assert!(event["data"].get("cause").is_none(), "a PATCH has no cause: {event}");
    assert_eq!(event["data"]["walletAddress"], provisioned["walletAddress"]);
    assert_eq!(event["idempotencyKey"], k.as_str());
    assert_eq!(event["correlationId"], "corr-7");

    let active = set_account_status(&app, "a-1", "ACTIVE").await;
    active.expect(200);
    assert_eq!(active.body["status"], "ACTIVE");
    let changes = account_events(&app, "account.status_changed", "a-1").await;
    assert_eq!(changes.len(), 2);
    assert_eq!(changes[0]["data"]["status"], "ACTIVE", "newest first");
    assert_eq!(changes[0]["data"]["previousStatus"], "INACTIVE");
    assert_eq!(app.db.count("audit_records", "action = 'account.update_status' AND outcome = 'SUCCESS'").await, 2);
}

async fn patch_to_the_current_status_is_200_and_emits_nothing(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let provisioned = one_active_account(&app).await;
    app.clock.advance_millis(1_000);
    let same = set_account_status(&app, "a-1", "ACTIVE").await;
    same.expect(200);
    assert_eq!(same.body["status"], "ACTIVE");
    assert_eq!(same.body["updatedAt"], provisioned["updatedAt"], "nothing changed, so updatedAt stays");
    assert!(events(&app, "account.status_changed").await.is_empty());

    set_account_status(&app, "a-1", "INACTIVE").await.expect(200);
    set_account_status(&app, "a-1", "INACTIVE").await.expect(200);
    assert_eq!(events(&app, "account.status_changed").await.len(), 1, "asking for the current status emits nothing");
}

async fn patch_of_a_pending_account_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    pending_account(&app, "a-1", "c-1", "USD").await;
    for status in ["ACTIVE", "INACTIVE"] {
        let reply = set_account_status(&app, "a-1", status).await;
        assert_refused(&reply, 422, &format!("PENDING → {status}"));
    }
    assert_eq!(account(&app, "a-1").await["status"], "PENDING");
    assert!(events(&app, "account.status_changed").await.is_empty());
    app.drain_jobs().await;
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE", "the refused changes did not stop provisioning");
}

async fn reactivating_an_account_while_its_customer_is_inactive_is_422(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    set_customer_status(&app, "c-1", "INACTIVE").await;
    assert_eq!(account(&app, "a-1").await["status"], "INACTIVE", "the cascade");
    let before = events(&app, "account.status_changed").await.len();

    let refused = set_account_status(&app, "a-1", "ACTIVE").await;
    assert_error(&refused, 422);
    assert!(refused.body["message"].as_str().unwrap_or_default().contains("INACTIVE"), "{}", refused.body);
    assert_eq!(account(&app, "a-1").await["status"], "INACTIVE");
    // INACTIVE → INACTIVE stays allowed.
    set_account_status(&app, "a-1", "INACTIVE").await.expect(200);
    assert_eq!(events(&app, "account.status_changed").await.len(), before);

    // With the customer ACTIVE again, the bank reactivates the account deliberately.
    set_customer_status(&app, "c-1", "ACTIVE").await;
    set_account_status(&app, "a-1", "ACTIVE").await.expect(200);
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE");
}

async fn patch_with_a_missing_or_unsettable_status_is_400_against_settable_status(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    for body in [
        json!({}),
        json!({ "status": null }),
        json!({ "status": "PENDING" }),
        json!({ "status": "FAILED" }),
        json!({ "status": "CLOSED" }),
        json!({ "status": "inactive" }),
        json!({ "status": "" }),
        json!({ "status": 0 }),
        json!({ "status": ["ACTIVE"] }),
        json!({ "status": { "value": "ACTIVE" } }),
        json!({ "status": true }),
    ] {
        let reply = set_account_status_body(&app, "a-1", &body).await;
        assert_refused(&reply, 400, &format!("{body} should be refused"));
        // A status of the wrong JSON type is a status that cannot be set, like any other.
        assert_eq!(reply.body["details"][0]["field"], "settableStatus", "{body}: {}", reply.body);
        assert_eq!(reply.body["settableStatus"], json!(["ACTIVE", "INACTIVE"]), "{}", reply.body);
    }
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE");
    assert!(events(&app, "account.status_changed").await.is_empty());
}

async fn set_account_status_body(app: &TestApp, account_ref: &str, body: &Value) -> Reply {
    app.patch(&format!("/api/accounts/{account_ref}"), body).await
}

async fn patch_of_an_unknown_account_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    let long = "x".repeat(65);
    for path in
        ["/api/accounts/a-404", "/api/accounts/A-1", "/api/accounts/bad%20ref", &format!("/api/accounts/{long}")]
    {
        let reply = app.patch(path, &json!({ "status": "INACTIVE" })).await;
        assert_refused(&reply, 404, &format!("PATCH {path}"));
    }
    assert_eq!(app.db.count("accounts", "").await, 1, "a PATCH never creates an account");
    assert!(events(&app, "account.status_changed").await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// The customer cascade
// ---------------------------------------------------------------------------------------------

async fn a_customer_set_inactive_takes_its_active_accounts_inactive_and_back_does_not_reactivate(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    active_contract(&app, "EUR").await;
    customer(&app, "c-1").await;
    customer(&app, "c-2").await;
    active_account(&app, "a-usd", "c-1", "USD").await;
    active_account(&app, "a-eur", "c-1", "EUR").await;
    active_account(&app, "a-off", "c-1", "USD").await;
    set_account_status(&app, "a-off", "INACTIVE").await.expect(200);
    active_account(&app, "b-1", "c-2", "USD").await;
    let before = events(&app, "account.status_changed").await.len();

    app.clock.advance_millis(1_000);
    let k = key();
    app.write(Method::PATCH, "/api/customers/c-1", &k, &json!({ "status": "INACTIVE" })).await.expect(200);
    for r in ["a-usd", "a-eur", "a-off"] {
        assert_eq!(account(&app, r).await["status"], "INACTIVE", "{r}");
    }
    assert_eq!(account(&app, "b-1").await["status"], "ACTIVE", "another customer's account stays");
    assert_eq!(account(&app, "a-usd").await["updatedAt"], app.clock.now().to_iso8601());

    let changes = events(&app, "account.status_changed").await;
    assert_eq!(changes.len(), before + 2, "one event per account the cascade changed: {changes:?}");
    let mut cascaded: Vec<&str> =
        changes[..2].iter().map(|e| e["resource"]["id"].as_str().unwrap_or_default()).collect();
    cascaded.sort_unstable();
    assert_eq!(cascaded, ["a-eur", "a-usd"]);
    for event in &changes[..2] {
        assert_eq!(event["data"]["status"], "INACTIVE");
        assert_eq!(event["data"]["previousStatus"], "ACTIVE");
        assert_eq!(event["data"]["cause"], "CUSTOMER_INACTIVE");
        assert_eq!(event["idempotencyKey"], k.as_str(), "carried from the customer's PATCH");
    }
    // Each account the cascade changed has an audit record of its own, by the customer's
    // PATCH (its request and key); the account already INACTIVE has none.
    for account_ref in ["a-usd", "a-eur", "a-off"] {
        let records = app
            .get(&format!("/api/audit/events?action=account.update_status&resourceId={account_ref}"))
            .await
            .body["data"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if account_ref == "a-off" {
            assert!(records.iter().all(|r| r["detail"]["cause"] != "CUSTOMER_INACTIVE"), "{records:?}");
            continue;
        }
        let cascade: Vec<_> = records.iter().filter(|r| r["detail"]["cause"] == "CUSTOMER_INACTIVE").collect();
        assert_eq!(cascade.len(), 1, "{account_ref}: {records:?}");
        let record = cascade[0];
        assert_eq!(record["resourceType"], "account", "{record}");
        assert_eq!((record["outcome"].as_str(), record["source"].as_str()), (Some("SUCCESS"), Some("API")));
        assert_eq!(record["idempotencyKey"], k.as_str(), "{record}");
        assert_eq!(record["detail"]["after"]["status"], "INACTIVE", "{record}");
        let by_request =
            app.get(&format!("/api/audit/events?requestId={}", record["requestId"].as_str().unwrap_or_default())).await;
        let actions: Vec<&str> = by_request.body["data"]
            .as_array()
            .map(|d| d.iter().filter_map(|r| r["action"].as_str()).collect())
            .unwrap_or_default();
        assert!(actions.contains(&"customer.update_status"), "one request: {actions:?}");
    }
    // Balances of INACTIVE accounts stay readable.
    app.get("/api/accounts/a-usd/balances").await.expect(200);

    // Reactivating the customer leaves its accounts INACTIVE.
    set_customer_status(&app, "c-1", "ACTIVE").await;
    for r in ["a-usd", "a-eur", "a-off"] {
        assert_eq!(account(&app, r).await["status"], "INACTIVE", "{r} is not reactivated");
    }
    assert_eq!(events(&app, "account.status_changed").await.len(), before + 2);
    set_account_status(&app, "a-usd", "ACTIVE").await.expect(200);
    assert_eq!(account(&app, "a-eur").await["status"], "INACTIVE");
}

async fn an_account_provisioned_while_its_customer_is_inactive_lands_inactive(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    pending_account(&app, "a-1", "c-1", "USD").await;
    set_customer_status(&app, "c-1", "INACTIVE").await;
    assert_eq!(account(&app, "a-1").await["status"], "PENDING", "the cascade leaves PENDING accounts alone");
    assert!(events(&app, "account.status_changed").await.is_empty());

    app.drain_jobs().await;
    let landed = account(&app, "a-1").await;
    assert_eq!(landed["status"], "INACTIVE", "{landed}");
    assert_address(&landed["walletAddress"]);
    let provisioned = account_events(&app, "account.provisioned", "a-1").await;
    assert_eq!(provisioned.len(), 1);
    assert_eq!(provisioned[0]["data"], landed);
    assert_error(&set_account_status(&app, "a-1", "ACTIVE").await, 422);
    app.get("/api/accounts/a-1/balances").await.expect(200);
}

// ---------------------------------------------------------------------------------------------
// Events
// ---------------------------------------------------------------------------------------------

async fn account_provisioned_carries_the_account_as_the_api_returns_it(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    let body = account_body("a-1", "c-1", "USD");
    write_correlated(&app, Method::POST, "/api/accounts", &key(), "corr-provision", &body).await.expect(201);
    assert!(events(&app, "account.provisioned").await.is_empty(), "nothing before provisioning");
    app.drain_jobs().await;
    let active = account(&app, "a-1").await;
    let provisioned = events(&app, "account.provisioned").await;
    assert_eq!(provisioned.len(), 1, "{provisioned:?}");
    let event = &provisioned[0];
    assert_eq!(event["type"], "account.provisioned");
    assert_eq!(event["resource"], json!({ "type": "account", "id": "a-1" }));
    assert_eq!(event["data"], active, "data is the account as the API returns it");
    assert_eq!(event["correlationId"], "corr-provision", "carried from the registration");
    assert!(Uuid::parse_str(event["id"].as_str().expect("event id")).is_ok());
    assert!(events(&app, "account.provisioning_failed").await.is_empty());
    assert_eq!(app.db.count("events", "event_type LIKE 'account.%'").await, 1);
    // Draining again changes nothing.
    app.drain_jobs().await;
    assert_eq!(app.db.count("events", "event_type = 'account.provisioned'").await, 1);
}

// ---------------------------------------------------------------------------------------------
// GET /api/accounts and GET /api/accounts/{accountRef}
// ---------------------------------------------------------------------------------------------

async fn account_list_is_style_a_oldest_first_with_filters(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    assert_empty_style_a(&app, "/api/accounts").await;

    active_contract(&app, "USD").await;
    active_contract(&app, "EUR").await;
    customer(&app, "c-1").await;
    customer(&app, "c-2").await;
    let made =
        [("a-mid", "c-1", "USD"), ("a-zeta", "c-2", "EUR"), ("a-alpha", "c-1", "EUR"), ("a-omega", "c-2", "USD")];
    for (a, c, asset) in made {
        register(&app, a, c, asset).await.expect(201);
        app.clock.advance_millis(10);
    }
    app.drain_jobs().await;
    set_account_status(&app, "a-zeta", "INACTIVE").await.expect(200);
    register(&app, "a-new", "c-1", "USD").await.expect(201); // PENDING

    let all = app.get("/api/accounts").await;
    all.expect(200);
    assert_eq!(listed(&all, "accountRef"), ["a-mid", "a-zeta", "a-alpha", "a-omega", "a-new"], "oldest first");
    assert_eq!((&all.body["totalElements"], &all.body["totalPages"]), (&json!(5), &json!(1)));
    let page = app.get("/api/accounts?page=1&size=2").await;
    page.expect(200);
    assert_eq!(listed(&page, "accountRef"), ["a-alpha", "a-omega"]);
    assert_eq!((&page.body["page"], &page.body["size"]), (&json!(1), &json!(2)));
    assert_eq!((&page.body["totalElements"], &page.body["totalPages"]), (&json!(5), &json!(3)));
    assert_eq!(listed(&app.get("/api/accounts?page=9").await, "accountRef"), Vec::<String>::new());

    let by = |query: &'static str| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/api/accounts?{query}")).await;
            reply.expect(200);
            listed(&reply, "accountRef")
        }
    };
    assert_eq!(by("customerRef=c-1").await, ["a-mid", "a-alpha", "a-new"]);
    assert_eq!(by("customerRef=c-2").await, ["a-zeta", "a-omega"]);
    assert_eq!(by("customerRef=c-404").await, Vec::<String>::new());
    assert_eq!(by("customerRef=bad%20ref").await, Vec::<String>::new());
    assert_eq!(by("assetId=eur").await, ["a-zeta", "a-alpha"], "assetId is case-insensitive");
    assert_eq!(by("assetId=USD").await, ["a-mid", "a-omega", "a-new"]);
    assert_eq!(by("status=ACTIVE").await, ["a-mid", "a-alpha", "a-omega"]);
    assert_eq!(by("status=INACTIVE").await, ["a-zeta"]);
    assert_eq!(by("status=PENDING").await, ["a-new"]);
    assert_eq!(by("status=FAILED").await, Vec::<String>::new());
    assert_eq!(by("customerRef=c-1&assetId=usd&status=ACTIVE").await, ["a-mid"]);
    let first = &all.body["content"][0];
    assert_eq!(first["customerRef"], "c-1");
    assert_eq!(first["assetId"], "USD");
    assert_address(&first["walletAddress"]);
}

async fn account_list_refuses_an_unknown_status_and_invalid_paging(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    assert_list_refuses_an_unknown_status_and_invalid_paging(&app, "/api/accounts").await;
    app.get("/api/accounts?size=100").await.expect(200);
}

async fn get_of_an_unknown_account_is_404(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    for path in ["/api/accounts/a-2", "/api/accounts/A-1", "/api/accounts/bad%20ref", "/api/accounts/a%2Fb"] {
        assert_get_refused(&app, path, 404).await;
    }
}

async fn another_organisations_account_is_404_and_not_listed(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    let other = app.new_tenant();
    active_contract_as(&app, &other, "USD").await;
    customer_as(&app, &other, "c-theirs").await;
    active_account_as(&app, &other, "a-theirs", "c-theirs", "USD").await;

    assert_error(&app.get("/api/accounts/a-theirs").await, 404);
    assert_error(&app.get("/api/accounts/a-theirs/balances").await, 404);
    assert_error(&set_account_status(&app, "a-theirs", "INACTIVE").await, 404);
    assert_eq!(account_as(&app, &other, "a-theirs").await["status"], "ACTIVE", "untouched");
    assert_eq!(listed(&app.get("/api/accounts").await, "accountRef"), ["a-1"]);
    assert_eq!(listed(&app.get_as(&other, "/api/accounts").await, "accountRef"), ["a-theirs"]);
    assert_error(&app.get_as(&other, "/api/accounts/a-1").await, 404);
    assert!(events_as(&app, &other, "account.provisioned").await.iter().all(|e| e["resource"]["id"] == "a-theirs"));

    // The same reference in both organisations: two accounts, two wallets.
    customer_as(&app, &other, "c-1").await;
    let theirs = active_account_as(&app, &other, "a-1", "c-1", "USD").await;
    let mine = account(&app, "a-1").await;
    assert_ne!(theirs["walletAddress"], mine["walletAddress"]);
    app.patch_as(&other, "/api/accounts/a-1", &json!({ "status": "INACTIVE" })).await.expect(200);
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE", "a change in one leaves the other alone");
}

// ---------------------------------------------------------------------------------------------
// GET /api/accounts/{accountRef}/balances
// ---------------------------------------------------------------------------------------------

async fn balances_are_zero_in_the_currency_minor_unit_with_the_block_read(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    active_contract(&app, "JPY").await;
    active_contract(&app, "BHD").await;
    customer(&app, "c-1").await;
    for (a, asset) in [("a-usd", "USD"), ("a-jpy", "JPY"), ("a-bhd", "BHD")] {
        active_account(&app, a, "c-1", asset).await;
    }
    app.clock.advance_millis(5_000);
    for (a, asset, zero) in [("a-usd", "USD", "0.00"), ("a-jpy", "JPY", "0"), ("a-bhd", "BHD", "0.000")] {
        let balance = app.get(&format!("/api/accounts/{a}/balances")).await;
        balance.expect(200);
        assert_eq!(balance.body["accountRef"], a);
        assert_eq!(balance.body["customerRef"], "c-1");
        assert_eq!(balance.body["assetId"], asset);
        for field in ["total", "available", "locked"] {
            assert_eq!(balance.body[field], zero, "{asset} {field}: {}", balance.body);
        }
        assert_iso_utc(&balance.body["asOf"]);
        assert_eq!(balance.body["asOf"], app.clock.now().to_iso8601());
        assert!(balance.body["blockNumber"].is_u64(), "{}", balance.body);
    }
    // An INACTIVE account's balance stays readable.
    set_account_status(&app, "a-usd", "INACTIVE").await.expect(200);
    assert_eq!(app.get("/api/accounts/a-usd/balances").await.body["total"], "0.00");
}

async fn balances_are_404_without_the_account_or_an_active_contract(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    for path in ["/api/accounts/a-404/balances", "/api/accounts/bad%20ref/balances", "/api/accounts/A-1/balances"] {
        assert_get_refused(&app, path, 404).await;
    }
    app.patch("/api/contracts/USD", &json!({ "status": "INACTIVE" })).await.expect(200);
    let inactive = app.get("/api/accounts/a-1/balances").await;
    assert_error(&inactive, 404);
    assert!(inactive.body.get("total").is_none(), "no balance: {}", inactive.body);
}

async fn balances_of_a_pending_or_failed_account_are_422(backend: Backend) {
    let app = TestApp::spawn_with(backend, three_attempts()).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    pending_account(&app, "a-pending", "c-1", "USD").await;
    let pending = app.get("/api/accounts/a-pending/balances").await;
    assert_error(&pending, 422);
    assert!(pending.body.get("total").is_none(), "{}", pending.body);

    let failed = failed_account(&app, "a-failed", "c-1", "USD").await;
    assert!(failed["failureReason"].as_str().is_some_and(|r| r.contains("RETRY_EXHAUSTED")), "{failed}");
    let reply = app.get("/api/accounts/a-failed/balances").await;
    assert_error(&reply, 422);
    assert!(reply.body.get("total").is_none(), "{}", reply.body);
}

// ---------------------------------------------------------------------------------------------
// Races with the customer cascade
// ---------------------------------------------------------------------------------------------

/// A customer's deactivation and the reactivation of one of its accounts, sent together, apply
/// one after the other: never an ACTIVE account of an INACTIVE customer.
async fn a_reactivation_racing_the_customers_deactivation_never_leaves_the_account_active(backend: Backend) {
    const PAIRS: usize = 8;
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    for i in 0..PAIRS {
        customer(&app, &format!("c-{i}")).await;
        register(&app, &format!("a-{i}"), &format!("c-{i}"), "USD").await.expect(201);
    }
    app.drain_jobs().await;
    for i in 0..PAIRS {
        set_account_status(&app, &format!("a-{i}"), "INACTIVE").await.expect(200);
    }
    let races = (0..PAIRS).map(|i| {
        let app = &app;
        async move {
            let (customer_path, account_ref, inactive) =
                (format!("/api/customers/c-{i}"), format!("a-{i}"), json!({ "status": "INACTIVE" }));
            tokio::join!(app.patch(&customer_path, &inactive), set_account_status(app, &account_ref, "ACTIVE"))
        }
    });
    for (i, (customer, reactivation)) in futures::future::join_all(races).await.into_iter().enumerate() {
        customer.expect(200);
        assert!(matches!(reactivation.status, 200 | 422), "a-{i}: {} {}", reactivation.status, reactivation.body);
        let account = account(&app, &format!("a-{i}")).await;
        assert_eq!(account["status"], "INACTIVE", "a-{i} of an INACTIVE customer: {account}");
        let changes = account_events(&app, "account.status_changed", &format!("a-{i}")).await;
        if reactivation.status == 200 {
            // Reactivated first, then taken down by the cascade.
            assert_eq!(changes.len(), 3, "a-{i}: {changes:?}");
            assert_eq!(changes[0]["data"]["cause"], "CUSTOMER_INACTIVE");
        } else {
            assert_eq!(changes.len(), 1, "a-{i}: {changes:?}");
        }
    }
}

/// Provisioning that completes while the customer is being deactivated lands the account
/// INACTIVE, either directly or through the cascade: never ACTIVE under an INACTIVE customer.
async fn provisioning_racing_the_customers_deactivation_never_leaves_an_account_active(backend: Backend) {
    const ACCOUNTS: usize = 12;
    let app = TestApp::spawn(backend).await;
    active_contract(&app, "USD").await;
    customer(&app, "c-1").await;
    for i in 0..ACCOUNTS {
        pending_account(&app, &format!("a-{i:02}"), "c-1", "USD").await;
    }
    let (_, deactivated) = tokio::join!(app.drain_jobs(), set_customer_status(&app, "c-1", "INACTIVE"));
    deactivated.expect(200);
    app.drain_jobs().await;
    for i in 0..ACCOUNTS {
        let account_ref = format!("a-{i:02}");
        let account = account(&app, &account_ref).await;
        assert_eq!(account["status"], "INACTIVE", "{account}");
        assert_address(&account["walletAddress"]);
        assert_eq!(account_events(&app, "account.provisioned", &account_ref).await.len(), 1, "{account_ref}");
    }
}

// ---------------------------------------------------------------------------------------------
// Permissions
// ---------------------------------------------------------------------------------------------

async fn each_endpoint_needs_its_permission(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    one_active_account(&app).await;
    let with_scope = |scope: &str| {
        let subject = Uuid::now_v7().to_string();
        let claims = app.issuer.claims_with_scope(&app.clock, &subject, Some(app.tenant.id), 3_600, Some(scope));
        Tenant { id: app.tenant.id, subject, token: app.issuer.sign(&claims) }
    };
    let readers = with_scope("contract:read account:read balance:read");
    for path in
        ["/api/contracts", "/api/contracts/USD", "/api/accounts", "/api/accounts/a-1", "/api/accounts/a-1/balances"]
    {
        app.get_as(&readers, path).await.expect(200);
    }
    assert_error(&app.post_as(&readers, "/api/contracts", &json!({ "assetId": "EUR" })).await, 403);
    assert_error(&app.patch_as(&readers, "/api/contracts/USD", &json!({ "status": "INACTIVE" })).await, 403);
    assert_error(&app.post_as(&readers, "/api/accounts", &account_body("a-2", "c-1", "USD")).await, 403);
    assert_error(&app.patch_as(&readers, "/api/accounts/a-1", &json!({ "status": "INACTIVE" })).await, 403);

    let writers = with_scope("contract:manage account:write");
    for path in
        ["/api/contracts", "/api/contracts/USD", "/api/accounts", "/api/accounts/a-1", "/api/accounts/a-1/balances"]
    {
        assert_error(&app.get_as(&writers, path).await, 403);
    }
    app.post_as(&writers, "/api/accounts", &account_body("a-2", "c-1", "USD")).await.expect(201);
    app.patch_as(&writers, "/api/contracts/USD", &json!({ "name": "Dollar" })).await.expect(200);

    // Reading accounts is not reading balances.
    let account_reader = with_scope("account:read");
    app.get_as(&account_reader, "/api/accounts/a-1").await.expect(200);
    assert_error(&app.get_as(&account_reader, "/api/accounts/a-1/balances").await, 403);
    assert_eq!(account(&app, "a-1").await["status"], "ACTIVE");
}

backends!(
    a_contract_is_registered_pending_then_deployed_active,
    with_workers_running_a_registration_answers_the_deployed_contract,
    a_replayed_registration_answers_the_contract_as_it_is_now,
    contract_registration_with_a_missing_or_invalid_asset_id_is_400,
    contract_registration_with_an_invalid_contract_address_or_name_is_400,
    an_existing_contract_is_409_with_asset_id_and_existing_status,
    adopting_an_address_without_a_token_fails_and_the_asset_can_be_registered_again,
    an_existing_token_is_adopted_and_serves_one_contract_only,
    adopting_a_token_with_other_decimals_or_a_non_token_address_fails_with_a_reason,
    adopting_the_token_of_another_currency_fails,
    a_contract_does_not_stay_pending_after_its_deployment_job_ran_out_of_attempts,
    contract_patch_switches_between_active_and_inactive,
    contract_patch_with_an_unknown_status_or_nothing_to_change_is_400,
    contract_patch_without_a_contract_for_the_asset_is_404,
    contract_patch_of_a_pending_contract_is_422,
    contract_list_is_style_a_oldest_first_with_asset_and_status_filters,
    contract_list_refuses_an_unknown_status_and_invalid_paging,
    only_an_active_contract_lets_accounts_use_the_asset,
    an_account_is_provisioned_and_its_balance_read,
    registering_an_account_is_201_pending_with_location_then_active_with_a_wallet,
    account_registration_with_a_missing_or_invalid_field_is_400,
    account_idempotency_key_missing_blank_or_over_255_is_400,
    account_registration_for_a_missing_customer_or_an_asset_without_active_contract_is_404,
    an_existing_account_ref_is_409_with_account_ref_and_existing_status,
    concurrent_registrations_of_one_account_ref_create_one_account,
    account_writes_with_a_key_in_flight_are_409_with_retry_after,
    account_registration_for_an_inactive_customer_is_422,
    account_writes_reusing_a_key_with_a_different_payload_are_422,
    an_idempotent_replay_returns_the_same_response,
    a_failed_account_reference_can_be_registered_again,
    an_account_does_not_stay_pending_after_its_provisioning_job_ran_out_of_attempts,
    provisioning_events_carry_the_registrations_idempotency_key,
    patch_switches_a_provisioned_account_and_emits_account_status_changed,
    patch_to_the_current_status_is_200_and_emits_nothing,
    patch_of_a_pending_account_is_422,
    reactivating_an_account_while_its_customer_is_inactive_is_422,
    patch_with_a_missing_or_unsettable_status_is_400_against_settable_status,
    patch_of_an_unknown_account_is_404,
    a_customer_set_inactive_takes_its_active_accounts_inactive_and_back_does_not_reactivate,
    an_account_provisioned_while_its_customer_is_inactive_lands_inactive,
    account_provisioned_carries_the_account_as_the_api_returns_it,
    account_list_is_style_a_oldest_first_with_filters,
    account_list_refuses_an_unknown_status_and_invalid_paging,
    get_of_an_unknown_account_is_404,
    another_organisations_account_is_404_and_not_listed,
    balances_are_zero_in_the_currency_minor_unit_with_the_block_read,
    balances_are_404_without_the_account_or_an_active_contract,
    balances_of_a_pending_or_failed_account_are_422,
    a_reactivation_racing_the_customers_deactivation_never_leaves_the_account_active,
    provisioning_racing_the_customers_deactivation_never_leaves_an_account_active,
    each_endpoint_needs_its_permission,
);

// ---------------------------------------------------------------------------------------------
// On anvil: a real EVM node, which can go away
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil_accounts_are_provisioned_and_balances_are_500_when_the_ledger_is_gone() {
    let anvil = Anvil::start().await;
    let app = TestApp::spawn_with(Backend::Sqlite, anvil.ledger_settings()).await;

    let deployed = active_contract(&app, "USD").await;
    let address = deployed["contractAddress"].as_str().expect("address");
    let code = anvil.rpc("eth_getCode", json!([address, "latest"])).await;
    assert!(code.as_str().is_some_and(|c| c.len() > 2), "the token has code on anvil: {code}");

    // An address without code is no token to adopt.
    let other = app.new_tenant();
    let nowhere = "0x000000000000000000000000000000000000dead";
    let failed = adopted_contract_as(&app, &other, "USD", nowhere).await;
    assert_eq!(failed["status"], "FAILED", "{failed}");
    assert!(failed["failureReason"].as_str().is_some_and(|r| !r.is_empty()), "{failed}");

    customer(&app, "c-1").await;
    let account = active_account(&app, "a-1", "c-1", "USD").await;
    let wallet = account["walletAddress"].as_str().expect("wallet");
    let gas = anvil.rpc("eth_getBalance", json!([wallet, "latest"])).await;
    assert_ne!(gas, json!("0x0"), "dev gas funding gave the wallet gas");
    let balance = app.get("/api/accounts/a-1/balances").await;
    balance.expect(200);
    for field in ["total", "available", "locked"] {
        assert_eq!(balance.body[field], "0.00", "{field}: {}", balance.body);
    }
    let head = anvil.rpc("eth_blockNumber", json!([])).await;
    let head = u64::from_str_radix(head.as_str().expect("hex").trim_start_matches("0x"), 16).expect("block");
    let read_at = balance.body["blockNumber"].as_u64().expect("blockNumber");
    assert!(read_at > 0 && read_at <= head, "read at block {read_at}, head {head}");

    // The node goes away: the balance cannot be read, and is never reported as zero.
    anvil.stop().await;
    let gone = app.get("/api/accounts/a-1/balances").await;
    assert_error(&gone, 500);
    for field in ["total", "available", "locked"] {
        assert!(gone.body.get(field).is_none(), "no {field} without a ledger: {}", gone.body);
    }
    assert_eq!(gone.body["message"], "System error occurred");
}

/// Adopting a tokenops token that another platform issuer deployed would give an ACTIVE contract
/// that tokenops can never mint or burn on: the adoption must check the issuer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_anvil_adopting_a_token_of_another_issuer_fails() {
    let anvil = Anvil::start().await;
    let elsewhere = TestApp::spawn_with(Backend::Sqlite, anvil.ledger_settings()).await;
    let foreign = active_contract(&elsewhere, "USD").await;
    let address = foreign["contractAddress"].as_str().expect("address");

    let app = TestApp::spawn_with(Backend::Sqlite, anvil.ledger_settings()).await;
    let adopted = adopted_contract_as(&app, &app.tenant, "USD", address).await;
    assert_eq!(adopted["status"], "FAILED", "a token of another issuer must not become ACTIVE: {adopted}");
}
