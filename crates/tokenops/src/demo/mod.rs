//! `tokenops demo`: starts the service on the embedded defaults and a fresh data directory, and
//! walks a bank's day through the public HTTP API, printing each step; ends with a summary and
//! exit 0, or names the step that failed and exits non-zero. `--keep` leaves the service running.

// The demo's output is its story, told to a person on standard output; the service's own log
// still goes through tracing.
#![allow(clippy::print_stdout)]

mod client;
mod receiver;

use anyhow::{Context, bail};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Sources};
use client::Api;
use receiver::Receiver;

/// What the command line chose.
pub struct DemoOptions {
    /// Where the service keeps its files; a fresh temporary directory when `None`.
    pub data_dir: Option<PathBuf>,
    /// Leave the service running after the summary, until Ctrl-C.
    pub keep: bool,
}

/// A step that failed: its name and why.
#[derive(Debug)]
pub struct StepFailed {
    pub step: String,
    pub error: anyhow::Error,
}

const PASSWORD: &str = "Demo-Password-2026!";
const OWNER: &str = "olivia.owner@demo-bank.example";
const CHECKER: &str = "carl.checker@demo-bank.example";
const TREASURER: &str = "tessa.treasurer@demo-bank.example";

/// Settings the demo gives the service unless the environment says otherwise.
fn service_settings(data_dir: &Path, port: u16, ca_file: &Path) -> BTreeMap<String, String> {
    let mut settings = BTreeMap::from([
        ("TOKENOPS_DATA_DIR".to_owned(), data_dir.display().to_string()),
        ("TOKENOPS_LISTEN".to_owned(), format!("127.0.0.1:{port}")),
        ("TOKENOPS_PUBLIC_URL".to_owned(), format!("http://127.0.0.1:{port}")),
        // The receiver is on loopback, which webhooks refuse unless allowed.
        ("TOKENOPS_WEBHOOK_ALLOW_CIDRS".to_owned(), "127.0.0.0/8".to_owned()),
        ("TOKENOPS_WEBHOOK_CA_FILE".to_owned(), ca_file.display().to_string()),
        ("TOKENOPS_LOG".to_owned(), "warn".to_owned()),
        ("TOKENOPS_SHUTDOWN_DRAIN_MS".to_owned(), "0".to_owned()),
    ]);
    let told: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("TOKENOPS_")).collect();
    settings.extend(told);
    settings
}

/// Runs the demo; the `Err` names the step that failed.
pub async fn run(options: DemoOptions) -> Result<(), StepFailed> {
    let setup = |error: anyhow::Error| StepFailed { step: "0. start the service".into(), error };
    let data_dir = match options.data_dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("tokenops-demo-{}", uuid::Uuid::now_v7().simple())),
    };
    std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display())).map_err(setup)?;
    let receiver = Receiver::start().await.map_err(setup)?;
    let ca_file = data_dir.join("demo-webhook-ca.pem");
    std::fs::write(&ca_file, &receiver.ca_pem).context("writing the receiver's CA").map_err(setup)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .context("finding a free port")
        .map_err(setup)?;
    let settings = service_settings(&data_dir, port, &ca_file);
    let config = Sources::from_parts(settings.clone())
        .and_then(|s| Config::load(&s))
        .map_err(|e| setup(anyhow::anyhow!("{e}")))?;
    let data_dir = config.data_dir.clone();
    println!("tokenops demo: a bank's day through the public API");
    println!(
        "   service data in {}, store {}",
        data_dir.display(),
        if settings.contains_key("TOKENOPS_DATABASE_URL") { "as configured" } else { "SQLite (embedded)" }
    );
    let stop = CancellationToken::new();
    let service = tokio::spawn(crate::serve::run_until(config, stop.clone()));
    let base = format!("http://127.0.0.1:{port}");
    let outcome = async {
        wait_ready(&base).await.map_err(setup)?;
        let mut day = Day::new(&base, &data_dir, receiver).map_err(setup)?;
        day.walk().await?;
        Ok::<Day, StepFailed>(day)
    }
    .await;
    match outcome {
        Ok(day) if options.keep => {
            day.print_keep_notes();
            let _ = tokio::signal::ctrl_c().await;
        }
        Ok(_) => {}
        Err(failed) => {
            stop.cancel();
            let _ = service.await;
            return Err(failed);
        }
    }
    stop.cancel();
    match service.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(error)) => Err(StepFailed { step: "stop the service".into(), error }),
        Err(error) => Err(StepFailed { step: "stop the service".into(), error: error.into() }),
    }
}

async fn wait_ready(base: &str) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(r) = client.get(format!("{base}/readyz")).send().await
            && r.status().is_success()
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the service did not become ready within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The day's state: the people's clients and what they made.
struct Day {
    api: Api,
    data_dir: PathBuf,
    receiver: Receiver,
    step: usize,
    tenant: String,
    owner: Option<Api>,
    checker: Option<Api>,
    treasurer: Option<Api>,
    operations: Vec<(String, String)>,
    audit_file: Option<PathBuf>,
}

impl Day {
    fn new(base: &str, data_dir: &Path, receiver: Receiver) -> anyhow::Result<Self> {
        Ok(Self {
            api: Api::new(base)?,
            data_dir: data_dir.to_owned(),
            receiver,
            step: 0,
            tenant: String::new(),
            owner: None,
            checker: None,
            treasurer: None,
            operations: Vec::new(),
            audit_file: None,
        })
    }

    fn owner(&self) -> anyhow::Result<&Api> {
        self.owner.as_ref().context("the owner has not signed in")
    }

    /// Prints the step's title; a failure inside is reported with it.
    fn begin(&mut self, title: &str) -> String {
        self.step += 1;
        let name = format!("{}. {title}", self.step);
        println!("\n== {name}");
        name
    }

    async fn walk(&mut self) -> Result<(), StepFailed> {
        macro_rules! step {
            ($title:expr, $body:expr) => {{
                let step = self.begin($title);
                $body.await.map_err(|error| StepFailed { step, error })?
            }};
        }
        step!("the platform operator creates the organisation", self.organisation());
        step!("the owner signs in and sets a password", self.owner_signs_in());
        step!("a checker and a treasurer are invited, activated and put in approval groups", self.people());
        step!("an EUR token contract, a customer and two accounts", self.books());
        step!("a webhook registration, its deliveries verified by the demo's receiver", self.webhook());
        step!("money in: a MINT of 50,000.00 EUR", self.mint());
        step!("a policy: transfers of 10,000.00 EUR and more need the checker, then the treasurer", self.policy());
        step!("a small transfer settles at once", self.small_transfer());
        step!("a large transfer waits, is approved by both, and settles", self.large_transfer());
        step!("a LOCK, and its RELEASE", self.lock_and_release());
        step!("the day's events reach the receiver", self.events_received());
        step!("the audit trail of the day, exported", self.audit_export());
        step!("summary", self.summary());
        Ok(())
    }

    async fn organisation(&mut self) -> anyhow::Result<()> {
        let path = self.data_dir.join("operator-credentials.json");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let credentials: Value = serde_json::from_str(&text).context("operator credentials")?;
        let id = credentials["clientId"].as_str().context("clientId")?;
        let secret = credentials["clientSecret"].as_str().context("clientSecret")?;
        println!("   the operator's credentials are in {}", path.display());
        let operator = self.api.as_caller(&self.api.client_token(id, secret).await?);
        let body =
            json!({ "name": "Demo Bank", "owner": { "email": OWNER, "firstName": "Olivia", "lastName": "Owner" } });
        let created = operator.call(Method::POST, "/api/tenants", Some(&body), 201).await?;
        self.tenant = created.body["id"].as_str().context("the organisation's id")?.to_owned();
        Ok(())
    }

    /// Reads the invitation from the mail outbox, then answers the first-password challenge.
    async fn sign_in_invited(&self, email: &str) -> anyhow::Result<Api> {
        let temporary = self.temporary_password(email).await?;
        println!("   the invitation to {email} is in the mail outbox, with a temporary password");
        let login = json!({ "email": email, "password": temporary });
        let challenged = self.api.call(Method::POST, "/api/auth/login", Some(&login), 200).await?;
        let session = challenged.body["session"].as_str().context("a NEW_PASSWORD_REQUIRED challenge")?;
        let answer = json!({ "email": email, "newPassword": PASSWORD, "session": session });
        let tokens = self.api.call(Method::POST, "/api/auth/new-password", Some(&answer), 200).await?;
        let token = tokens.body["accessToken"].as_str().context("an access token")?;
        Ok(self.api.as_caller(token))
    }

    async fn temporary_password(&self, email: &str) -> anyhow::Result<String> {
        let outbox = self.data_dir.join("outbox");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = std::fs::read_dir(&outbox).into_iter().flatten().flatten().find_map(|entry| {
                let text = std::fs::read_to_string(entry.path()).ok()?;
                if !text.lines().any(|l| l.trim_end() == format!("To: {email}")) {
                    return None;
                }
                text.lines().find_map(|l| l.strip_prefix("Temporary password: ").map(|p| p.trim().to_owned()))
            });
            if let Some(password) = found {
                return Ok(password);
            }
            if Instant::now() > deadline {
                bail!("no invitation to {email} in {} within 30 s", outbox.display());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn owner_signs_in(&mut self) -> anyhow::Result<()> {
        let owner = self.sign_in_invited(OWNER).await?;
        owner.call(Method::GET, "/api/users/me", None, 200).await?;
        self.owner = Some(owner);
        Ok(())
    }

    async fn people(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        let users = format!("/api/tenants/{}/users", self.tenant);
        let mut ids = Vec::new();
        for (email, first, last) in [(CHECKER, "Carl", "Checker"), (TREASURER, "Tessa", "Treasurer")] {
            let body = json!({ "email": email, "firstName": first, "lastName": last });
            let invited = owner.call(Method::POST, &users, Some(&body), 200).await?;
            ids.push(invited.body["id"].as_str().context("the user's id")?.to_owned());
        }
        self.checker = Some(self.sign_in_invited(CHECKER).await?);
        self.treasurer = Some(self.sign_in_invited(TREASURER).await?);
        let groups = format!("/api/tenants/{}/groups", self.tenant);
        for ((key, name), member) in [("checkers", "Checkers"), ("treasury", "Treasury")].into_iter().zip(&ids) {
            let created = owner.call(Method::POST, &groups, Some(&json!({ "key": key, "name": name })), 201).await?;
            let group = created.body["id"].as_str().context("the group's id")?;
            let body = json!({ "userId": member });
            owner.call(Method::POST, &format!("{groups}/{group}/members"), Some(&body), 201).await?;
        }
        Ok(())
    }

    /// Polls `path` until `field` leaves the in-flight values; fails on a timeout.
    async fn until_settled(&self, api: &Api, path: &str, field: &str) -> anyhow::Result<Value> {
        const IN_FLIGHT: &[&str] = &["PENDING", "SUBMITTED", "PENDING_SETTLEMENT", "SETTLING"];
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let answer = api.quiet(Method::GET, path, None).await?;
            let value = answer.body[field].as_str().unwrap_or_default().to_owned();
            if answer.status == 200 && !IN_FLIGHT.contains(&value.as_str()) {
                println!("   … {path}: {field} {value}");
                return Ok(answer.body);
            }
            if Instant::now() > deadline {
                bail!("{path} still {field}={value} after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn books(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        owner.call(Method::POST, "/api/contracts", Some(&json!({ "assetId": "EUR" })), 201).await?;
        expect(&self.until_settled(&owner, "/api/contracts/EUR", "status").await?, "status", "ACTIVE")?;
        let customer = json!({ "customerRef": "acme", "displayName": "ACME Trading Ltd" });
        owner.call(Method::POST, "/api/customers", Some(&customer), 201).await?;
        for account in ["acme-operating", "acme-reserve"] {
            let body = json!({ "accountRef": account, "customerRef": "acme", "assetId": "EUR" });
            owner.call(Method::POST, "/api/accounts", Some(&body), 201).await?;
            let path = format!("/api/accounts/{account}");
            expect(&self.until_settled(&owner, &path, "status").await?, "status", "ACTIVE")?;
        }
        Ok(())
    }

    async fn webhook(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        let body = json!({
            "url": self.receiver.url,
            "eventTypes": ["transaction.confirmed", "transaction.awaiting_approval", "approval.granted"],
        });
        let created = owner.call(Method::POST, "/api/webhooks", Some(&body), 201).await?;
        let secret = created.body["secret"].as_str().context("the registration's secret (shown once)")?;
        self.receiver.trust(secret);
        println!("   the receiver keeps the secret and checks every delivery's Webhook-Signature");
        Ok(())
    }

    async fn submit(&mut self, body: Value, expect_state: &str) -> anyhow::Result<(String, Value)> {
        let owner = self.owner()?.clone();
        let accepted = owner.call(Method::POST, "/api/transactions", Some(&body), 202).await?;
        let id = accepted.body["transactionId"].as_str().context("a transactionId")?.to_owned();
        let settled = self.until_settled(&owner, &format!("/api/transactions/{id}"), "state").await?;
        let label = format!("{} {}", body["txType"].as_str().unwrap_or("?"), body["amount"].as_str().unwrap_or(""));
        self.operations.push((id.clone(), label.trim().to_owned()));
        expect(&settled, "state", expect_state)?;
        Ok((id, settled))
    }

    async fn mint(&mut self) -> anyhow::Result<()> {
        let body = json!({ "txType": "MINT", "assetId": "EUR", "accountRef": "acme-operating", "amount": "50000.00" });
        self.submit(body, "CONFIRMED").await.map(|_| ())
    }

    async fn policy(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        let body = json!({ "templateKey": "system.transfer.approval", "content": four_eyes_policy() });
        let created = owner.call(Method::POST, "/api/policies", Some(&body), 201).await?;
        let id = created.body["id"].as_str().context("the policy's id")?;
        let activated = owner.call(Method::POST, &format!("/api/policies/{id}/activate"), None, 200).await?;
        expect(&activated.body, "status", "ACTIVE")
    }

    fn transfer(amount: &str) -> Value {
        json!({ "txType": "TRANSFER", "assetId": "EUR", "accountRef": "acme-operating",
                "counterpartyRef": "acme-reserve", "amount": amount })
    }

    async fn small_transfer(&mut self) -> anyhow::Result<()> {
        self.submit(Self::transfer("2500.00"), "CONFIRMED").await.map(|_| ())
    }

    async fn large_transfer(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        let body = Self::transfer("12500.00");
        let accepted = owner.call(Method::POST, "/api/transactions", Some(&body), 202).await?;
        let id = accepted.body["transactionId"].as_str().context("a transactionId")?.to_owned();
        self.operations.push((id.clone(), "TRANSFER 12500.00".into()));
        let waiting = self.until_settled(&owner, &format!("/api/transactions/{id}"), "state").await?;
        expect(&waiting, "state", "AWAITING_APPROVAL")?;
        let checker = self.checker.clone().context("the checker")?;
        let treasurer = self.treasurer.clone().context("the treasurer")?;
        let found = checker.call(Method::GET, &format!("/api/approvals/requests?resourceId={id}"), None, 200).await?;
        let request = found.body["data"][0]["id"].as_str().context("an approval request for the transfer")?;
        let request = checker.call(Method::GET, &format!("/api/approvals/requests/{request}"), None, 200).await?;
        let tasks: Vec<String> = request.body["tasks"]
            .as_array()
            .context("the request's tasks")?
            .iter()
            .filter_map(|t| t["id"].as_str().map(str::to_owned))
            .collect();
        let [first, second] = tasks.as_slice() else { bail!("two sequential tasks expected, found {}", tasks.len()) };
        println!("   the checker approves step 0, then the treasurer step 1");
        checker.call(Method::POST, &format!("/api/approvals/tasks/{first}/approve"), Some(&json!({})), 200).await?;
        treasurer.call(Method::POST, &format!("/api/approvals/tasks/{second}/approve"), Some(&json!({})), 200).await?;
        let settled = self.until_settled(&owner, &format!("/api/transactions/{id}"), "state").await?;
        expect(&settled, "state", "CONFIRMED")
    }

    async fn lock_and_release(&mut self) -> anyhow::Result<()> {
        let lock = json!({ "txType": "LOCK", "assetId": "EUR", "accountRef": "acme-operating",
                           "counterpartyRef": "acme-reserve", "amount": "1000.00" });
        let (lock_id, _) = self.submit(lock, "CONFIRMED").await?;
        let owner = self.owner()?.clone();
        owner.call(Method::GET, "/api/accounts/acme-operating/balances", None, 200).await?;
        let release = json!({ "txType": "RELEASE", "params": { "lockId": lock_id } });
        self.submit(release, "CONFIRMED").await.map(|_| ())
    }

    async fn events_received(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let deliveries = self.receiver.deliveries();
            let confirmed = deliveries.iter().filter(|d| d.event_type == "transaction.confirmed").count();
            let types: BTreeSet<&str> = deliveries.iter().map(|d| d.event_type.as_str()).collect();
            // Every operation of the day is CONFIRMED, and the approval events came.
            if confirmed >= self.operations.len() && types.contains("approval.granted") {
                let unverified = deliveries.iter().filter(|d| !d.verified && d.event_type != "webhook.test").count();
                if unverified > 0 {
                    bail!("{unverified} deliveries did not verify");
                }
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!(
                    "after 60 s the receiver has {confirmed} transaction.confirmed of {} and types {types:?}",
                    self.operations.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn audit_export(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        let exported = owner.call(Method::GET, "/api/audit/events/export", None, 200).await?;
        let csv = exported.body.as_str().context("CSV text")?;
        let path = self.data_dir.join("audit-trail.csv");
        std::fs::write(&path, csv).with_context(|| format!("writing {}", path.display()))?;
        println!(
            "   {} audit records (and a header row) written to {}",
            csv.lines().count().saturating_sub(1),
            path.display()
        );
        for line in csv.lines().take(4) {
            println!("   | {}", line.chars().take(150).collect::<String>());
        }
        self.audit_file = Some(path);
        Ok(())
    }

    async fn summary(&mut self) -> anyhow::Result<()> {
        let owner = self.owner()?.clone();
        println!("   balances:");
        for account in ["acme-operating", "acme-reserve"] {
            let b = owner.quiet(Method::GET, &format!("/api/accounts/{account}/balances"), None).await?.body;
            println!(
                "     {account:<16} total {:>10}  available {:>10}  locked {:>8} EUR",
                text(&b["total"]),
                text(&b["available"]),
                text(&b["locked"])
            );
        }
        println!("   operations:");
        for (id, label) in &self.operations {
            let o = owner.quiet(Method::GET, &format!("/api/transactions/{id}"), None).await?.body;
            println!("     {label:<20} {:<10} block {:<4} {id}", text(&o["state"]), text(&o["blockNumber"]));
        }
        let mut received: BTreeMap<String, usize> = BTreeMap::new();
        for delivery in self.receiver.deliveries() {
            *received.entry(delivery.event_type).or_default() += 1;
        }
        println!("   webhook events received (signatures verified): {received:?}");
        if let Some(path) = &self.audit_file {
            println!("   audit trail: {}", path.display());
        }
        println!("\nThe demo's day ended well.");
        Ok(())
    }

    fn print_keep_notes(&self) {
        println!("\nThe service keeps running at {} (Ctrl-C stops it). Carry on with curl:", self.api.base);
        println!(
            "   owner: {OWNER} / {PASSWORD}; checker: {CHECKER} / {PASSWORD}; treasurer: {TREASURER} / {PASSWORD}"
        );
        println!(
            "   TOKEN=$(curl -s {}/api/auth/login -H 'API-Version: 1.0.0' -H 'Content-Type: application/json' \\",
            self.api.base
        );
        println!("       -d '{{\"email\": \"{OWNER}\", \"password\": \"{PASSWORD}\"}}' | jq -r .accessToken)");
        println!(
            "   curl -s {}/api/transactions -H 'API-Version: 1.0.0' -H \"Authorization: Bearer $TOKEN\"",
            self.api.base
        );
    }
}

/// The demo's policy content, which the pipeline's behaviour tests run too: EUR transfers of
/// 10,000.00 and more need `#checkers` at step 0, then `#treasury` at step 1; smaller ones are
/// approved automatically.
pub fn four_eyes_policy() -> Value {
    json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [
            { "id": "large-checker", "when": { "assetId": "== EUR", "amount": ">= 10000" },
              "emit": { "approver": "#checkers", "step": 0, "reason": "10,000.00 EUR or more" } },
            { "id": "large-treasury", "when": { "assetId": "== EUR", "amount": ">= 10000" },
              "emit": { "approver": "#treasury", "step": 1, "reason": "10,000.00 EUR or more" } },
            { "id": "small", "when": { "assetId": "== EUR", "amount": "[0 .. 10000)" },
              "emit": { "autoApproval": true } },
        ],
        "defaults": { "unmatched": "AUTO_APPROVE" },
    })
}

fn text(value: &Value) -> String {
    value.as_str().map_or_else(|| value.to_string(), str::to_owned)
}

fn expect(body: &Value, field: &str, wanted: &str) -> anyhow::Result<()> {
    match body[field].as_str() {
        Some(value) if value == wanted => Ok(()),
        _ => bail!("expected {field} {wanted}, got {}", client::compact(body)),
    }
}
