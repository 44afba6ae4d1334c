//! Crash safety of account provisioning, with the real binary: an API-only node registers
//! accounts that wait PENDING; a worker node provisioning them is killed with SIGKILL while it
//! holds `account.provision` leases; after a restart every account ends ACTIVE (or FAILED) with
//! exactly one outcome event, and no two accounts share a wallet.

use crate::BINARY;
use crate::crash_load::{job_crash_environment, wait_until};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokenops_testkit::{Backend, ServiceProcess, Testbed, backends};

const ACCOUNTS: usize = 50;

fn environment(bed: &Testbed, role: &str) -> BTreeMap<String, String> {
    let mut env = job_crash_environment(bed, role);
    env.insert("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS".to_owned(), "20".to_owned());
    env
}

/// How often a wait polls.
const POLL: Duration = Duration::from_millis(10);

/// An integrator's client of one node.
struct Client<'a> {
    http: reqwest::Client,
    node: &'a ServiceProcess,
    token: &'a str,
}

impl Client<'_> {
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.node.base_url))
            .header("API-Version", "1.0.0")
            .bearer_auth(self.token);
        if let Some(body) = body {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string()).json(&body);
        }
        let response = request.send().await.expect("request");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, body) = self.send(Method::POST, path, Some(body)).await;
        assert_eq!(status, 201, "POST {path}: {body}");
        body
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body) = self.send(Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {body}");
        body
    }

    /// Every account, oldest first.
    async fn accounts(&self) -> Vec<Value> {
        let mut all = Vec::new();
        for page in 0.. {
            let body = self.get(&format!("/api/accounts?size=100&page={page}")).await;
            let content = body["content"].as_array().cloned().unwrap_or_default();
            if content.is_empty() {
                break;
            }
            all.extend(content);
        }
        all
    }
}

async fn provisioning_interrupted_by_sigkill_completes_once_after_restart(backend: Backend) {
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);

    // The API node serves every request of the test; it runs no jobs.
    let api = ServiceProcess::start(BINARY, &environment(&bed, "api")).await;
    let client = Client { http: reqwest::Client::new(), node: &api, token: &tenant.token };

    // The contract's deployment needs a worker: one runs until the contract is ACTIVE, and
    // stops cleanly, so that nothing provisions the accounts before the crash under test.
    client.post("/api/contracts", json!({ "assetId": "USD" })).await;
    let deployer = ServiceProcess::start(BINARY, &environment(&bed, "worker")).await;
    wait_until(Duration::from_secs(30), POLL, "the contract deployed", || async {
        client.get("/api/contracts/USD").await["status"] == "ACTIVE"
    })
    .await;
    assert!(deployer.terminate().await.success());

    client.post("/api/customers", json!({ "customerRef": "crash-customer" })).await;
    for i in 0..ACCOUNTS {
        let body = json!({ "accountRef": format!("acc-{i:03}"), "customerRef": "crash-customer", "assetId": "USD" });
        let created = client.post("/api/accounts", body).await;
        assert_eq!(created["status"], "PENDING");
    }
    assert_eq!(db.count("jobs", "kind = 'account.provision' AND status = 'queued'").await, ACCOUNTS as i64);
    assert_eq!(db.count("accounts", "status = 'PENDING'").await, ACCOUNTS as i64, "no worker, no provisioning");

    // A worker starts provisioning and is killed while it holds leases.
    let worker = ServiceProcess::start(BINARY, &environment(&bed, "worker")).await;
    wait_until(Duration::from_secs(20), POLL, "a leased account.provision job", || async {
        db.count("jobs", "kind = 'account.provision' AND status = 'running'").await > 0
    })
    .await;
    worker.kill9().await;
    let interrupted = db.count("jobs", "kind = 'account.provision' AND status = 'running'").await;
    assert!(interrupted > 0, "the kill must find leased provisioning jobs");
    let done_before = db.count("jobs", "kind = 'account.provision' AND status = 'done'").await;
    assert!(done_before < ACCOUNTS as i64, "the kill came before the end");
    // Wallets a killed attempt created but never recorded are orphans in custody, harmless;
    // a wallet recorded on a still PENDING account is the one the retry must use.
    let keys_before = db.count("custody_keys", "").await;
    let recorded: BTreeMap<String, String> = db
        .strings(
            "SELECT account_ref || '=' || wallet_address FROM accounts \
             WHERE status = 'PENDING' AND wallet_address IS NOT NULL",
        )
        .await
        .into_iter()
        .filter_map(|row| row.split_once('=').map(|(a, w)| (a.to_owned(), w.to_owned())))
        .collect();
    eprintln!(
        "killed with {interrupted} provisioning jobs leased, {done_before} done, {} wallets recorded on PENDING accounts",
        recorded.len()
    );

    // After a restart, every account reaches an outcome.
    let restarted = ServiceProcess::start(BINARY, &environment(&bed, "worker")).await;
    wait_until(Duration::from_secs(90), POLL, "every account ACTIVE or FAILED", || async {
        db.count("accounts", "status IN ('ACTIVE', 'FAILED')").await == ACCOUNTS as i64
    })
    .await;
    wait_until(Duration::from_secs(30), POLL, "every provisioning job finished", || async {
        db.count("jobs", "kind = 'account.provision' AND status IN ('queued', 'running')").await == 0
    })
    .await;
    assert_eq!(db.count("jobs", "kind = 'account.provision' AND status = 'dead'").await, 0);

    let accounts = client.accounts().await;
    assert_eq!(accounts.len(), ACCOUNTS);
    let mut wallets = BTreeSet::new();
    for account in &accounts {
        let account_ref = account["accountRef"].as_str().expect("accountRef");
        assert_eq!(account["status"], "ACTIVE", "a crash is no reason to fail provisioning: {account}");
        let wallet = account["walletAddress"].as_str().expect("an ACTIVE account has a wallet");
        assert!(wallets.insert(wallet.to_owned()), "wallet {wallet} of {account_ref} is another account's too");
        if let Some(before) = recorded.get(account_ref) {
            assert_eq!(wallet, before, "{account_ref} kept the wallet recorded before the kill");
        }
        assert_eq!(db.count("custody_keys", &format!("address = '{wallet}'")).await, 1, "custody holds {wallet}");
        let outcomes = db
            .count(
                "events",
                &format!(
                    "resource_type = 'account' AND resource_id = '{account_ref}' \
                     AND event_type IN ('account.provisioned', 'account.provisioning_failed')"
                ),
            )
            .await;
        assert_eq!(outcomes, 1, "{account_ref} has exactly one outcome event");
        let balance = client.get(&format!("/api/accounts/{account_ref}/balances")).await;
        assert_eq!(balance["total"], "0.00");
    }
    assert_eq!(db.count("events", "event_type = 'account.provisioned'").await, ACCOUNTS as i64);
    assert_eq!(db.count("events", "event_type = 'account.provisioning_failed'").await, 0);
    assert!(db.count("custody_keys", "").await >= keys_before);
    // The API shows the same: one account.provisioned per account.
    let mut listed = 0;
    let mut cursor: Option<String> = None;
    loop {
        let query = cursor.as_deref().map(|c| format!("&cursor={c}")).unwrap_or_default();
        let page = client.get(&format!("/api/webhook-events?type=account.provisioned&limit=100{query}")).await;
        listed += page["items"].as_array().map(Vec::len).unwrap_or(0);
        match page["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed, ACCOUNTS);

    // A graceful stop leaves no job leased.
    assert!(restarted.terminate().await.success());
    assert_eq!(db.count("jobs", "status = 'running'").await, 0);
    assert!(api.terminate().await.success());
}

backends!(provisioning_interrupted_by_sigkill_completes_once_after_restart);
