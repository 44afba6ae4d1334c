//! Crash safety of the four-eyes flow, with the real binary and its embedded identity
//! provider: an ACTIVE policy holds USD transfers of 1,000.00 and more for `#checkers`. The
//! service is killed with SIGKILL while transfers are submitted and some already wait for
//! approval, restarted, and killed again while a checker's approvals are on their way (sent
//! concurrently, each resent with its key until answered). Afterwards every approved transfer
//! is CONFIRMED exactly once (one ledger transaction, one `transaction.confirmed`), every
//! rejected one FAILED APPROVAL_REJECTED, every small one CONFIRMED, nothing is left in between,
//! and the balances equal the confirmed operations.

use crate::BINARY;
use crate::crash_load::{
    Answer, Answered, Client, Detail, Planned, Rng, balances, body, crash_load_environment, eventually,
    evidence_report, open_accounts, operations, tx_hashes, wait_until,
};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::PoisonError;
use std::time::{Duration, Instant};
use tokenops_testkit::organisation::{NEW_PASSWORD, temporary_password_in};
use tokenops_testkit::{Backend, ServiceProcess, TestDb, backends};

backends!(approved_operations_settle_exactly_once_across_sigkills_while_waiting_and_while_approving);

/// Transfers submitted by each of the submitter's concurrent clients, half of them large.
const PER_CLIENT: usize = 10;
const CLIENTS: usize = 3;
/// Large transfers the checker rejects; the others she approves.
const REJECTED: usize = 5;
/// The first kill comes once this many transfers wait for approval.
const KILL_WHEN_WAITING: i64 = 4;
/// The second kill comes once this many approvals have been granted.
const KILL_WHEN_GRANTED: i64 = 3;
/// The approvals go out this far apart, so the kill finds some granted and some not.
const APPROVAL_STAGGER: Duration = Duration::from_millis(40);
/// Every token is issued for this public URL, so that it stays valid across restarts (each
/// start listens on a port of its own).
const PUBLIC_URL: &str = "http://tokenops.crash.test";
const POLL: Duration = Duration::from_millis(5);
/// Operation states on the way to CONFIRMED or FAILED.
const BETWEEN: &str = "state NOT IN ('CONFIRMED', 'FAILED', 'CANCELLED')";

fn environment(db: &TestDb) -> BTreeMap<String, String> {
    let mut env = db.service_settings();
    env.insert("TOKENOPS_PUBLIC_URL".to_owned(), PUBLIC_URL.to_owned());
    env.insert("TOKENOPS_MAIL_TRANSPORT".to_owned(), "file".to_owned());
    crash_load_environment(&mut env);
    // The pipeline must hand every operation on by itself: the sweep that resumes one no job
    // carries is kept out, so such an operation shows.
    env.insert("TOKENOPS_RESUME_SWEEP_SECS".to_owned(), "86400".to_owned());
    env.insert("TOKENOPS_LOG".to_owned(), "error".to_owned());
    env
}

/// The embedded provider's way in, over HTTP against the child process: the operator's client
/// credentials, then for each person the invitation's temporary password from the file outbox,
/// login, and the NEW_PASSWORD_REQUIRED challenge.
struct Identity<'a> {
    http: reqwest::Client,
    base: String,
    data_dir: &'a Path,
}

impl Identity<'_> {
    async fn operator_token(&self) -> String {
        let text = std::fs::read_to_string(self.data_dir.join("operator-credentials.json")).expect("credentials");
        let credentials: Value = serde_json::from_str(&text).expect("credentials JSON");
        let reply = self
            .http
            .post(format!("{}/idp/oauth2/token", self.base))
            .basic_auth(credentials["clientId"].as_str().expect("clientId"), credentials["clientSecret"].as_str())
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .expect("token request");
        assert_eq!(reply.status().as_u16(), 200, "the token endpoint refused the operator");
        reply.json::<Value>().await.expect("token JSON")["access_token"].as_str().expect("access_token").to_owned()
    }

    async fn post(&self, path: &str, body: &Value) -> Value {
        let reply = self.http.post(format!("{}{path}", self.base)).header("API-Version", "1.0.0").json(body);
        let reply = reply.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(reply.status().as_u16(), 200, "{path}");
        reply.json().await.expect("JSON")
    }

    /// Waits for the invitation mail (the service's mail job writes it), then activates.
    async fn activate(&self, email: &str) -> String {
        let mut temporary = None;
        wait_until(Duration::from_secs(20), Duration::from_millis(20), "the invitation mail", || {
            temporary = temporary_password_in(self.data_dir, email);
            std::future::ready(temporary.is_some())
        })
        .await;
        let temporary = temporary.unwrap_or_default();
        let challenged = self.post("/api/auth/login", &json!({ "email": email, "password": temporary })).await;
        assert_eq!(challenged["challenge"], "NEW_PASSWORD_REQUIRED", "{challenged}");
        let body = json!({ "email": email, "newPassword": NEW_PASSWORD, "session": challenged["session"] });
        let tokens = self.post("/api/auth/new-password", &body).await;
        tokens["accessToken"].as_str().expect("access token").to_owned()
    }
}

/// A request of the test's own that must succeed with `status`.
async fn expect(client: &Client, method: Method, path: &str, body: Option<Value>, status: u16) -> Value {
    let (got, reply) = client.call(method, path, body).await;
    assert_eq!(got, status, "{path}: {reply}");
    reply
}

/// The checker's decision on `task`, sent with `key` until it is answered.
async fn decide(client: &Client, task: &str, verb: &str, key: &str) -> Answered {
    let path = format!("/api/approvals/tasks/{task}/{verb}");
    client.post_until_answered(&path, key, &json!({}), &format!("{verb} {task}")).await
}

/// Client `c`'s transfers from acc-0 to acc-1, alternately small and large.
fn plan(c: usize) -> Vec<Planned> {
    let mut rng = Rng::seeded(0xA5A5 + c as u64, 2);
    (0..PER_CLIENT)
        .map(|i| {
            let amount = if i % 2 == 0 { rng.cents(1, 999) } else { rng.cents(1_000, 5_000) };
            Planned::Single { key: format!("approvals-crash-{c}-{i:02}"), body: body("TRANSFER", 0, Some(1), amount) }
        })
        .collect()
}

async fn approved_operations_settle_exactly_once_across_sigkills_while_waiting_and_while_approving(backend: Backend) {
    tokenops_identity::install_crypto_provider();
    let started = Instant::now();
    let db = TestDb::create(backend).await;
    let env = environment(&db);
    let mut service = ServiceProcess::start(BINARY, &env).await;

    // The organisation: its owner sets everything up, alice submits, carol checks.
    let identity = Identity { http: reqwest::Client::new(), base: service.base_url.clone(), data_dir: db.dir() };
    let operator = identity.operator_token().await;
    let owner_email = "olivia@bank.example";
    let organisation =
        json!({ "name": "Crash Bank", "owner": { "email": owner_email, "firstName": "Olivia", "lastName": "Owner" } });
    let operator_client = Client::new(&service.base_url, &operator, Duration::from_millis(50), 0);
    let tenant = expect(&operator_client, Method::POST, "/api/tenants", Some(organisation), 201).await;
    let tenant = tenant["id"].as_str().expect("tenant id").to_owned();
    let owner = Client { token: identity.activate(owner_email).await, ..operator_client.clone() };
    let mut people = Vec::new();
    for (email, first) in [("alice@bank.example", "Alice"), ("carol@bank.example", "Carol")] {
        let body = json!({ "email": email, "firstName": first, "lastName": "Tester" });
        let invited = expect(&owner, Method::POST, &format!("/api/tenants/{tenant}/users"), Some(body), 200).await;
        let id = invited["id"].as_str().expect("user id").to_owned();
        people.push((id, Client { token: identity.activate(email).await, ..owner.clone() }));
    }
    let [(_, alice), (carol_id, carol)]: [(String, Client); 2] = people.try_into().unwrap_or_else(|_| panic!("two"));
    let groups = format!("/api/tenants/{tenant}/groups");
    let group =
        expect(&owner, Method::POST, &groups, Some(json!({ "key": "checkers", "name": "Checkers" })), 201).await;
    let members = format!("{groups}/{}/members", group["id"].as_str().expect("group id"));
    expect(&owner, Method::POST, &members, Some(json!({ "userId": carol_id })), 201).await;

    // acc-0 holds 100,000.00 USD; the policy holds transfers of 1,000.00 and more.
    open_accounts(&owner, &db, 2).await;
    let (minted, _) = owner.submit("approvals-crash-mint", &body("MINT", 0, None, 10_000_000)).await;
    assert!(matches!(minted, Answer::Accepted(_)), "{}", minted.describe());
    wait_until(Duration::from_secs(20), POLL, "the mint CONFIRMED", || async {
        db.count("operations", "tx_type = 'MINT' AND state = 'CONFIRMED'").await == 1
    })
    .await;
    let content = json!({
        "appliesTo": { "action": "TRANSFER" },
        "rules": [
            { "id": "large", "when": { "assetId": "== USD", "amount": ">= 1000" },
              "emit": { "approver": "#checkers", "step": 0, "reason": "four eyes" } },
            { "id": "small", "when": { "assetId": "== USD", "amount": "[0 .. 1000)" }, "emit": { "autoApproval": true } },
        ],
        "defaults": { "unmatched": "AUTO_APPROVE" },
    });
    let policy = json!({ "templateKey": "system.transfer.approval", "content": content });
    let policy = expect(&owner, Method::POST, "/api/policies", Some(policy), 201).await;
    let activate = format!("/api/policies/{}/activate", policy["id"].as_str().expect("policy id"));
    expect(&owner, Method::POST, &activate, None, 200).await;
    eprintln!("approvals_crash ({backend:?}): organisation, accounts and policy ready after {:?}", started.elapsed());

    // Kill 1: while transfers are submitted and some already wait for approval.
    let clients: Vec<_> = (0..CLIENTS).map(|c| tokio::spawn(alice.clone().run(plan(c)))).collect();
    wait_until(Duration::from_secs(30), POLL, "transfers waiting for approval", || async {
        db.count("operations", "state = 'AWAITING_APPROVAL'").await >= KILL_WHEN_WAITING
    })
    .await;
    service.kill9().await;
    let waiting_at_kill = db.count("operations", "state = 'AWAITING_APPROVAL'").await;
    let submitted_at_kill = db.count("operations", "tx_type = 'TRANSFER'").await;
    service = ServiceProcess::start(BINARY, &env).await;
    *owner.node.write().unwrap_or_else(PoisonError::into_inner) = service.base_url.clone();
    eprintln!(
        "approvals_crash ({backend:?}): killed with {waiting_at_kill} of {submitted_at_kill} transfers waiting for approval"
    );
    let mut accepted = Vec::new();
    for c in clients {
        for s in c.await.expect("client") {
            match s.answer {
                Answer::Accepted(id) => accepted.push(id),
                other => panic!("transfer {} was not accepted: {}", s.key, other.describe()),
            }
        }
    }
    assert_eq!(accepted.len(), CLIENTS * PER_CLIENT);
    let large_total = (CLIENTS * PER_CLIENT / 2) as i64;
    assert!(submitted_at_kill < (CLIENTS * PER_CLIENT) as i64 || waiting_at_kill < large_total, "the kill came late");

    // Every large transfer ends up waiting, every small one settles.
    wait_until(Duration::from_secs(30), Duration::from_millis(50), "evaluation after the restart", || async {
        db.count("operations", "state = 'AWAITING_APPROVAL'").await == large_total
            && db.count("operations", "tx_type = 'TRANSFER' AND state = 'CONFIRMED'").await
                == (CLIENTS * PER_CLIENT) as i64 - large_total
    })
    .await;

    // Carol's task for each held transfer.
    let held: BTreeSet<String> = db
        .strings("SELECT CAST(id AS TEXT) FROM operations WHERE state = 'AWAITING_APPROVAL'")
        .await
        .into_iter()
        .collect();
    let mut tasks: Vec<(String, String)> = Vec::new();
    for id in &held {
        let found = expect(&owner, Method::GET, &format!("/api/approvals/requests?resourceId={id}"), None, 200).await;
        let requests = found["data"].as_array().expect("data");
        assert_eq!(requests.len(), 1, "one request for {id}: {found}");
        let request_id = requests[0]["id"].as_str().expect("request id");
        let request = expect(&owner, Method::GET, &format!("/api/approvals/requests/{request_id}"), None, 200).await;
        let request_tasks = request["tasks"].as_array().expect("tasks");
        assert_eq!(request_tasks.len(), 1, "{request}");
        tasks.push((id.clone(), request_tasks[0]["id"].as_str().expect("task id").to_owned()));
    }
    let (rejected, approved) = tasks.split_at(REJECTED);
    for (operation, task) in rejected {
        let Answered { status, reply, .. } = decide(&carol, task, "reject", &format!("reject-{operation}")).await;
        assert_eq!(status, 200, "reject {operation}: {reply}");
    }

    // Kill 2: while the approvals are on their way.
    let approving: Vec<_> = approved
        .iter()
        .enumerate()
        .map(|(i, (operation, task))| {
            let (carol, operation, task) = (carol.clone(), operation.clone(), task.clone());
            tokio::spawn(async move {
                tokio::time::sleep(APPROVAL_STAGGER * i as u32).await;
                let answered = decide(&carol, &task, "approve", &format!("approve-{operation}")).await;
                (operation, answered)
            })
        })
        .collect();
    wait_until(Duration::from_secs(30), Duration::from_millis(2), "approvals granted", || async {
        db.count("approval_requests", "status = 'APPROVED'").await >= KILL_WHEN_GRANTED
    })
    .await;
    service.kill9().await;
    let granted_at_kill = db.count("approval_requests", "status = 'APPROVED'").await;
    service = ServiceProcess::start(BINARY, &env).await;
    *owner.node.write().unwrap_or_else(PoisonError::into_inner) = service.base_url.clone();
    eprintln!("approvals_crash ({backend:?}): killed with {granted_at_kill} of {} approvals granted", approved.len());
    assert!(granted_at_kill < approved.len() as i64, "the kill came after every approval");
    let mut resent = 0;
    for task in approving {
        let (operation, Answered { status, reply, sends, .. }) = task.await.expect("approval");
        assert_eq!(status, 200, "approve {operation}: {reply}");
        resent += usize::from(sends > 1);
    }
    eprintln!("approvals_crash ({backend:?}): {resent} approvals were sent again after the kill");

    // Nothing stays between states.
    let settled = eventually(Duration::from_secs(30), || async { db.count("operations", BETWEEN).await == 0 }).await;
    let mut violations = Vec::new();
    if !settled {
        let open = db.strings(&format!("SELECT CAST(id AS TEXT) FROM operations WHERE {BETWEEN}")).await;
        let report = evidence_report(&db, open.iter().map(String::as_str), Detail::Brief).await;
        violations.push(format!("{} operations never settled:\n{report}", open.len()));
    }
    let rows = operations(&db).await;
    let state = |id: &str| {
        rows.iter().find(|r| r.id == id).map(|r| (r.state.clone(), r.failure_code.clone())).unwrap_or_default()
    };
    let confirmed_events: Vec<String> =
        db.strings("SELECT CAST(resource_id AS TEXT) FROM events WHERE event_type = 'transaction.confirmed'").await;
    let confirmations = |id: &str| confirmed_events.iter().filter(|e| e.as_str() == id).count();
    for (operation, _) in approved {
        let got = state(operation);
        if got.0 != "CONFIRMED" || confirmations(operation) != 1 {
            violations
                .push(format!("approved {operation}: {got:?}, {} transaction.confirmed", confirmations(operation)));
        }
    }
    for (operation, _) in rejected {
        let got = state(operation);
        if got != ("FAILED".to_owned(), "APPROVAL_REJECTED".to_owned()) || confirmations(operation) != 0 {
            violations
                .push(format!("rejected {operation}: {got:?}, {} transaction.confirmed", confirmations(operation)));
        }
    }
    for id in accepted.iter().filter(|id| !held.contains(*id)) {
        if state(id).0 != "CONFIRMED" || confirmations(id) != 1 {
            violations.push(format!("small {id}: {:?}, {} transaction.confirmed", state(id), confirmations(id)));
        }
    }
    let granted = db.count("approval_requests", "status = 'APPROVED'").await;
    let refused = db.count("approval_requests", "status = 'REJECTED'").await;
    if (granted, refused) != (approved.len() as i64, REJECTED as i64) {
        violations.push(format!("requests APPROVED {granted}, REJECTED {refused}"));
    }
    let granted_events = db.count("events", "event_type = 'approval.granted'").await;
    if granted_events != approved.len() as i64 {
        violations.push(format!("{granted_events} approval.granted events for {} approvals", approved.len()));
    }
    let (_, shared) = tx_hashes(&rows);
    violations.extend(shared);
    violations.extend(balances(&owner, &db, &rows, 2).await.violations);
    assert!(violations.is_empty(), "approvals_crash ({backend:?}):\n{}", violations.join("\n"));
    eprintln!("approvals_crash ({backend:?}): passed in {:?}", started.elapsed());
}
