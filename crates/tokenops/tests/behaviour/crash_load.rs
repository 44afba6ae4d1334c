//! What the tests of the real binary share: the service's settings; for the crash tests
//! (`transactions_crash`, `postgres_crash`), a deterministic plan of token operations, the
//! clients that submit it and resend what was not answered with the same key, and the reading
//! of what the store holds afterwards. The tests differ only in what they do to the service or
//! its database meanwhile, and in what they check.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokenops_testkit::cluster::PgCluster;
use tokenops_testkit::{TestDb, Testbed};

/// How long one client keeps resending one submission (or less, at its `give_up_at`): longer
/// than an outage or a restart of the service, than a RELEASE waiting for its LOCK queued
/// behind a few hundred operations after a restart, and than a LOCK waiting behind a nonce gap
/// until the gap sweep (10 s of grace, every 5 s) fills it. Since a recounted nonce slot no
/// longer hands a recorded signature's nonce to another transaction, a LOCK after a restart on
/// PostgreSQL has been seen to take more than 30 s to settle: hence 90 s.
pub(crate) const REQUEST_DEADLINE: Duration = Duration::from_secs(90);

/// Drops the test's PostgreSQL schema when the test ends, passed or failed.
pub(crate) struct DropSchema<'a>(pub(crate) &'a TestDb);

impl Drop for DropSchema<'_> {
    fn drop(&mut self) {
        self.0.drop_schema();
    }
}

/// The settings of a node in a test that kills job runners: short leases, a few workers
/// polling ten times a second.
pub(crate) fn job_crash_environment(bed: &Testbed, role: &str) -> BTreeMap<String, String> {
    let mut env = bed.environment(role);
    env.insert("TOKENOPS_JOB_LEASE_MS".to_owned(), "1500".to_owned());
    env.insert("TOKENOPS_WORKER_CONCURRENCY".to_owned(), "4".to_owned());
    env.insert("TOKENOPS_WORKER_POLL_MS".to_owned(), "100".to_owned());
    env
}

/// The settings of a node under crash load, on top of the store's and the identity
/// provider's: one node of every role on the embedded ledger, with short leases, polls and
/// backoffs, so that the pipeline resumes quickly after a crash.
pub(crate) fn crash_load_environment(env: &mut BTreeMap<String, String>) {
    env.insert("TOKENOPS_ROLE".to_owned(), "all".to_owned());
    env.insert("TOKENOPS_LEDGER".to_owned(), "embedded".to_owned());
    env.insert("TOKENOPS_JOB_LEASE_MS".to_owned(), "1500".to_owned());
    env.insert("TOKENOPS_WORKER_POLL_MS".to_owned(), "50".to_owned());
    env.insert("TOKENOPS_WORKER_CONCURRENCY".to_owned(), "8".to_owned());
    env.insert("TOKENOPS_JOB_BACKOFF_BASE_MS".to_owned(), "50".to_owned());
    env.insert("TOKENOPS_JOB_BACKOFF_CAP_MS".to_owned(), "500".to_owned());
    env.insert("TOKENOPS_RECEIPT_POLL_MS".to_owned(), "50".to_owned());
    env.insert("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS".to_owned(), "50".to_owned());
    // A request killed mid-flight blocks its key for one claim lease: keep it short.
    env.insert("TOKENOPS_IDEMPOTENCY_LEASE_MS".to_owned(), "1000".to_owned());
}

/// The few queries the shared steps ask of a store, whichever way the test holds it.
pub(crate) trait Sql {
    /// The first column of every row of `sql`, as text.
    async fn strings(&self, sql: &str) -> Vec<String>;
    /// Counts the rows of `table` (optionally filtered by a WHERE clause).
    async fn count(&self, table: &str, condition: &str) -> i64;
}

impl Sql for TestDb {
    async fn strings(&self, sql: &str) -> Vec<String> {
        TestDb::strings(self, sql).await
    }

    async fn count(&self, table: &str, condition: &str) -> i64 {
        TestDb::count(self, table, condition).await
    }
}

impl Sql for PgCluster {
    async fn strings(&self, sql: &str) -> Vec<String> {
        PgCluster::strings(self, sql).await
    }

    async fn count(&self, table: &str, condition: &str) -> i64 {
        PgCluster::count(self, table, condition).await
    }
}

/// Polls `check` every `poll` until it holds or the deadline passes; `false` when it never held.
async fn poll_until<F, Fut>(deadline: Duration, poll: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        // A check that hangs (a read the store never answers) runs out the same deadline.
        match tokio::time::timeout(left, check()).await {
            Ok(true) => return true,
            Ok(false) => tokio::time::sleep(poll).await,
            Err(_) => return false,
        }
    }
    false
}

/// Polls `check` until it holds or the deadline passes; `false` when it never held.
pub(crate) async fn eventually<F, Fut>(deadline: Duration, check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    poll_until(deadline, Duration::from_millis(100), check).await
}

/// Polls `check` every `poll` until it holds; panics, naming `what`, when the deadline passes.
pub(crate) async fn wait_until<F, Fut>(deadline: Duration, poll: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    if !poll_until(deadline, poll, check).await {
        panic!("timed out waiting for: {what}");
    }
}

/// Minor units of a two-decimal amount ("1234.50" is 123450).
pub(crate) fn cents(text: &str) -> i64 {
    let (units, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let units: i64 = units.parse().unwrap_or_else(|_| panic!("amount {text:?}"));
    let fraction: i64 = format!("{fraction:0<2}").parse().unwrap_or_else(|_| panic!("amount {text:?}"));
    units * 100 + fraction
}

pub(crate) fn amount_text(minor_units: i64) -> String {
    format!("{}.{:02}", minor_units / 100, minor_units % 100)
}

pub(crate) fn account(i: usize) -> String {
    format!("acc-{i}")
}

/// A deterministic generator (xorshift64), so every run submits the same plan (and, where a
/// test draws them from it, crashes at the same moments), over `accounts` accounts.
pub(crate) struct Rng {
    state: u64,
    accounts: usize,
}

impl Rng {
    /// Starts from `state` itself.
    pub(crate) fn from_state(state: u64, accounts: usize) -> Self {
        Self { state, accounts }
    }

    /// Starts from a state spread out from `seed` (never zero).
    pub(crate) fn seeded(seed: u64, accounts: usize) -> Self {
        Self::from_state(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1, accounts)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 7;
        self.state ^= self.state << 17;
        self.state % n
    }

    pub(crate) fn account(&mut self) -> usize {
        self.below(self.accounts as u64) as usize
    }

    pub(crate) fn two_accounts(&mut self) -> (usize, usize) {
        let from = self.account();
        let to = (from + 1 + self.below(self.accounts as u64 - 1) as usize) % self.accounts;
        (from, to)
    }

    pub(crate) fn cents(&mut self, from_units: u64, to_units: u64) -> i64 {
        (from_units * 100 + self.below((to_units - from_units) * 100 + 1)) as i64
    }
}

/// One step of a client's plan.
#[derive(Debug, Clone)]
pub(crate) enum Planned {
    Single {
        key: String,
        body: Value,
    },
    /// A LOCK, then the RELEASE or CANCEL of its lock (submitted `completion_after_steps` later).
    Lock {
        key: String,
        body: Value,
        completion_key: String,
        completion: &'static str,
    },
}

pub(crate) fn body(tx_type: &str, owner: usize, counterparty: Option<usize>, amount: i64) -> Value {
    let mut body =
        json!({ "txType": tx_type, "assetId": "USD", "accountRef": account(owner), "amount": amount_text(amount) });
    if let Some(other) = counterparty {
        body["counterpartyRef"] = json!(account(other));
    }
    body
}

/// An amount no account ever holds: the operation must fail on the ledger.
pub(crate) const OVERDRAFT: i64 = 999_999_999;

/// How a client's plan mixes its submissions, as bounds on a roll from 0 to 99: below
/// `transfers` a transfer, then below each next bound an overdrawn transfer, a mint, a burn and
/// an overdrawn burn; from `locks` on, a LOCK followed by a RELEASE or CANCEL.
pub(crate) struct Mix {
    pub(crate) transfers: u64,
    pub(crate) overdrawn_transfers: u64,
    pub(crate) mints: u64,
    pub(crate) burns: u64,
    pub(crate) locks: u64,
}

/// Client `c`'s `quota` submissions, drawn from `rng`: an opening mint into each account, then
/// the `mix`. Every one is valid at the API, so every one must end 202 (a RELEASE or CANCEL only
/// if its LOCK did not fail). Each has its own Idempotency-Key, `{prefix}-{c:02}-{n:03}`.
pub(crate) fn plan(mut rng: Rng, c: usize, quota: usize, prefix: &str, mix: &Mix) -> Vec<Planned> {
    let accounts = rng.accounts;
    let mut steps = Vec::new();
    let mut count = 0;
    let key = |count: &mut usize| {
        *count += 1;
        format!("{prefix}-{c:02}-{:03}", *count)
    };
    for k in 0..accounts {
        let amount = rng.cents(1_000, 3_000);
        steps.push(Planned::Single { key: key(&mut count), body: body("MINT", (c + k) % accounts, None, amount) });
    }
    while count < quota {
        let roll = rng.below(100);
        if roll >= mix.locks && quota - count >= 2 {
            let owner = rng.account();
            let payee = (rng.below(2) == 0).then(|| (owner + 1 + rng.below(accounts as u64 - 1) as usize) % accounts);
            let completion = if rng.below(5) < 3 { "RELEASE" } else { "CANCEL" };
            let lock_key = key(&mut count);
            let body = body("LOCK", owner, payee, rng.cents(1, 300));
            steps.push(Planned::Lock { key: lock_key, body, completion_key: key(&mut count), completion });
            continue;
        }
        let body = match roll {
            r if r < mix.transfers => {
                let (from, to) = rng.two_accounts();
                body("TRANSFER", from, Some(to), rng.cents(1, 400))
            }
            r if r < mix.overdrawn_transfers => {
                let (from, to) = rng.two_accounts();
                body("TRANSFER", from, Some(to), OVERDRAFT)
            }
            r if r < mix.mints => body("MINT", rng.account(), None, rng.cents(100, 600)),
            r if r < mix.burns => body("BURN", rng.account(), None, rng.cents(1, 150)),
            r if r < mix.locks => body("BURN", rng.account(), None, OVERDRAFT),
            // The last submission of a quota leaves no room for a LOCK and its completion.
            _ => {
                let (from, to) = rng.two_accounts();
                body("TRANSFER", from, Some(to), rng.cents(1, 400))
            }
        };
        steps.push(Planned::Single { key: key(&mut count), body });
    }
    steps
}

/// A request's final answer: its status and body, whether it was a replay, and how many sends
/// it took.
#[derive(Debug)]
pub(crate) struct Answered {
    pub(crate) status: u16,
    pub(crate) reply: Value,
    pub(crate) replayed: bool,
    pub(crate) sends: usize,
}

/// What the clients saw, summed over all of them.
#[derive(Default)]
pub(crate) struct Counters {
    /// Submissions with a final answer (anything but no answer, 5xx, 409 in flight, or 404
    /// for a lock not visible yet).
    pub(crate) answered: AtomicUsize,
    /// Sends that got no answer (connection refused or reset, timeout): resent.
    pub(crate) unanswered: AtomicUsize,
    pub(crate) server_errors: AtomicUsize,
    pub(crate) in_flight_409: AtomicUsize,
    pub(crate) lock_not_visible_404: AtomicUsize,
    /// 202s marked `Idempotent-Replayed`: the first send's effect committed, its answer was lost.
    pub(crate) replayed_202: AtomicUsize,
    /// What the 5xx answers said, by status and code.
    pub(crate) server_error_kinds: Mutex<BTreeMap<String, usize>>,
    /// Keys sent more than once.
    pub(crate) resent: Mutex<BTreeSet<String>>,
}

/// A final answer to one submission.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    Accepted(String),
    Refused(u16, Value),
    GaveUp(String),
}

impl Answer {
    pub(crate) fn describe(&self) -> String {
        match self {
            Answer::Accepted(id) => format!("202 {id}"),
            Answer::Refused(status, reply) => format!("{status} {reply}"),
            Answer::GaveUp(last) => format!("gave up (deadline passed), last: {last}"),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Submitted {
    pub(crate) key: String,
    pub(crate) tx_type: String,
    pub(crate) answer: Answer,
    /// For a RELEASE or CANCEL: the LOCK's transactionId.
    pub(crate) lock_id: Option<String>,
    /// What came before the final answer, in order (`no answer`, `500 SYSTEM_ERROR`, ...).
    pub(crate) history: Vec<String>,
}

/// An integrator's client: resends a request that got no answer, a 5xx, 409 while the same key
/// is in flight, or (for a RELEASE or CANCEL) 404 while its LOCK is not visible, with the same
/// key, reading the node's current address each time. With a second node (`via`), a submission
/// that got no answer or a 5xx goes to the other node next, with the same key.
#[derive(Clone)]
pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) node: Arc<RwLock<String>>,
    /// The other node a submission turns to when its node does not answer.
    pub(crate) other_node: Option<Arc<RwLock<String>>>,
    pub(crate) token: String,
    pub(crate) counters: Arc<Counters>,
    /// No submission is sent again past this moment.
    pub(crate) give_up_at: Instant,
    /// The wait before resending after no answer or a 5xx.
    pub(crate) resend_pause: Duration,
    /// A LOCK's RELEASE or CANCEL is submitted this many of the client's steps after the LOCK.
    pub(crate) completion_after_steps: usize,
}

impl Client {
    /// A client of the node at `base_url` (until the test moves `node`), with counters of its own.
    pub(crate) fn new(base_url: &str, token: &str, resend_pause: Duration, completion_after_steps: usize) -> Self {
        Self {
            http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http client"),
            node: Arc::new(RwLock::new(base_url.to_owned())),
            other_node: None,
            token: token.to_owned(),
            counters: Arc::default(),
            give_up_at: Instant::now() + Duration::from_secs(3_600),
            resend_pause,
            completion_after_steps,
        }
    }

    /// The same client (counters shared) sending to `node` first and to `other` when `node`
    /// does not answer.
    pub(crate) fn via(&self, node: &Arc<RwLock<String>>, other: &Arc<RwLock<String>>) -> Self {
        Self { node: node.clone(), other_node: Some(other.clone()), ..self.clone() }
    }

    pub(crate) fn base(&self) -> String {
        self.node.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The node a submission goes to after `failovers` sends without an answer.
    fn base_after(&self, failovers: usize) -> String {
        match &self.other_node {
            Some(other) if failovers % 2 == 1 => other.read().unwrap_or_else(PoisonError::into_inner).clone(),
            _ => self.base(),
        }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.request_to(&self.base(), method, path)
    }

    fn request_to(&self, base: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{base}{path}")).header("API-Version", "1.0.0").bearer_auth(&self.token)
    }

    /// One request of the test's own (setup and checks), while the service is up.
    pub(crate) async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self.request(method, path);
        if let Some(body) = body {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string()).json(&body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or(Value::Null))
    }

    /// POSTs `body` to `path` under `key` until it is answered (no answer, a 5xx or the key in
    /// flight are sent again, to whichever node is up); panics, naming `what`, after 30 s.
    pub(crate) async fn post_until_answered(&self, path: &str, key: &str, body: &Value, what: &str) -> Answered {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut sends = 0;
        loop {
            sends += 1;
            let sent = self.request(Method::POST, path).header("Idempotency-Key", key).json(body).send().await;
            if let Ok(response) = sent {
                let status = response.status().as_u16();
                let replayed = response.headers().contains_key("idempotent-replayed");
                if let Ok(reply) = response.json::<Value>().await {
                    let in_flight = status == 409 && reply["code"] == "IDEMPOTENCY_CONFLICT";
                    if status < 500 && !in_flight {
                        return Answered { status, reply, replayed, sends };
                    }
                }
            }
            assert!(Instant::now() < deadline, "{what} never answered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Submits `body` under `key` until it has a final answer or the deadline passes; the
    /// answer, and what came before it.
    pub(crate) async fn submit(&self, key: &str, body: &Value) -> (Answer, Vec<String>) {
        let mut sends = 0;
        let answered = self.send_until_answered(key, body, &mut sends).await;
        if sends > 1 {
            self.counters.resent.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned());
        }
        answered
    }

    async fn send_until_answered(&self, key: &str, body: &Value, sends: &mut usize) -> (Answer, Vec<String>) {
        let completes_lock = matches!(body["txType"].as_str(), Some("RELEASE" | "CANCEL"));
        let deadline = (Instant::now() + REQUEST_DEADLINE).min(self.give_up_at);
        let mut history: Vec<String> = Vec::new();
        let mut last = String::new();
        let mut failovers = 0;
        while Instant::now() < deadline {
            *sends += 1;
            let sent = self
                .request_to(&self.base_after(failovers), Method::POST, "/api/transactions")
                .header("Idempotency-Key", key)
                .json(body)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(e) => {
                    last = format!("no answer: {e}");
                    note(&mut history, "no answer".to_owned());
                    self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
                    failovers += 1;
                    tokio::time::sleep(self.resend_pause).await;
                    continue;
                }
            };
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let reply: Value = match response.json().await {
                Ok(reply) => reply,
                Err(e) => {
                    last = format!("{status} without a readable body: {e}");
                    note(&mut history, format!("{status} unreadable"));
                    self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(self.resend_pause).await;
                    continue;
                }
            };
            let code = reply["code"].as_str().unwrap_or("-").to_owned();
            match status {
                202 => {
                    if replayed {
                        self.counters.replayed_202.fetch_add(1, Ordering::Relaxed);
                        note(&mut history, "202 replayed".to_owned());
                    }
                    let id = reply["transactionId"].as_str().unwrap_or_else(|| panic!("202 without an id: {reply}"));
                    return (Answer::Accepted(id.to_owned()), history);
                }
                404 if completes_lock => {
                    // Its LOCK is not on the ledger yet: again with the same key.
                    self.counters.lock_not_visible_404.fetch_add(1, Ordering::Relaxed);
                    note(&mut history, format!("404 {code}"));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                409 => {
                    self.counters.in_flight_409.fetch_add(1, Ordering::Relaxed);
                    note(&mut history, format!("409 {code}"));
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                500..=599 => {
                    self.counters.server_errors.fetch_add(1, Ordering::Relaxed);
                    *self
                        .counters
                        .server_error_kinds
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(format!("{status} {code}"))
                        .or_default() += 1;
                    note(&mut history, format!("{status} {code}"));
                    failovers += 1;
                    tokio::time::sleep(self.resend_pause).await;
                }
                _ => return (Answer::Refused(status, reply), history),
            }
            last = format!("{status}: {reply}");
        }
        (Answer::GaveUp(last), history)
    }

    /// Runs one client's plan, in order; a LOCK's RELEASE or CANCEL goes out a few steps after
    /// the LOCK's 202 (by then the LOCK is usually on the ledger; if not, 404 and again).
    pub(crate) async fn run(self, steps: Vec<Planned>) -> Vec<Submitted> {
        let mut out = Vec::new();
        let mut completions: VecDeque<(usize, String, &'static str, Option<String>)> = VecDeque::new();
        let total = steps.len();
        for (index, step) in steps.into_iter().enumerate() {
            let (key, body, completion) = match step {
                Planned::Single { key, body } => (key, body, None),
                Planned::Lock { key, body, completion_key, completion } => {
                    (key, body, Some((completion_key, completion)))
                }
            };
            let tx_type = body["txType"].as_str().unwrap_or_default().to_owned();
            let (answer, history) = self.submit(&key, &body).await;
            self.counters.answered.fetch_add(1, Ordering::Relaxed);
            if let Some((completion_key, completion)) = completion {
                let lock_id = match &answer {
                    Answer::Accepted(id) => Some(id.clone()),
                    _ => None,
                };
                completions.push_back((index + self.completion_after_steps, completion_key, completion, lock_id));
            }
            out.push(Submitted { key, tx_type, answer, lock_id: None, history });
            while completions.front().is_some_and(|(due, ..)| *due <= index || index + 1 == total) {
                let Some((_, key, completion, lock_id)) = completions.pop_front() else { break };
                let (answer, history) = match &lock_id {
                    Some(lock_id) => {
                        self.submit(&key, &json!({ "txType": completion, "params": { "lockId": lock_id } })).await
                    }
                    None => (Answer::GaveUp("its LOCK was not accepted".to_owned()), Vec::new()),
                };
                self.counters.answered.fetch_add(1, Ordering::Relaxed);
                out.push(Submitted { key, tx_type: completion.to_owned(), answer, lock_id, history });
            }
        }
        out
    }
}

/// Adds one answer to a submission's history; a run of the same answer is one entry with a count.
fn note(history: &mut Vec<String>, what: String) {
    match history.last_mut() {
        Some(last) if last.split(" x").next() == Some(what.as_str()) => {
            let times: usize = last.rsplit(" x").next().and_then(|n| n.parse().ok()).unwrap_or(1);
            *last = format!("{what} x{}", times + 1);
        }
        _ => history.push(what),
    }
}

/// An operation as the store holds it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) tx_type: String,
    pub(crate) state: String,
    pub(crate) amount: i64,
    pub(crate) tx_hash: String,
    pub(crate) failure_code: String,
    pub(crate) reason_code: String,
    pub(crate) revert_reason: String,
    pub(crate) key: String,
    pub(crate) account: String,
    pub(crate) counterparty: String,
    pub(crate) lock_id: String,
}

pub(crate) async fn operations(db: &impl Sql) -> Vec<Row> {
    let rows = db
        .strings(
            "SELECT CAST(id AS TEXT) || '|' || tx_type || '|' || state || '|' || CAST(amount AS TEXT) || '|' || \
             COALESCE(tx_hash, '') || '|' || COALESCE(failure_code, '') || '|' || COALESCE(reason_code, '') || '|' || \
             COALESCE(idempotency_key, '') || '|' || account_ref || '|' || COALESCE(counterparty_ref, '') || '|' || \
             COALESCE(CAST(lock_id AS TEXT), '') || '|' || COALESCE(revert_reason, '') FROM operations",
        )
        .await;
    rows.iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            assert_eq!(f.len(), 12, "operation row {row}");
            Row {
                id: f[0].to_owned(),
                tx_type: f[1].to_owned(),
                state: f[2].to_owned(),
                amount: f[3].parse().unwrap_or_else(|_| panic!("amount of {row}")),
                tx_hash: f[4].to_owned(),
                failure_code: f[5].to_owned(),
                reason_code: f[6].to_owned(),
                key: f[7].to_owned(),
                account: f[8].to_owned(),
                counterparty: f[9].to_owned(),
                lock_id: f[10].to_owned(),
                revert_reason: f[11].to_owned(),
            }
        })
        .collect()
}

/// How much [`evidence`] tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    /// The operation, each of its jobs, and the ledger's transaction with its nonce.
    Brief,
    /// Also when the operation last changed and the sender's highest nonce on the ledger;
    /// alike jobs are one line with their count (a tracked operation has one per receipt poll).
    Full,
}

/// Everything the store knows about one operation, its jobs and its signed transaction's
/// nonce on the ledger, for a failure message.
pub(crate) async fn evidence(db: &impl Sql, id: &str, detail: Detail) -> String {
    let full = detail == Detail::Full;
    let updated_at = if full { " || ' updated_at=' || CAST(updated_at AS TEXT)" } else { "" };
    let operation = db
        .strings(&format!(
            "SELECT tx_type || ' ' || state || ' account=' || account_ref || ' amount=' || CAST(amount AS TEXT) || \
             ' key=' || COALESCE(idempotency_key, '-') || ' txHash=' || COALESCE(tx_hash, '-') || \
             ' failure=' || COALESCE(failure_code, '-') || '/' || COALESCE(reason_code, '-'){updated_at} \
             FROM operations WHERE CAST(id AS TEXT) = '{id}'"
        ))
        .await;
    let jobs = if full {
        db.strings(&format!(
            "SELECT CAST(COUNT(*) AS TEXT) || 'x ' || kind || ' ' || status || ' attempts=' || CAST(attempts AS TEXT) \
             || '/' || CAST(max_attempts AS TEXT) || ' error=' || COALESCE(last_error, '-') FROM jobs \
             WHERE CAST(payload ->> 'transactionId' AS TEXT) = '{id}' \
             GROUP BY kind, status, attempts, max_attempts, last_error ORDER BY MIN(created_at)"
        ))
        .await
    } else {
        db.strings(&format!(
            "SELECT kind || ' ' || status || ' attempts=' || CAST(attempts AS TEXT) || '/' || \
             CAST(max_attempts AS TEXT) || ' error=' || COALESCE(last_error, '-') FROM jobs \
             WHERE CAST(payload ->> 'transactionId' AS TEXT) = '{id}' ORDER BY created_at"
        ))
        .await
    };
    let signed_column = if full { "CAST(signed_transaction AS TEXT)" } else { "signed_transaction" };
    let signed = db
        .strings(&format!(
            "SELECT {signed_column} FROM operations WHERE CAST(id AS TEXT) = '{id}' \
             AND signed_transaction IS NOT NULL"
        ))
        .await;
    let mut nonce_use = String::from("not signed");
    if let Some(signed) = signed.first().and_then(|s| serde_json::from_str::<Value>(s).ok()) {
        let (sender, nonce) = (signed["sender"].as_str().unwrap_or_default(), signed["nonce"].as_u64().unwrap_or(0));
        let holder = db
            .strings(&format!(
                "SELECT t.hash || ' in block ' || CAST(t.block_number AS TEXT) || ', operation ' || \
                 COALESCE((SELECT CAST(o.id AS TEXT) || ' ' || o.tx_type || ' ' || o.state || ' key=' || \
                 COALESCE(o.idempotency_key, '-') FROM operations o WHERE o.tx_hash = t.hash), 'none') \
                 FROM ledger_transactions t WHERE t.sender = '{sender}' AND t.nonce = {nonce}"
            ))
            .await;
        nonce_use = format!(
            "signed {} by {sender} with nonce {nonce}; the ledger's transaction with that nonce: {}",
            signed["hash"].as_str().unwrap_or_default(),
            holder.first().map_or("none", String::as_str)
        );
        if full {
            let highest = db
                .strings(&format!(
                    "SELECT COALESCE(CAST(MAX(nonce) AS TEXT), 'none') FROM ledger_transactions WHERE sender = '{sender}'"
                ))
                .await;
            nonce_use.push_str(&format!(
                "; the sender's highest nonce on the ledger: {}",
                highest.first().map_or("none", String::as_str)
            ));
        }
    }
    format!("operation {id}: {}\n    {nonce_use}\n    jobs: {}", operation.join(""), jobs.join("\n          "))
}

/// The store's locks: id -> (status, the operation that completed it).
pub(crate) async fn locks(db: &impl Sql) -> BTreeMap<String, (String, String)> {
    db.strings("SELECT CAST(id AS TEXT) || '|' || status || '|' || COALESCE(CAST(completed_by AS TEXT), '') FROM locks")
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1].to_owned(), f.get(2).copied().unwrap_or_default().to_owned()))
        })
        .collect()
}

/// A LOCK holds a lock exactly when confirmed; a confirmed RELEASE or CANCEL completed its own
/// lock. What does not hold.
pub(crate) fn lock_violations(rows: &[Row], locks: &BTreeMap<String, (String, String)>) -> Vec<String> {
    let mut violations = Vec::new();
    for row in rows.iter().filter(|r| r.tx_type == "LOCK") {
        let lock = locks.get(&row.id);
        match row.state.as_str() {
            "CONFIRMED" if lock.is_none() => violations.push(format!("confirmed LOCK {} has no lock", row.id)),
            "CONFIRMED" => {}
            _ if lock.is_some() => violations.push(format!("{} LOCK {} has a lock {lock:?}", row.state, row.id)),
            _ => {}
        }
    }
    for row in rows.iter().filter(|r| r.state == "CONFIRMED" && (r.tx_type == "RELEASE" || r.tx_type == "CANCEL")) {
        let expected = if row.tx_type == "RELEASE" { "RELEASED" } else { "CANCELLED" };
        let lock = locks.get(&row.lock_id).map(|(status, by)| (status.as_str(), by.as_str()));
        if lock != Some((expected, row.id.as_str())) {
            violations.push(format!("confirmed {} {} leaves lock {} as {lock:?}", row.tx_type, row.id, row.lock_id));
        }
    }
    violations
}

/// What the confirmed operations imply: each account's (total, locked), over `accounts`
/// accounts, and the sums minted and burned.
struct Implied {
    balances: BTreeMap<String, (i64, i64)>,
    minted: i64,
    burned: i64,
    /// Operations of a type the sum does not know.
    unknown: Vec<String>,
}

fn implied(rows: &[Row], accounts: usize) -> Implied {
    let mut expected: BTreeMap<String, (i64, i64)> = (0..accounts).map(|i| (account(i), (0, 0))).collect();
    let (mut minted, mut burned) = (0i64, 0i64);
    let mut unknown = Vec::new();
    let lock_rows: HashMap<&str, &Row> =
        rows.iter().filter(|r| r.tx_type == "LOCK").map(|r| (r.id.as_str(), r)).collect();
    for row in rows.iter().filter(|r| r.state == "CONFIRMED") {
        let mut apply = |account: &str, total: i64, held: i64| {
            let entry = expected.entry(account.to_owned()).or_default();
            entry.0 += total;
            entry.1 += held;
        };
        match row.tx_type.as_str() {
            "MINT" => {
                minted += row.amount;
                apply(&row.account, row.amount, 0);
            }
            "BURN" => {
                burned += row.amount;
                apply(&row.account, -row.amount, 0);
            }
            "TRANSFER" => {
                apply(&row.account, -row.amount, 0);
                apply(&row.counterparty, row.amount, 0);
            }
            "LOCK" => apply(&row.account, 0, row.amount),
            "CANCEL" => apply(&row.account, 0, -row.amount),
            "RELEASE" => {
                let payee = lock_rows.get(row.lock_id.as_str()).map(|l| l.counterparty.as_str()).unwrap_or_default();
                if payee.is_empty() {
                    apply(&row.account, 0, -row.amount);
                } else {
                    apply(&row.account, -row.amount, -row.amount);
                    apply(payee, row.amount, 0);
                }
            }
            other => unknown.push(format!("operation {} of unknown type {other}", row.id)),
        }
    }
    Implied { balances: expected, minted, burned, unknown }
}

/// The service's positions: account -> (total, held).
async fn positions(db: &impl Sql) -> BTreeMap<String, (i64, i64)> {
    db.strings("SELECT account_ref || '|' || CAST(total AS TEXT) || '|' || CAST(held AS TEXT) FROM positions")
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1].parse().unwrap_or(-1), f.get(2).and_then(|h| h.parse().ok()).unwrap_or(-1)))
        })
        .collect()
}

/// How many of the operations in `state` there are of each type.
pub(crate) fn by_type<'a>(rows: &'a [Row], state: &str) -> BTreeMap<&'a str, usize> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for row in rows.iter().filter(|r| r.state == state) {
        *counts.entry(row.tx_type.as_str()).or_default() += 1;
    }
    counts
}

/// One contract (USD), one customer (`crash-bank`) and its accounts `acc-0`.., all ACTIVE
/// before the first operation.
pub(crate) async fn open_accounts(client: &Client, db: &impl Sql, accounts: usize) {
    let (status, reply) = client.call(Method::POST, "/api/contracts", Some(json!({ "assetId": "USD" }))).await;
    assert_eq!(status, 201, "{reply}");
    let (status, reply) =
        client.call(Method::POST, "/api/customers", Some(json!({ "customerRef": "crash-bank" }))).await;
    assert_eq!(status, 201, "{reply}");
    assert!(
        eventually(Duration::from_secs(30), || async {
            client.call(Method::GET, "/api/contracts/USD", None).await.1["status"] == "ACTIVE"
        })
        .await,
        "the contract never became ACTIVE"
    );
    for i in 0..accounts {
        let body = json!({ "accountRef": account(i), "customerRef": "crash-bank", "assetId": "USD" });
        let (status, reply) = client.call(Method::POST, "/api/accounts", Some(body)).await;
        assert_eq!(status, 201, "{reply}");
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            db.count("accounts", "status = 'ACTIVE'").await == accounts as i64
        })
        .await,
        "the accounts never became ACTIVE"
    );
}

/// The [`evidence`] of the first ten of `ids`, a paragraph each.
pub(crate) async fn evidence_report<'a>(
    db: &impl Sql,
    ids: impl IntoIterator<Item = &'a str>,
    detail: Detail,
) -> String {
    let mut report = String::new();
    for id in ids.into_iter().take(10) {
        report.push_str(&evidence(db, id, detail).await);
        report.push('\n');
    }
    report
}

/// Each operation's txHash: hash -> operation; and the operations that share one.
pub(crate) fn tx_hashes(rows: &[Row]) -> (BTreeMap<&str, &str>, Vec<String>) {
    let mut hashes: BTreeMap<&str, &str> = BTreeMap::new();
    let mut shared = Vec::new();
    for row in rows.iter().filter(|r| !r.tx_hash.is_empty()) {
        if let Some(other) = hashes.insert(row.tx_hash.as_str(), row.id.as_str()) {
            shared.push(format!("operations {other} and {} share txHash {}", row.id, row.tx_hash));
        }
    }
    (hashes, shared)
}

/// The FAILED operations counted by `failureCode/reasonCode`, and the ids of those that failed
/// for another reason than a planned overdraft the ledger reverted: no crash or outage may fail
/// an operation.
pub(crate) fn failures(rows: &[Row]) -> (BTreeMap<String, usize>, Vec<String>) {
    let mut by_code: BTreeMap<String, usize> = BTreeMap::new();
    let mut unplanned = Vec::new();
    for row in rows.iter().filter(|r| r.state == "FAILED") {
        *by_code.entry(format!("{}/{}", row.failure_code, row.reason_code)).or_default() += 1;
        if !is_reverted_overdraft(row) {
            unplanned.push(row.id.clone());
        }
    }
    (by_code, unplanned)
}

/// A FAILED operation whose overdraft the ledger reverted, as the plan intends.
pub(crate) fn is_reverted_overdraft(row: &Row) -> bool {
    row.failure_code == "CHAIN_FAILED"
        && row.reason_code == "EXECUTION_REVERTED"
        && row.revert_reason.starts_with("InsufficientAvailableBalance")
}

/// The planned overdrafts (of `amount`) that did not fail on the ledger.
pub(crate) fn overdraft_violations(rows: &[Row], amount: i64) -> Vec<String> {
    rows.iter()
        .filter(|r| r.amount == amount)
        .filter(|r| (r.state.as_str(), r.failure_code.as_str()) != ("FAILED", "CHAIN_FAILED"))
        .map(|row| format!("overdraft {} {} is {} {}", row.tx_type, row.id, row.state, row.failure_code))
        .collect()
}

/// The ledger's balances against the confirmed operations and the service's positions.
pub(crate) struct Balances {
    pub(crate) minted: i64,
    pub(crate) burned: i64,
    /// `acc-N=total` for each account, for the report.
    pub(crate) shown: Vec<String>,
    pub(crate) violations: Vec<String>,
}

/// Asks the service for each account's balances: the ledger's (total, locked) must equal what
/// its confirmed operations imply and the service's position; their sum, minted minus burned.
pub(crate) async fn balances(client: &Client, db: &impl Sql, rows: &[Row], accounts: usize) -> Balances {
    let Implied { balances: expected, minted, burned, unknown } = implied(rows, accounts);
    let mut violations = unknown;
    let positions = positions(db).await;
    let mut sum = 0;
    let mut shown = Vec::new();
    for i in 0..accounts {
        let reference = account(i);
        let (status, reply) = client.call(Method::GET, &format!("/api/accounts/{reference}/balances"), None).await;
        assert_eq!(status, 200, "{reply}");
        let total = cents(reply["total"].as_str().expect("total"));
        let locked = cents(reply["locked"].as_str().expect("locked"));
        sum += total;
        let position = positions.get(&reference).copied().unwrap_or((0, 0));
        if (total, locked) != expected[&reference] {
            violations.push(format!(
                "{reference}: ledger (total, locked) {:?} against its confirmed operations {:?}",
                (total, locked),
                expected[&reference]
            ));
        }
        if (total, locked) != position {
            violations.push(format!(
                "{reference}: ledger (total, locked) {:?} against the service's position {position:?}",
                (total, locked)
            ));
        }
        shown.push(format!("{reference}={}", amount_text(total)));
    }
    if sum != minted - burned {
        violations.push(format!("the sum of balances {sum} against minted {minted} minus burned {burned}"));
    }
    Balances { minted, burned, shown, violations }
}
