//! Latency of one operation on an idle service, with the real binary and the worker's default
//! poll interval (2 s). The settlement schedules its receipt poll a little ahead
//! (`TOKENOPS_RECEIPT_POLL_MS`, 200 ms): an idle worker must wake when that job falls due, not
//! at its next poll, or every operation takes about the poll interval to confirm. The same for
//! any job enqueued for later, and for a retry's backoff, on the enqueuing node and (on
//! PostgreSQL) another.

use crate::BINARY;
use crate::crash_load::DropSchema;
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokenops_app::clock::{Clock, SystemClock};
use tokenops_app::jobs::{Backoff, Finished, JobContext, JobError, JobHandler, JobRunner, RunnerSettings};
use tokenops_domain::Timestamp;
use tokenops_store::{Job, NewJob, Store};
use tokenops_testkit::{Backend, ServiceProcess, TestApp, Testbed, backends};
use tokio_util::sync::CancellationToken;

/// Operations measured one after the other; the median is asserted, so that one slow moment of
/// a loaded machine does not fail the test.
const TRANSFERS: usize = 5;
/// Well under the 2 s poll interval, well over the ~0.2–0.4 s the pipeline takes (the receipt
/// poll and the embedded ledger's block interval, 200 ms each).
const MEDIAN_BOUND: Duration = Duration::from_secs(1);

/// Only what the service needs to run: every timing (worker poll, receipt poll, block interval)
/// keeps its default, since the default is what this test pins.
fn environment(bed: &Testbed) -> BTreeMap<String, String> {
    let mut env = bed.environment("all");
    env.insert("TOKENOPS_LEDGER".to_owned(), "embedded".to_owned());
    env.insert("TOKENOPS_LOG".to_owned(), "error".to_owned());
    env
}

struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn send(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("API-Version", "1.0.0")
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.header("Idempotency-Key", uuid::Uuid::now_v7().to_string()).json(&body);
        }
        let response = request.send().await.unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or(Value::Null))
    }

    /// Submits an operation; its transactionId.
    async fn submit(&self, body: Value) -> String {
        let (status, reply) = self.send(Method::POST, "/api/transactions", Some(body)).await;
        assert_eq!(status, 202, "{reply}");
        reply["transactionId"].as_str().unwrap_or_else(|| panic!("202 without an id: {reply}")).to_owned()
    }

    /// Polls the operation until it is CONFIRMED; panics if it fails or the deadline passes.
    async fn confirmed(&self, id: &str, deadline: Duration) {
        let until = Instant::now() + deadline;
        loop {
            let (_, reply) = self.send(Method::GET, &format!("/api/transactions/{id}"), None).await;
            match reply["state"].as_str() {
                Some("CONFIRMED") => return,
                Some("FAILED") => panic!("operation {id} failed: {reply}"),
                _ => {}
            }
            assert!(Instant::now() < until, "operation {id} not CONFIRMED within {deadline:?}: {reply}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Polls `check` until it holds; panics with `what` when `deadline` passes first.
async fn until<F, Fut>(what: &str, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while !check().await {
        assert!(Instant::now() < until, "waited {deadline:?} in vain until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn an_operation_on_an_idle_service_confirms_well_within_the_poll_interval(backend: Backend) {
    let bed = Testbed::start(backend).await;
    let (db, tenant) = (&bed.db, &bed.tenant);
    let _schema = DropSchema(db);
    let service = ServiceProcess::start(BINARY, &environment(&bed)).await;
    let api = Api {
        http: reqwest::Client::builder().timeout(Duration::from_secs(10)).build().expect("http client"),
        base: service.base_url.clone(),
        token: tenant.token.clone(),
    };

    // One contract, two accounts, and a minted balance to transfer from.
    let (status, reply) = api.send(Method::POST, "/api/contracts", Some(json!({ "assetId": "USD" }))).await;
    assert_eq!(status, 201, "{reply}");
    let (status, reply) =
        api.send(Method::POST, "/api/customers", Some(json!({ "customerRef": "latency-bank" }))).await;
    assert_eq!(status, 201, "{reply}");
    until("the contract became ACTIVE", Duration::from_secs(30), || async {
        api.send(Method::GET, "/api/contracts/USD", None).await.1["status"] == "ACTIVE"
    })
    .await;
    for account in ["lat-a", "lat-b"] {
        let body = json!({ "accountRef": account, "customerRef": "latency-bank", "assetId": "USD" });
        let (status, reply) = api.send(Method::POST, "/api/accounts", Some(body)).await;
        assert_eq!(status, 201, "{reply}");
    }
    until("both accounts became ACTIVE", Duration::from_secs(30), || async {
        db.count("accounts", "status = 'ACTIVE'").await == 2
    })
    .await;
    let mint =
        api.submit(json!({ "txType": "MINT", "assetId": "USD", "accountRef": "lat-a", "amount": "1000.00" })).await;
    api.confirmed(&mint, Duration::from_secs(30)).await;

    let mut latencies = Vec::with_capacity(TRANSFERS);
    for _ in 0..TRANSFERS {
        // Idle: nothing queued or running (the last operation's event dispatch included).
        until("the service became idle", Duration::from_secs(30), || async {
            db.count("jobs", "status IN ('queued', 'running')").await == 0
        })
        .await;
        let body = json!({
            "txType": "TRANSFER", "assetId": "USD", "accountRef": "lat-a",
            "counterpartyRef": "lat-b", "amount": "1.00"
        });
        let id = api.submit(body).await;
        let accepted = Instant::now();
        api.confirmed(&id, Duration::from_secs(20)).await;
        latencies.push(accepted.elapsed());
    }
    let mut sorted = latencies.clone();
    sorted.sort();
    let median = sorted[TRANSFERS / 2];
    eprintln!("latency ({backend:?}): 202 -> CONFIRMED {latencies:?}, median {median:?}");
    assert!(
        median < MEDIAN_BOUND,
        "an idle service took a median {median:?} from 202 to CONFIRMED (each: {latencies:?}); the worker \
         polls every 2 s, so it did not wake when the receipt poll fell due"
    );
}

/// Fails its first run (a retry, with backoff), then finishes; notes when each run started.
struct FailsOnce {
    store: Arc<dyn Store>,
    runs: Arc<Mutex<Vec<Instant>>>,
}

#[async_trait::async_trait]
impl JobHandler for FailsOnce {
    fn kind(&self) -> &'static str {
        "test.fails_once"
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let first = {
            let mut runs = self.runs.lock().expect("runs");
            runs.push(Instant::now());
            runs.len() == 1
        };
        if first {
            return Err(JobError::Retry("the first run fails".into()));
        }
        ctx.finish(self.store.write().await?).await
    }
}

/// A job enqueued 300 ms ahead, whose first run fails with a 300 ms backoff, runs twice and is
/// done in well under a second, with a worker that polls every 30 s. On PostgreSQL the worker
/// runs on a second connection to the store (another node), so the enqueuer's NOTIFY is what
/// wakes it first; on SQLite it shares the enqueuer's store, as every worker does.
async fn an_idle_worker_wakes_when_a_later_job_and_its_retry_fall_due(backend: Backend) {
    const AHEAD_MS: u64 = 300;
    const BACKOFF_MS: u64 = 300;
    let app = TestApp::spawn(backend).await;
    let node: Arc<dyn Store> = match backend {
        Backend::Sqlite => app.app.store.clone(),
        Backend::Postgres => Arc::new(
            tokenops_store_postgres::PostgresStore::connect(&app.db.url(), app.db.schema())
                .await
                .expect("a second node's store"),
        ),
    };
    let runs = Arc::new(Mutex::new(Vec::new()));
    let settings = RunnerSettings {
        concurrency: 2,
        lease_ms: 30_000,
        poll_interval: Duration::from_secs(30),
        backoff: Backoff { base_ms: BACKOFF_MS as i64, cap_ms: BACKOFF_MS as i64 },
        periodic: Vec::new(),
        shutdown_grace: Duration::from_secs(5),
    };
    let handler = FailsOnce { store: node.clone(), runs: runs.clone() };
    let runner = Arc::new(JobRunner::new(node.clone(), Arc::new(SystemClock), settings, vec![Arc::new(handler)]));
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(runner.clone().run(shutdown.clone()));
    // Time for its first claim, which finds nothing: then it waits, idle, for a wake-up. (Were
    // it slower, its first claim would learn when the job falls due instead.)
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Both clocks read together: the job falls due AHEAD_MS after `enqueued`.
    let (now, enqueued) = (SystemClock.now(), Instant::now());
    let job = NewJob {
        kind: "test.fails_once".to_owned(),
        tenant_id: None,
        payload: json!({}),
        run_at: now.plus_millis(AHEAD_MS as i64),
        max_attempts: 3,
        dedupe_key: None,
    };
    let mut tx = app.app.store.write().await.expect("begin");
    tx.jobs().enqueue(&job, now).await.expect("enqueue");
    tx.commit().await.expect("commit");
    until("the job was done", Duration::from_secs(20), || async {
        app.db.count("jobs", "kind = 'test.fails_once' AND status = 'done'").await == 1
    })
    .await;
    let done = enqueued.elapsed();
    shutdown.cancel();
    worker.await.expect("runner");
    if backend == Backend::Postgres {
        node.close().await;
    }

    let runs = runs.lock().expect("runs").clone();
    let offsets: Vec<Duration> = runs.iter().map(|at| at.duration_since(enqueued)).collect();
    eprintln!("latency ({backend:?}): runs at {offsets:?} after the enqueue, done after {done:?}");
    assert_eq!(runs.len(), 2, "one failed run, one retry: {offsets:?}");
    // Never early (the margin is for the two clocks' reads).
    assert!(offsets[0] >= Duration::from_millis(AHEAD_MS - 5), "ran before it was due: {offsets:?}");
    assert!(
        offsets[0] < Duration::from_millis(AHEAD_MS + 700),
        "the worker did not wake when the job fell due: {offsets:?}"
    );
    let backoff = runs[1].duration_since(runs[0]);
    assert!(
        backoff < Duration::from_millis(BACKOFF_MS * 6 / 5 + 700),
        "the worker did not wake when the retry fell due: {offsets:?}"
    );
}

/// What the worker loop learns from a claim: the earliest `run_at` of a queued job not due yet,
/// once nothing else is due; nothing after a full claim (more may be due). Jobs that are
/// running, done or due do not count.
async fn a_short_claim_tells_when_the_next_queued_job_falls_due(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    let store = app.app.store.clone();
    let now = SystemClock.now();
    let job = |run_at: Timestamp| NewJob {
        kind: "test.later".to_owned(),
        tenant_id: None,
        payload: json!({}),
        run_at,
        max_attempts: 3,
        dedupe_key: None,
    };
    let mut tx = store.write().await.expect("begin");
    for ahead in [0, 0, 2_000, 1_000, 3_000] {
        tx.jobs().enqueue(&job(now.plus_millis(ahead)), now).await.expect("enqueue");
    }
    tx.commit().await.expect("commit");
    let claim = |limit: u32| {
        let store = store.clone();
        async move {
            let mut tx = store.write().await.expect("begin");
            let claimed = tx.jobs().claim_with_next_due(now, now.plus_millis(60_000), limit).await.expect("claim");
            tx.commit().await.expect("commit");
            claimed
        }
    };

    let full = claim(1).await;
    assert_eq!((full.jobs.len(), full.next_due), (1, None), "a full claim: more may be due");
    let short = claim(5).await;
    assert_eq!(short.jobs.len(), 1, "the other due job, as `claim` takes it");
    assert!(short.jobs.iter().all(|job| job.run_at == now && job.lease_token.is_some()));
    assert_eq!(short.next_due, Some(now.plus_millis(1_000)), "the earliest of the later jobs");
    let empty = claim(5).await;
    assert_eq!((empty.jobs.len(), empty.next_due), (0, Some(now.plus_millis(1_000))));
    assert_eq!(app.db.count("jobs", "status = 'running'").await, 2, "the running jobs are not counted");

    app.db.execute("UPDATE jobs SET status = 'done' WHERE status = 'queued'").await;
    assert_eq!(claim(5).await, Default::default(), "nothing queued: nothing to wake for");
}

backends!(
    an_operation_on_an_idle_service_confirms_well_within_the_poll_interval,
    an_idle_worker_wakes_when_a_later_job_and_its_retry_fall_due,
    a_short_claim_tells_when_the_next_queued_job_falls_due
);
