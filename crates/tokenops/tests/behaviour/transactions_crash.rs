//! Crash safety of token operations, with the real binary: 2,000 operations submitted by
//! concurrent clients while the service is killed with SIGKILL three times and restarted;
//! clients resend unanswered requests with the same key. Afterwards every 202'd operation
//! exists exactly once and is terminal, no ledger transaction is applied twice, and the sum of
//! balances equals minted minus burned (each account's ledger balance equals the service's
//! position and the sum of its confirmed operations).

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};
use tokenops_app::clock::{Clock, ManualClock, SystemClock};
use tokenops_testkit::{Backend, ServiceProcess, TestDb, TestIssuer, backends};

const BINARY: &str = env!("CARGO_BIN_EXE_tokenops");
const OPERATIONS: usize = 2_000;
/// Each client submits OPERATIONS / CLIENTS of them.
const CLIENTS: usize = 16;
const _: () = assert!(OPERATIONS.is_multiple_of(CLIENTS), "every client submits the same number");
const ACCOUNTS: usize = 8;
/// Mints each client submits before anything else, one into each account.
const OPENING_MINTS: usize = ACCOUNTS;
/// The service is killed once this many submissions have been answered, at each step.
const KILL_AFTER_ANSWERS: [usize; 3] = [OPERATIONS / 5, OPERATIONS / 2, OPERATIONS * 4 / 5];
/// An amount no account ever holds: the operation must fail on the ledger.
const OVERDRAFT: i64 = 999_999_999;
/// Operations not (yet) CONFIRMED or FAILED.
const OPEN: &str = "state NOT IN ('CONFIRMED', 'FAILED')";
/// Open operations that no queued or running job will move any more (table alias `o`).
const STUCK: &str = "o.state NOT IN ('CONFIRMED', 'FAILED') AND NOT EXISTS (SELECT 1 FROM jobs j \
     WHERE j.status IN ('queued', 'running') AND CAST(j.payload ->> 'transactionId' AS TEXT) = CAST(o.id AS TEXT))";
/// How long one client keeps resending one request.
/// (A RELEASE waits for its LOCK, which may queue behind a few hundred operations after a restart.)
const REQUEST_DEADLINE: Duration = Duration::from_secs(30);
/// A LOCK's RELEASE or CANCEL is submitted this many of the client's steps after the LOCK.
const COMPLETION_AFTER_STEPS: usize = 8;

fn environment(db: &TestDb, issuer: &TestIssuer) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    env.insert("TOKENOPS_DATABASE_URL".to_owned(), db.url());
    if let Some(schema) = db.schema() {
        env.insert("TOKENOPS_DATABASE_SCHEMA".to_owned(), schema.to_owned());
    }
    env.insert("TOKENOPS_DATA_DIR".to_owned(), db.dir().display().to_string());
    env.insert("TOKENOPS_AUTH_ISSUER".to_owned(), issuer.issuer().to_owned());
    env.insert("TOKENOPS_AUTH_JWKS_URL".to_owned(), issuer.jwks_url());
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
    // The pipeline itself must hand every operation on: the sweep that would resume one no job
    // carries (after a minute unchanged) is kept out of this test, so such an operation shows.
    env.insert("TOKENOPS_RESUME_SWEEP_SECS".to_owned(), "86400".to_owned());
    // The test reports what it finds; the job runner's retry warnings would drown it.
    env.insert("TOKENOPS_LOG".to_owned(), "error".to_owned());
    env
}

/// Polls `check` until it holds or the deadline passes; `false` when it never held.
async fn eventually<F, Fut>(deadline: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

/// Minor units of a two-decimal amount ("1234.50" is 123450).
fn cents(text: &str) -> i64 {
    let (units, fraction) = text.split_once('.').unwrap_or((text, "0"));
    let units: i64 = units.parse().unwrap_or_else(|_| panic!("amount {text:?}"));
    let fraction: i64 = format!("{fraction:0<2}").parse().unwrap_or_else(|_| panic!("amount {text:?}"));
    units * 100 + fraction
}

fn amount_text(minor_units: i64) -> String {
    format!("{}.{:02}", minor_units / 100, minor_units % 100)
}

fn account(i: usize) -> String {
    format!("acc-{i}")
}

/// A deterministic generator (xorshift64), so every run submits the same plan.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }

    fn account(&mut self) -> usize {
        self.below(ACCOUNTS as u64) as usize
    }

    fn two_accounts(&mut self) -> (usize, usize) {
        let from = self.account();
        let to = (from + 1 + self.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
        (from, to)
    }

    fn cents(&mut self, from_units: u64, to_units: u64) -> i64 {
        (from_units * 100 + self.below((to_units - from_units) * 100 + 1)) as i64
    }
}

/// One step of a client's plan.
#[derive(Debug, Clone)]
enum Planned {
    Single {
        key: String,
        body: Value,
    },
    /// A LOCK, then the RELEASE or CANCEL of its lock (submitted `COMPLETION_AFTER_STEPS` later).
    Lock {
        key: String,
        body: Value,
        completion_key: String,
        completion: &'static str,
    },
}

fn body(tx_type: &str, owner: usize, counterparty: Option<usize>, amount: i64) -> Value {
    let mut body =
        json!({ "txType": tx_type, "assetId": "USD", "accountRef": account(owner), "amount": amount_text(amount) });
    if let Some(other) = counterparty {
        body["counterpartyRef"] = json!(account(other));
    }
    body
}

fn single(key: String, tx_type: &str, owner: usize, counterparty: Option<usize>, amount: i64) -> Planned {
    Planned::Single { key, body: body(tx_type, owner, counterparty, amount) }
}

/// Client `c`'s operations: its opening mints, then transfers (a few of them overdrafts that
/// must fail), further mints, burns (a few overdrawn), and LOCKs each followed by a RELEASE or
/// CANCEL. Each planned submission has its own Idempotency-Key.
fn plan(c: usize) -> Vec<Planned> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x1000_0000_01B3));
    let quota = OPERATIONS / CLIENTS;
    let mut steps = Vec::new();
    let mut count = 0;
    let key = |count: &mut usize| {
        *count += 1;
        format!("crash-{c:02}-{:03}", *count)
    };
    for k in 0..OPENING_MINTS {
        let amount = rng.cents(1_000, 3_000);
        steps.push(single(key(&mut count), "MINT", (c + k) % ACCOUNTS, None, amount));
    }
    while count < quota {
        let roll = rng.below(100);
        if roll >= 78 && quota - count >= 2 {
            let owner = rng.account();
            let payee = (rng.below(2) == 0).then(|| (owner + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS);
            let completion = if rng.below(5) < 3 { "RELEASE" } else { "CANCEL" };
            let lock_key = key(&mut count);
            let body = body("LOCK", owner, payee, rng.cents(1, 300));
            steps.push(Planned::Lock { key: lock_key, body, completion_key: key(&mut count), completion });
            continue;
        }
        let step = match roll {
            0..60 => {
                let (from, to) = rng.two_accounts();
                single(key(&mut count), "TRANSFER", from, Some(to), rng.cents(1, 400))
            }
            60..63 => {
                let (from, to) = rng.two_accounts();
                single(key(&mut count), "TRANSFER", from, Some(to), OVERDRAFT)
            }
            63..70 => single(key(&mut count), "MINT", rng.account(), None, rng.cents(100, 600)),
            70..76 => single(key(&mut count), "BURN", rng.account(), None, rng.cents(1, 150)),
            76..78 => single(key(&mut count), "BURN", rng.account(), None, OVERDRAFT),
            _ => {
                let (from, to) = rng.two_accounts();
                single(key(&mut count), "TRANSFER", from, Some(to), rng.cents(1, 400))
            }
        };
        steps.push(step);
    }
    steps
}

/// What the clients saw, summed over all of them.
#[derive(Default)]
struct Counters {
    /// Submissions with a final answer (202, or an expected 400).
    answered: AtomicUsize,
    /// Sends that got no answer (connection refused or reset, timeout): resent.
    unanswered: AtomicUsize,
    server_errors: AtomicUsize,
    in_flight_409: AtomicUsize,
    lock_not_visible_404: AtomicUsize,
    /// 202s marked `Idempotent-Replayed`: the first send's effect committed, its answer was lost.
    replayed_202: AtomicUsize,
    /// Keys sent more than once.
    resent: Mutex<BTreeSet<String>>,
}

/// A final answer to one submission.
#[derive(Debug, Clone)]
enum Answer {
    Accepted(String),
    Refused(u16, Value),
    GaveUp(String),
}

impl Answer {
    fn describe(&self) -> String {
        match self {
            Answer::Accepted(id) => format!("202 {id}"),
            Answer::Refused(status, reply) => format!("{status} {reply}"),
            Answer::GaveUp(last) => format!("gave up after {REQUEST_DEADLINE:?}, last: {last}"),
        }
    }
}

#[derive(Debug, Clone)]
struct Submitted {
    key: String,
    tx_type: String,
    answer: Answer,
    /// For a RELEASE or CANCEL: the LOCK's transactionId.
    lock_id: Option<String>,
}

/// An integrator's client: resends a request that got no answer (or a 5xx, or 409 while the
/// same key is in flight) with the same key, reading the node's current address each time.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    node: Arc<RwLock<String>>,
    token: String,
    counters: Arc<Counters>,
}

impl Client {
    fn base(&self) -> String {
        self.node.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    async fn submit(&self, key: &str, body: &Value) -> Answer {
        let mut sends = 0;
        let answer = self.send_until_answered(key, body, &mut sends).await;
        if sends > 1 {
            self.counters.resent.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned());
        }
        answer
    }

    async fn send_until_answered(&self, key: &str, body: &Value, sends: &mut usize) -> Answer {
        let completes_lock = matches!(body["txType"].as_str(), Some("RELEASE" | "CANCEL"));
        let deadline = Instant::now() + REQUEST_DEADLINE;
        let mut last = String::new();
        while Instant::now() < deadline {
            *sends += 1;
            let sent = self
                .http
                .post(format!("{}/api/transactions", self.base()))
                .header("API-Version", "1.0.0")
                .header("Idempotency-Key", key)
                .bearer_auth(&self.token)
                .json(body)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(e) => {
                    last = format!("no answer: {e}");
                    self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let reply: Value = match response.json().await {
                Ok(reply) => reply,
                Err(e) => {
                    last = format!("{status} without a readable body: {e}");
                    self.counters.unanswered.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match status {
                202 => {
                    if replayed {
                        self.counters.replayed_202.fetch_add(1, Ordering::Relaxed);
                    }
                    let id = reply["transactionId"].as_str().unwrap_or_else(|| panic!("202 without an id: {reply}"));
                    return Answer::Accepted(id.to_owned());
                }
                404 if completes_lock => {
                    // Its LOCK is not processed yet: retry with the same key.
                    self.counters.lock_not_visible_404.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                409 => {
                    self.counters.in_flight_409.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                500..=599 => {
                    self.counters.server_errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                _ => return Answer::Refused(status, reply),
            }
            last = format!("{status}: {reply}");
        }
        Answer::GaveUp(last)
    }

    /// Runs one client's plan, in order; a LOCK's RELEASE or CANCEL goes out a few steps
    /// after the LOCK's 202 (by then the LOCK is usually on the ledger; if not, 404 and again).
    async fn run(self, steps: Vec<Planned>) -> Vec<Submitted> {
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
            let answer = self.submit(&key, &body).await;
            self.counters.answered.fetch_add(1, Ordering::Relaxed);
            if let Some((completion_key, completion)) = completion {
                let lock_id = match &answer {
                    Answer::Accepted(id) => Some(id.clone()),
                    _ => None,
                };
                completions.push_back((index + COMPLETION_AFTER_STEPS, completion_key, completion, lock_id));
            }
            out.push(Submitted { key, tx_type, answer, lock_id: None });
            while completions.front().is_some_and(|(due, ..)| *due <= index || index + 1 == total) {
                let Some((_, key, completion, lock_id)) = completions.pop_front() else { break };
                let answer = match &lock_id {
                    Some(lock_id) => {
                        self.submit(&key, &json!({ "txType": completion, "params": { "lockId": lock_id } })).await
                    }
                    None => Answer::GaveUp("its LOCK was not accepted".to_owned()),
                };
                self.counters.answered.fetch_add(1, Ordering::Relaxed);
                out.push(Submitted { key, tx_type: completion.to_owned(), answer, lock_id });
            }
        }
        out
    }
}

/// One kill: when, and what the killed process had in flight.
#[derive(Debug)]
struct Kill {
    answered: usize,
    running_jobs: i64,
    in_flight: i64,
    signed_unsettled: i64,
    restart: Duration,
}

impl Kill {
    fn describe(&self) -> String {
        format!(
            "after {} answers ({} jobs leased, {} operations in flight, {} signed and not settled; ready again in {:?})",
            self.answered, self.running_jobs, self.in_flight, self.signed_unsettled, self.restart
        )
    }
}

/// An operation as the store holds it.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    tx_type: String,
    state: String,
    amount: i64,
    tx_hash: String,
    failure_code: String,
    reason_code: String,
    key: String,
    account: String,
    counterparty: String,
    lock_id: String,
}

async fn operations(db: &TestDb) -> Vec<Row> {
    let rows = db
        .strings(
            "SELECT CAST(id AS TEXT) || '|' || tx_type || '|' || state || '|' || CAST(amount AS TEXT) || '|' || \
             COALESCE(tx_hash, '') || '|' || COALESCE(failure_code, '') || '|' || COALESCE(reason_code, '') || '|' || \
             COALESCE(idempotency_key, '') || '|' || account_ref || '|' || COALESCE(counterparty_ref, '') || '|' || \
             COALESCE(CAST(lock_id AS TEXT), '') FROM operations",
        )
        .await;
    rows.iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            assert_eq!(f.len(), 11, "operation row {row}");
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
            }
        })
        .collect()
}

/// Everything the store knows about one operation, its jobs and its signed transaction's
/// nonce on the ledger, for a failure message.
async fn evidence(db: &TestDb, id: &str) -> String {
    let operation = db
        .strings(&format!(
            "SELECT tx_type || ' ' || state || ' account=' || account_ref || ' amount=' || CAST(amount AS TEXT) || \
             ' key=' || COALESCE(idempotency_key, '-') || ' txHash=' || COALESCE(tx_hash, '-') || \
             ' failure=' || COALESCE(failure_code, '-') || '/' || COALESCE(reason_code, '-') \
             FROM operations WHERE CAST(id AS TEXT) = '{id}'"
        ))
        .await;
    let jobs = db
        .strings(&format!(
            "SELECT kind || ' ' || status || ' attempts=' || CAST(attempts AS TEXT) || '/' || \
             CAST(max_attempts AS TEXT) || ' error=' || COALESCE(last_error, '-') FROM jobs \
             WHERE CAST(payload ->> 'transactionId' AS TEXT) = '{id}' ORDER BY created_at"
        ))
        .await;
    let signed = db
        .strings(&format!(
            "SELECT signed_transaction FROM operations WHERE CAST(id AS TEXT) = '{id}' AND signed_transaction IS NOT NULL"
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
    }
    format!("operation {id}: {}\n    {nonce_use}\n    jobs: {}", operation.join(""), jobs.join("\n          "))
}

async fn operations_survive_three_sigkills_each_applied_exactly_once(backend: Backend) {
    tokenops_identity::install_crypto_provider();
    let started = Instant::now();
    let issuer = TestIssuer::start().await;
    let db = TestDb::create(backend).await;
    let _schema = DropSchema(&db);
    let clock = ManualClock::starting_at(SystemClock.now());
    let tenant = issuer.new_tenant(&clock);
    let env = environment(&db, &issuer);

    let mut service = ServiceProcess::start(BINARY, &env).await;
    let node = Arc::new(RwLock::new(service.base_url.clone()));
    let counters = Arc::new(Counters::default());
    let client = Client {
        http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http client"),
        node: node.clone(),
        token: tenant.token.clone(),
        counters: counters.clone(),
    };

    // One contract, one customer, the accounts; all ACTIVE before the first operation.
    let setup = |method: Method, path: &str, body: Option<Value>| {
        let mut request = client
            .http
            .request(method, format!("{}{path}", client.base()))
            .header("API-Version", "1.0.0")
            .bearer_auth(&tenant.token);
        if let Some(body) = body {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string()).json(&body);
        }
        async move {
            let response = request.send().await.expect("setup request");
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(setup(Method::POST, "/api/contracts", Some(json!({ "assetId": "USD" }))).await.0, 201);
    assert_eq!(setup(Method::POST, "/api/customers", Some(json!({ "customerRef": "crash-bank" }))).await.0, 201);
    assert!(
        eventually(Duration::from_secs(30), || async {
            setup(Method::GET, "/api/contracts/USD", None).await.1["status"] == "ACTIVE"
        })
        .await,
        "the contract never became ACTIVE"
    );
    for i in 0..ACCOUNTS {
        let body = json!({ "accountRef": account(i), "customerRef": "crash-bank", "assetId": "USD" });
        let (status, reply) = setup(Method::POST, "/api/accounts", Some(body)).await;
        assert_eq!(status, 201, "{reply}");
    }
    assert!(
        eventually(Duration::from_secs(30), || async {
            db.count("accounts", "status = 'ACTIVE'").await == ACCOUNTS as i64
        })
        .await,
        "the accounts never became ACTIVE"
    );
    let ready = started.elapsed();
    eprintln!("transactions_crash ({backend:?}): {ACCOUNTS} accounts ACTIVE after {ready:?}");

    // The clients, and a controller that kills and restarts the service as they go.
    let submitting = Instant::now();
    let clients: Vec<_> = (0..CLIENTS).map(|c| tokio::spawn(client.clone().run(plan(c)))).collect();
    let mut kills = Vec::new();
    for threshold in KILL_AFTER_ANSWERS {
        let finished = || clients.iter().all(|c| c.is_finished());
        while counters.answered.load(Ordering::Relaxed) < threshold && !finished() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        if finished() {
            break;
        }
        let answered = counters.answered.load(Ordering::Relaxed);
        service.kill9().await;
        let running_jobs = db.count("jobs", "status = 'running'").await;
        let in_flight = db.count("operations", "state NOT IN ('CONFIRMED', 'FAILED')").await;
        let signed_unsettled = db
            .count("operations", "state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL")
            .await;
        let down = Instant::now();
        service = ServiceProcess::start(BINARY, &env).await;
        *node.write().unwrap_or_else(PoisonError::into_inner) = service.base_url.clone();
        let kill = Kill { answered, running_jobs, in_flight, signed_unsettled, restart: down.elapsed() };
        eprintln!("transactions_crash ({backend:?}): killed at {:?}: {}", submitting.elapsed(), kill.describe());
        kills.push(kill);
    }
    let mut submitted: Vec<Submitted> = Vec::new();
    for c in clients {
        submitted.extend(c.await.expect("client task"));
    }
    let submitted_in = submitting.elapsed();
    let replayed_202 = counters.replayed_202.load(Ordering::Relaxed);
    eprintln!("transactions_crash ({backend:?}): {OPERATIONS} submissions answered in {submitted_in:?}");
    let kills: Vec<String> = kills.iter().map(Kill::describe).collect();
    assert_eq!(kills.len(), 3, "the service was killed three times while clients submitted: {kills:?}");
    assert_eq!(submitted.len(), OPERATIONS);

    // Every answer is a 202, or a 400 for a RELEASE or CANCEL of a lock whose LOCK failed.
    let mut accepted: BTreeMap<String, String> = BTreeMap::new(); // key -> transactionId
    let mut refused_completions = Vec::new();
    let mut unexpected = Vec::new();
    for s in &submitted {
        match &s.answer {
            Answer::Accepted(id) => {
                assert!(accepted.insert(s.key.clone(), id.clone()).is_none(), "key {} answered twice", s.key);
            }
            Answer::Refused(400, reply) if s.lock_id.is_some() => refused_completions.push((s, reply.clone())),
            other => unexpected.push(format!("{} {}: {}", s.tx_type, s.key, other.describe())),
        }
    }
    let distinct_ids: BTreeSet<&String> = accepted.values().collect();
    assert_eq!(distinct_ids.len(), accepted.len(), "two keys were answered with the same transactionId");

    // Settlement runs to the end: every operation CONFIRMED or FAILED. An operation that is
    // neither and has no queued or running job left can never move again: stop waiting.
    let settling = Instant::now();
    eventually(Duration::from_secs(60), || async {
        db.count("operations", OPEN).await == db.count("operations o", STUCK).await
    })
    .await;
    let settled_in = settling.elapsed();
    eprintln!("transactions_crash ({backend:?}): settled {settled_in:?} after the last answer");

    // Findings are collected, so that one run reports every broken promise.
    let mut violations: Vec<String> = Vec::new();
    macro_rules! check {
        ($holds:expr, $($message:tt)+) => {
            if !$holds {
                violations.push(format!($($message)+));
            }
        };
    }
    let open = db.strings(&format!("SELECT CAST(id AS TEXT) FROM operations WHERE {OPEN}")).await;
    if !open.is_empty() {
        let mut report = String::new();
        for id in open.iter().take(10) {
            report.push_str(&evidence(&db, id).await);
            report.push('\n');
        }
        violations.push(format!(
            "{} operations never reached CONFIRMED or FAILED ({} of them with no job left to move them):\n{report}",
            open.len(),
            db.count("operations o", STUCK).await
        ));
    }
    if !unexpected.is_empty() {
        let mut report = unexpected.join("\n");
        for s in submitted.iter().filter(|s| matches!(s.answer, Answer::GaveUp(_))).take(5) {
            if let Some(lock_id) = &s.lock_id {
                report.push_str(&format!("\n  the LOCK of {}: {}", s.key, evidence(&db, lock_id).await));
            }
        }
        violations.push(format!("{} unexpected answers:\n{report}", unexpected.len()));
    }

    // Exactly one operation per accepted key, and nothing else.
    let rows = operations(&db).await;
    let by_id: HashMap<&str, &Row> = rows.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut keys_seen: BTreeMap<&str, usize> = BTreeMap::new();
    for row in &rows {
        *keys_seen.entry(row.key.as_str()).or_default() += 1;
    }
    let doubled: Vec<_> = keys_seen.iter().filter(|(_, n)| **n > 1).collect();
    check!(doubled.is_empty(), "idempotency keys with more than one operation: {doubled:?}");
    for (key, id) in &accepted {
        match by_id.get(id.as_str()) {
            Some(row) => check!(&row.key == key, "operation {id} answered for {key} carries key {}", row.key),
            None => violations.push(format!("202 for {key} names {id}, which does not exist")),
        }
    }
    check!(rows.len() == accepted.len(), "{} operations exist for {} accepted keys", rows.len(), accepted.len());

    // RELEASE and CANCEL: refused only when their LOCK failed; each lock completed once.
    for (s, reply) in &refused_completions {
        let lock_id = s.lock_id.as_deref().unwrap_or_default();
        let lock_state = by_id.get(lock_id).map(|r| r.state.as_str());
        if lock_state != Some("FAILED") {
            let times = db
                .strings(&format!(
                    "SELECT 'LOCK ' || o.state || ' at ' || CAST(o.updated_at AS TEXT) || ' µs; lock ' || \
                     COALESCE((SELECT l.status || ' created at ' || CAST(l.created_at AS TEXT) || ' µs' FROM locks l \
                     WHERE CAST(l.id AS TEXT) = '{lock_id}'), 'missing') FROM operations o WHERE CAST(o.id AS TEXT) = '{lock_id}'"
                ))
                .await;
            violations.push(format!(
                "{} {} refused with {reply} while its LOCK {lock_id} is {lock_state:?} ({})",
                s.tx_type,
                s.key,
                times.join("")
            ));
        }
    }
    let locks: BTreeMap<String, (String, String)> = db
        .strings(
            "SELECT CAST(id AS TEXT) || '|' || status || '|' || COALESCE(CAST(completed_by AS TEXT), '') FROM locks",
        )
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1].to_owned(), f[2].to_owned()))
        })
        .collect();
    for row in rows.iter().filter(|r| r.tx_type == "LOCK") {
        let lock = locks.get(&row.id);
        match row.state.as_str() {
            "CONFIRMED" => check!(lock.is_some(), "confirmed LOCK {} has no lock", row.id),
            _ => check!(lock.is_none(), "{} LOCK {} has a lock {lock:?}", row.state, row.id),
        }
    }
    for row in rows.iter().filter(|r| r.state == "CONFIRMED" && (r.tx_type == "RELEASE" || r.tx_type == "CANCEL")) {
        let expected = if row.tx_type == "RELEASE" { "RELEASED" } else { "CANCELLED" };
        let lock = locks.get(&row.lock_id).map(|(status, by)| (status.as_str(), by.as_str()));
        check!(
            lock == Some((expected, row.id.as_str())),
            "confirmed {} {} leaves lock {} as {lock:?}",
            row.tx_type,
            row.id,
            row.lock_id
        );
    }

    // No ledger transaction applied twice: each operation that reached the ledger has its own
    // hash, included once, and the ledger holds no transaction that no operation accounts for.
    let ledger: BTreeMap<String, (bool, String)> = db
        .strings(
            "SELECT hash || '|' || CASE WHEN success THEN '1' ELSE '0' END || '|' || COALESCE(contract_address, '') \
             FROM ledger_transactions",
        )
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1] == "1", f[2].to_owned()))
        })
        .collect();
    let mut hashes: BTreeMap<&str, &str> = BTreeMap::new();
    for row in rows.iter().filter(|r| !r.tx_hash.is_empty()) {
        if let Some(other) = hashes.insert(row.tx_hash.as_str(), row.id.as_str()) {
            violations.push(format!("operations {other} and {} share txHash {}", row.id, row.tx_hash));
        }
    }
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut crash_failures = Vec::new();
    for row in &rows {
        let included = ledger.get(&row.tx_hash).map(|(success, _)| *success);
        match row.state.as_str() {
            "CONFIRMED" => check!(
                included == Some(true),
                "CONFIRMED {} {} has txHash {:?}, which the ledger holds as {included:?}",
                row.tx_type,
                row.id,
                row.tx_hash
            ),
            "FAILED" => {
                *failures.entry(format!("{}/{}", row.failure_code, row.reason_code)).or_default() += 1;
                if row.failure_code == "CHAIN_FAILED" && row.reason_code == "InsufficientAvailableBalance" {
                    check!(
                        included == Some(false),
                        "reverted {} {} has txHash {:?}, which the ledger holds as {included:?}",
                        row.tx_type,
                        row.id,
                        row.tx_hash
                    );
                } else {
                    crash_failures.push(row.id.clone());
                }
            }
            _ => check!(
                included.is_none(),
                "{} {} {} has txHash {:?}, which the ledger holds as {included:?}",
                row.state,
                row.tx_type,
                row.id,
                row.tx_hash
            ),
        }
    }
    if !crash_failures.is_empty() {
        let mut report = String::new();
        for id in crash_failures.iter().take(10) {
            report.push_str(&evidence(&db, id).await);
            report.push('\n');
        }
        violations.push(format!(
            "{} operations failed for another reason than an overdraft (a crash must not fail an operation):\n{report}",
            crash_failures.len()
        ));
    }
    let strays: Vec<_> = ledger
        .iter()
        .filter(|(hash, (_, deployed))| deployed.is_empty() && !hashes.contains_key(hash.as_str()))
        .map(|(hash, (success, _))| format!("{hash} (success {success})"))
        .collect();
    check!(strays.is_empty(), "ledger transactions no operation accounts for: {strays:?}");
    // The planned overdrafts failed on the ledger.
    for row in rows.iter().filter(|r| r.amount == OVERDRAFT) {
        check!(
            (row.state.as_str(), row.failure_code.as_str()) == ("FAILED", "CHAIN_FAILED"),
            "overdraft {} {} is {} {}",
            row.tx_type,
            row.id,
            row.state,
            row.failure_code
        );
    }

    // Balances: the ledger's per account equals the service's position and the sum of the
    // account's confirmed operations; their sum is minted minus burned.
    let mut expected: BTreeMap<String, (i64, i64)> = (0..ACCOUNTS).map(|i| (account(i), (0, 0))).collect();
    let (mut minted, mut burned) = (0i64, 0i64);
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
            other => violations.push(format!("operation {} of unknown type {other}", row.id)),
        }
    }
    let positions: BTreeMap<String, (i64, i64)> = db
        .strings("SELECT account_ref || '|' || CAST(total AS TEXT) || '|' || CAST(held AS TEXT) FROM positions")
        .await
        .into_iter()
        .map(|row| {
            let f: Vec<&str> = row.split('|').collect();
            (f[0].to_owned(), (f[1].parse().unwrap_or(-1), f[2].parse().unwrap_or(-1)))
        })
        .collect();
    let mut sum = 0;
    let mut balances = Vec::new();
    for i in 0..ACCOUNTS {
        let reference = account(i);
        let (status, reply) = setup(Method::GET, &format!("/api/accounts/{reference}/balances"), None).await;
        assert_eq!(status, 200, "{reply}");
        let total = cents(reply["total"].as_str().expect("total"));
        let locked = cents(reply["locked"].as_str().expect("locked"));
        sum += total;
        let position = positions.get(&reference).copied().unwrap_or((0, 0));
        check!(
            (total, locked) == position,
            "{reference}: ledger (total, locked) {:?} against the service's position {position:?}",
            (total, locked)
        );
        check!(
            (total, locked) == expected[&reference],
            "{reference}: ledger (total, locked) {:?} against its confirmed operations {:?}",
            (total, locked),
            expected[&reference]
        );
        balances.push(format!("{reference}={}", amount_text(total)));
    }
    check!(sum == minted - burned, "the sum of balances {sum} against minted {minted} minus burned {burned}");
    let supply = db.strings("SELECT total_supply FROM ledger_tokens").await;
    check!(supply == vec![(minted - burned).to_string()], "the token's total supply {supply:?}");

    // Every key that was resent, and every tenth other one, still answers its one operation.
    let resent = counters.resent.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let sample: Vec<(&String, &String)> = accepted
        .iter()
        .enumerate()
        .filter(|(i, (key, _))| resent.contains(*key) || i % 10 == 0)
        .map(|(_, e)| e)
        .collect();
    let replays = futures::future::join_all(sample.chunks(sample.len() / 8 + 1).map(|chunk| {
        let client = client.clone();
        let submitted = &submitted;
        async move {
            let mut wrong = Vec::new();
            for &(key, id) in chunk {
                let original = submitted.iter().find(|s| &s.key == key).expect("submitted");
                let body = match &original.lock_id {
                    Some(lock_id) => json!({ "txType": original.tx_type, "params": { "lockId": lock_id } }),
                    None => plan_body(key),
                };
                match client.submit(key, &body).await {
                    Answer::Accepted(again) if &again == id => {}
                    other => wrong.push(format!("{key}: {id} then {}", other.describe())),
                }
            }
            wrong
        }
    }))
    .await;
    let wrong: Vec<String> = replays.into_iter().flatten().collect();
    check!(wrong.is_empty(), "replays that did not answer the original operation: {wrong:?}");

    let by_type = |state: &str| {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for row in rows.iter().filter(|r| r.state == state) {
            *counts.entry(row.tx_type.as_str()).or_default() += 1;
        }
        counts
    };
    eprintln!(
        "transactions_crash ({backend:?}): {} submissions, {} accepted, {} completions refused (LOCK failed); \
         confirmed {:?}, failed {:?}, open {:?}; failures by code {failures:?}",
        submitted.len(),
        accepted.len(),
        refused_completions.len(),
        by_type("CONFIRMED"),
        by_type("FAILED"),
        open.len(),
    );
    eprintln!(
        "  kills: {}; {} keys resent, {} replays checked; resends: {} unanswered, {} 5xx, {} 409 in flight, {} 404 lock not visible; {} replayed 202s",
        kills.join("; "),
        resent.len(),
        sample.len(),
        counters.unanswered.load(Ordering::Relaxed),
        counters.server_errors.load(Ordering::Relaxed),
        counters.in_flight_409.load(Ordering::Relaxed),
        counters.lock_not_visible_404.load(Ordering::Relaxed),
        replayed_202,
    );
    eprintln!(
        "  minted {} burned {} balances {balances:?}; setup {ready:?}, submissions {submitted_in:?}, \
         settlement after them {settled_in:?}, total {:?}",
        amount_text(minted),
        amount_text(burned),
        started.elapsed()
    );
    assert!(violations.is_empty(), "{} violations:\n{}", violations.len(), violations.join("\n"));

    assert!(service.terminate().await.success());
    assert_eq!(db.count("jobs", "status = 'running'").await, 0);
}

/// Drops the test's PostgreSQL schema when the test ends, passed or failed.
struct DropSchema<'a>(&'a TestDb);

impl Drop for DropSchema<'_> {
    fn drop(&mut self) {
        self.0.drop_schema();
    }
}

/// The body planned for `key` (the plan is deterministic, so it can be made again).
fn plan_body(key: &str) -> Value {
    let client: usize = key.get(6..8).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("key {key}"));
    for step in plan(client) {
        match step {
            Planned::Single { key: k, body } | Planned::Lock { key: k, body, .. } if k == key => return body,
            _ => {}
        }
    }
    panic!("no planned body for {key}")
}

backends!(operations_survive_three_sigkills_each_applied_exactly_once);
