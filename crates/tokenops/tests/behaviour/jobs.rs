//! Durable jobs over the real app: every event enqueues its dispatch job in the same
//! transaction; a job whose work fails is retried with exponential backoff and becomes dead
//! after the configured number of attempts; the queue shows in the metrics.

use serde_json::json;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokenops_app::clock::{Clock, SystemClock};
use tokenops_app::jobs::{Backoff, Finished, JobContext, JobError, JobHandler, JobRunner, RunnerSettings};
use tokenops_store::{Job, NewJob, Store};
use tokenops_testkit::{Backend, TestApp, backends};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

async fn spawn(backend: Backend) -> TestApp {
    let settings = [
        ("TOKENOPS_JOB_MAX_ATTEMPTS", "3"),
        ("TOKENOPS_JOB_BACKOFF_BASE_MS", "1000"),
        ("TOKENOPS_JOB_BACKOFF_CAP_MS", "60000"),
    ];
    TestApp::spawn_with(
        backend,
        settings.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    )
    .await
}

async fn change_status(app: &TestApp, customer: &str, status: &str) {
    app.patch(&format!("/api/customers/{customer}"), &json!({ "status": status })).await.expect(200);
}

async fn an_event_and_its_dispatch_job_commit_together_and_the_job_completes(backend: Backend) {
    let app = spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "j-1" })).await.expect(201);
    assert_eq!(app.db.count("jobs", "kind = 'event.dispatch'").await, 0, "registration emits no event");
    change_status(&app, "j-1", "INACTIVE").await;
    assert_eq!(app.db.count("events", "").await, 1);
    assert_eq!(app.db.count("jobs", "kind = 'event.dispatch' AND status = 'queued'").await, 1);
    let report = app.drain_jobs().await;
    assert_eq!(report.completed, 1);
    assert_eq!(app.db.count("events", "dispatched_at IS NOT NULL").await, 1);
    assert_eq!(app.db.count("jobs", "status = 'done'").await, 1);
}

async fn a_failing_job_is_retried_with_backoff_then_dead_after_its_attempts(backend: Backend) {
    let app = spawn(backend).await;
    app.post("/api/customers", &json!({ "customerRef": "j-2" })).await.expect(201);
    change_status(&app, "j-2", "INACTIVE").await;
    app.db.fail_updates_of("events").await;

    // Attempt 1 fails: the job waits about 1 s (±20 %) before it is due again.
    let first = app.drain_jobs().await;
    assert_eq!(first.retried, 1);
    assert_eq!(app.db.count("jobs", "status = 'queued' AND attempts = 1 AND last_error IS NOT NULL").await, 1);
    assert_eq!(app.drain_jobs().await.retried, 0, "not due before its backoff");
    app.clock.advance_millis(1_250);
    // Attempt 2 fails: the delay doubles, so 1.25 s is not enough this time.
    assert_eq!(app.drain_jobs().await.retried, 1);
    app.clock.advance_millis(1_250);
    assert_eq!(app.drain_jobs().await.retried, 0, "the second delay is about 2 s");
    app.clock.advance_millis(1_250);
    // Attempt 3 is the last: the job is dead, and stays dead when the fault is gone.
    assert_eq!(app.drain_jobs().await.dead, 1);
    assert_eq!(app.db.count("jobs", "status = 'dead' AND attempts = 3").await, 1);
    app.db.heal_inserts_into("events").await;
    app.clock.advance_millis(3_600_000);
    assert_eq!(app.drain_jobs().await, Default::default());
    assert_eq!(app.db.count("events", "dispatched_at IS NULL").await, 1);

    let metrics = reqwest::get(format!("{}/metrics", app.base_url)).await.expect("metrics").text().await.expect("text");
    let dead =
        metrics.lines().any(|l| l.starts_with("tokenops_jobs_dead{kind=\"event.dispatch\"}") && l.ends_with(" 1"));
    assert!(dead, "{metrics}");
}

/// A handler that takes a while; each run is counted.
struct Slow {
    store: Arc<dyn Store>,
    takes: Duration,
    runs: Arc<Mutex<Vec<Uuid>>>,
}

#[async_trait::async_trait]
impl JobHandler for Slow {
    fn kind(&self) -> &'static str {
        "test.slow"
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        self.runs.lock().expect("runs").push(job.id);
        tokio::time::sleep(self.takes).await;
        ctx.finish(self.store.write().await?).await
    }
}

/// A claimed job that waits for a free slot longer than its lease keeps the lease: the node
/// does not claim it again (it once did, and the job then ran twice at once). Two slots,
/// four jobs of a second each, leases of 0.3 s: the last two wait a second in the backlog.
async fn a_claimed_job_waiting_longer_than_its_lease_is_not_claimed_again(backend: Backend) {
    let app = spawn(backend).await;
    let store = app.app.store.clone();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let slow = Slow { store: store.clone(), takes: Duration::from_secs(1), runs: runs.clone() };
    let settings = RunnerSettings {
        concurrency: 2,
        lease_ms: 300,
        poll_interval: Duration::from_millis(20),
        backoff: Backoff { base_ms: 10, cap_ms: 100 },
        periodic: Vec::new(),
        shutdown_grace: Duration::from_secs(5),
    };
    let runner = Arc::new(JobRunner::new(store.clone(), Arc::new(SystemClock), settings, vec![Arc::new(slow)]));
    let now = SystemClock.now();
    let mut tx = store.write().await.expect("begin");
    for _ in 0..4 {
        let job = NewJob {
            kind: "test.slow".to_owned(),
            tenant_id: None,
            payload: json!({}),
            run_at: now,
            max_attempts: 5,
            dedupe_key: None,
        };
        tx.jobs().enqueue(&job, now).await.expect("enqueue");
    }
    tx.commit().await.expect("commit");

    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(runner.clone().run(shutdown.clone()));
    let deadline = Instant::now() + Duration::from_secs(20);
    while app.db.count("jobs", "kind = 'test.slow' AND status = 'done'").await < 4 {
        assert!(Instant::now() < deadline, "the jobs did not finish: {:?}", runs.lock().expect("runs"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    shutdown.cancel();
    worker.await.expect("runner");
    let mut ran = runs.lock().expect("runs").clone();
    ran.sort();
    ran.dedup();
    assert_eq!((ran.len(), runs.lock().expect("runs").len()), (4, 4), "each job ran once");
    let attempts =
        app.db.strings("SELECT CAST(attempts AS TEXT) || ' ' || status FROM jobs WHERE kind = 'test.slow'").await;
    assert_eq!(app.db.count("jobs", "kind = 'test.slow' AND attempts = 1").await, 4, "each claimed once: {attempts:?}");
}

backends!(
    an_event_and_its_dispatch_job_commit_together_and_the_job_completes,
    a_failing_job_is_retried_with_backoff_then_dead_after_its_attempts,
    a_claimed_job_waiting_longer_than_its_lease_is_not_claimed_again
);
