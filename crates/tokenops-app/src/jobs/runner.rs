//! The job runner: claims due jobs in short transactions, runs them outside any transaction
//! with bounded concurrency, and records each outcome only while its lease is still held.
//! `drain` runs the queue to empty on the caller's task, for deterministic tests. Jobs of a
//! kind whose handler batches run in batches, in `serve` and in `drain` alike.

use super::{Backoff, BatchContext, BatchFinished, JobContext, JobError, JobHandler, kinds};
use crate::clock::Clock;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokenops_domain::Timestamp;
use tokenops_store::{Job, Lease, NewJob, QueueStats, Store, StoreResult, in_background};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use uuid::Uuid;

#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// Jobs run at once by one node.
    pub concurrency: usize,
    /// How long a claimed job stays ours; past it another worker may run it again.
    pub lease_ms: i64,
    /// How often to look for due jobs when no wake-up arrives (the polling fallback).
    pub poll_interval: Duration,
    pub backoff: Backoff,
    /// Jobs each node enqueues on a period (kind, period): maintenance, the lock expiry sweep,
    /// the reconciliation. A dedupe key keeps each singular across nodes.
    pub periodic: Vec<(&'static str, Duration)>,
    /// On shutdown, how long running jobs may take before their leases are given back.
    pub shutdown_grace: Duration,
}

/// Gives a finished (or aborted) batch's jobs back to the count of running jobs.
struct RunningGuard {
    running: Arc<std::sync::atomic::AtomicUsize>,
    size: usize,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(self.size, std::sync::atomic::Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrainReport {
    pub completed: u64,
    pub retried: u64,
    pub dead: u64,
}

pub struct JobRunner {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    handlers: HashMap<&'static str, Arc<dyn JobHandler>>,
    settings: RunnerSettings,
    /// Leases of jobs running on this node, given back if shutdown interrupts them.
    running: Mutex<HashMap<Uuid, Lease>>,
    /// Claimed jobs not started yet (in the backlog, or behind others of their batch), whose
    /// leases `keep_waiting` extends: without it, a job that waits longer than its lease is
    /// claimed again and runs twice at once. `false` once its lease was lost while it waited.
    waiting: Mutex<HashMap<Uuid, (Lease, bool)>>,
}

enum Outcome {
    Completed,
    Retried,
    Dead,
    Lost,
}

impl JobRunner {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        settings: RunnerSettings,
        handlers: Vec<Arc<dyn JobHandler>>,
    ) -> Self {
        let handlers = handlers.into_iter().map(|h| (h.kind(), h)).collect();
        Self {
            store,
            clock,
            handlers,
            settings,
            running: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    pub async fn stats(&self) -> StoreResult<QueueStats> {
        let mut tx = self.store.read().await?;
        tx.jobs().stats(self.clock.now()).await
    }

    /// Enqueues the maintenance job unless one is already queued or running.
    pub async fn schedule_maintenance(&self) -> StoreResult<()> {
        self.schedule_periodic(kinds::MAINTENANCE_PRUNE).await
    }

    /// Enqueues a periodic job of `kind` unless one is already queued or running.
    pub async fn schedule_periodic(&self, kind: &str) -> StoreResult<()> {
        let now = self.clock.now();
        let mut tx = self.store.write().await?;
        let job = NewJob {
            kind: kind.to_owned(),
            tenant_id: None,
            payload: serde_json::json!({}),
            run_at: now,
            max_attempts: 3,
            dedupe_key: Some(kind.to_owned()),
        };
        tx.jobs().enqueue(&job, now).await?;
        tx.commit().await
    }

    async fn claim(&self, limit: usize) -> StoreResult<Vec<Job>> {
        let now = self.clock.now();
        let mut tx = self.store.write().await?;
        let jobs = tx
            .jobs()
            .claim(now, now.plus_millis(self.settings.lease_ms), u32::try_from(limit).unwrap_or(u32::MAX))
            .await?;
        tx.commit().await?;
        self.wait(&jobs);
        Ok(jobs)
    }

    /// Marks claimed jobs as waiting to start: their leases are kept from now on.
    fn wait(&self, jobs: &[Job]) {
        if let Ok(mut waiting) = self.waiting.lock() {
            for job in jobs {
                if let Some(token) = job.lease_token {
                    waiting.entry(job.id).or_insert((Lease { job_id: job.id, token }, true));
                }
            }
        }
    }

    /// Takes a job out of the waiting ones to start it; `false` when its lease ran out while it
    /// waited (another claim holds it now, so it must not start here).
    fn start(&self, job: &Job) -> bool {
        self.waiting.lock().ok().and_then(|mut waiting| waiting.remove(&job.id)).is_none_or(|(_, held)| held)
    }

    /// Extends the leases of the waiting jobs every third of a lease, for as long as the
    /// runner runs; a lease found lost marks its job as not to be started.
    async fn keep_waiting(&self) -> std::convert::Infallible {
        let period = Duration::from_millis(u64::try_from(self.settings.lease_ms / 3).unwrap_or(1_000).max(10));
        loop {
            tokio::time::sleep(period).await;
            let mut leases: Vec<Lease> = self
                .waiting
                .lock()
                .map(|waiting| waiting.values().filter(|(_, held)| *held).map(|(lease, _)| *lease).collect())
                .unwrap_or_default();
            if leases.is_empty() {
                continue;
            }
            // In job id order, as every other holder of several job rows takes them.
            leases.sort_by_key(|lease| lease.job_id);
            let now = self.clock.now();
            let extended = async {
                let mut tx = self.store.write().await?;
                let mut lost = Vec::new();
                for lease in &leases {
                    if !tx.jobs().extend_lease(*lease, now.plus_millis(self.settings.lease_ms), now).await? {
                        lost.push(lease.job_id);
                    }
                }
                tx.commit().await?;
                Ok::<Vec<Uuid>, tokenops_store::StoreError>(lost)
            }
            .await;
            match extended {
                Ok(lost) if !lost.is_empty() => {
                    tracing::warn!(
                        jobs = lost.len(),
                        "lost the leases of jobs waiting to start; they will not start here"
                    );
                    if let Ok(mut waiting) = self.waiting.lock() {
                        for job_id in lost {
                            if let Some(entry) = waiting.get_mut(&job_id) {
                                entry.1 = false;
                            }
                        }
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "could not extend waiting jobs' leases"),
            }
        }
    }

    /// Runs every job that is due at the clock's current time, and every job those enqueue,
    /// until none is due. Jobs scheduled for later (retries) stay queued: move the clock to run them.
    pub async fn drain(&self) -> StoreResult<DrainReport> {
        let mut report = DrainReport::default();
        loop {
            let mut jobs: VecDeque<Job> = self.claim(64).await?.into();
            if jobs.is_empty() {
                return Ok(report);
            }
            while let Some(batch) = self.next_batch(&mut jobs, usize::MAX) {
                for outcome in self.run_batch(batch).await {
                    match outcome {
                        Outcome::Completed => report.completed += 1,
                        Outcome::Retried => report.retried += 1,
                        Outcome::Dead => report.dead += 1,
                        Outcome::Lost => {}
                    }
                }
            }
        }
    }

    /// Takes the backlog's first job, with as many more of its kind as its handler batches
    /// (and `room` allows).
    fn next_batch(&self, backlog: &mut VecDeque<Job>, room: usize) -> Option<Vec<Job>> {
        let first = backlog.pop_front()?;
        let limit = self.handlers.get(first.kind.as_str()).map_or(1, |h| h.batch_limit()).min(room).max(1);
        let mut batch = vec![first];
        if limit > 1 && !backlog.is_empty() {
            let kind = batch[0].kind.clone();
            let mut others = VecDeque::with_capacity(backlog.len());
            for job in backlog.drain(..) {
                if batch.len() < limit && job.kind == kind {
                    batch.push(job);
                } else {
                    others.push_back(job);
                }
            }
            *backlog = others;
        }
        Some(batch)
    }

    /// The worker loop of `serve`: runs until `shutdown` is cancelled, then lets running jobs
    /// finish within the grace period and gives back the leases of those that do not.
    ///
    /// Claims run ahead of the running jobs: up to `concurrency` claimed jobs wait in a backlog,
    /// and a finishing job hands its slot to the next one at once. Without it, every finished
    /// job would wait for a claim of its own, and a claim is a durable commit, so the commit
    /// rate, not the work, would bound the jobs run per second.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut tasks: JoinSet<()> = JoinSet::new();
        // Jobs running now, batches counted by their size: concurrency bounds jobs, not tasks.
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let busy = || running.load(std::sync::atomic::Ordering::Relaxed);
        let mut backlog: VecDeque<Job> = VecDeque::new();
        let start = tokio::time::Instant::now();
        let mut due: Vec<(&'static str, Duration, tokio::time::Instant)> =
            self.settings.periodic.iter().map(|(kind, every)| (*kind, *every, start)).collect();
        let concurrency = self.settings.concurrency;
        let keeper = {
            let runner = self.clone();
            tokio::spawn(async move {
                let _never = runner.keep_waiting().await;
            })
        };
        loop {
            while tasks.try_join_next().is_some() {}
            while busy() < concurrency
                && let Some(batch) = self.next_batch(&mut backlog, concurrency - busy())
            {
                let runner = self.clone();
                let size = batch.len();
                running.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
                let done = RunningGuard { running: running.clone(), size };
                tasks.spawn(in_background(async move {
                    runner.run_batch(batch).await;
                    drop(done);
                }));
            }
            // Claim when the backlog has run below half: one claim then fills it.
            let wanted = (2 * concurrency).saturating_sub(busy() + backlog.len());
            let mut claimed_any = false;
            if wanted > 0 && backlog.len() < concurrency / 2 + 1 && !shutdown.is_cancelled() {
                match in_background(self.claim(wanted)).await {
                    Ok(jobs) => {
                        claimed_any = !jobs.is_empty();
                        backlog.extend(jobs);
                    }
                    Err(e) => tracing::warn!(error = %e, "could not claim jobs"),
                }
            }
            if claimed_any && busy() < concurrency {
                continue;
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep_until(due.iter().map(|d| d.2).min().unwrap_or(start + Duration::from_secs(3_600))), if !due.is_empty() => {
                    let now = tokio::time::Instant::now();
                    for (kind, every, at) in &mut due {
                        if *at <= now {
                            *at = now + *every;
                            if let Err(e) = self.schedule_periodic(kind).await {
                                tracing::warn!(error = %e, kind, "could not schedule a periodic job");
                            }
                        }
                    }
                }
                _ = self.store.wait_for_jobs(self.settings.poll_interval), if backlog.is_empty() && busy() < concurrency => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        keeper.abort();
        // Claimed jobs that never started go back to the queue at once.
        self.release(backlog.drain(..).filter_map(|job| job.lease_token.map(|token| Lease { job_id: job.id, token })))
            .await;
        let drained =
            tokio::time::timeout(self.settings.shutdown_grace, async { while tasks.join_next().await.is_some() {} })
                .await;
        if drained.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            self.release_running().await;
        }
    }

    async fn release_running(&self) {
        let leases: Vec<Lease> =
            self.running.lock().map(|mut m| m.drain().map(|(_, l)| l).collect()).unwrap_or_default();
        self.release(leases).await;
    }

    /// Gives leases back, so that their jobs run again without waiting for the leases to expire.
    async fn release(&self, leases: impl IntoIterator<Item = Lease>) {
        for lease in leases {
            let result = async {
                let mut tx = self.store.write().await?;
                tx.jobs().release(lease, self.clock.now()).await?;
                tx.commit().await
            }
            .await;
            match result {
                Ok(()) => tracing::info!(job_id = %lease.job_id, "released an unfinished job at shutdown"),
                Err(e) => {
                    tracing::warn!(job_id = %lease.job_id, error = %e, "could not release a job; its lease will expire")
                }
            }
        }
    }

    /// Runs jobs of one kind: together through the handler's `run_batch` when there are
    /// several, then alone whatever the batch left (or all of them, if the batch failed).
    async fn run_batch(&self, mut jobs: Vec<Job>) -> Vec<Outcome> {
        let handler = match jobs.first().and_then(|job| self.handlers.get(job.kind.as_str())) {
            Some(handler) if jobs.len() > 1 => handler.clone(),
            _ => return self.run_all_alone(jobs).await,
        };
        // Jobs past their attempt budget are buried by `run_one`, never batched.
        let (mut alone, batched): (Vec<Job>, Vec<Job>) =
            jobs.drain(..).partition(|job| job.lease_token.is_none() || job.attempts > job.max_attempts);
        let (batched, lost): (Vec<Job>, Vec<Job>) = batched.into_iter().partition(|job| self.start(job));
        let mut outcomes: Vec<Outcome> = lost.iter().map(|_| Outcome::Lost).collect();
        if batched.is_empty() {
            outcomes.extend(self.run_all_alone(alone).await);
            return outcomes;
        }
        let leases: Vec<Lease> =
            batched.iter().filter_map(|job| job.lease_token.map(|token| Lease { job_id: job.id, token })).collect();
        if let Ok(mut running) = self.running.lock() {
            running.extend(leases.iter().map(|lease| (lease.job_id, *lease)));
        }
        let started = std::time::Instant::now();
        let kind = handler.kind();
        let ctx = BatchContext::new(leases.clone(), self.clock.clone());
        let span = tracing::info_span!("job batch", kind, jobs = batched.len());
        let result = tokio::select! {
            // A batch that finished wins over a heartbeat that found its (completed) jobs gone.
            biased;
            result = handler.run_batch(batched.clone(), &ctx).instrument(span) => result,
            () = self.keep_leases(&leases) => Err(JobError::Fenced),
        };
        if let Ok(mut running) = self.running.lock() {
            for lease in &leases {
                running.remove(&lease.job_id);
            }
        }
        match result {
            Ok(BatchFinished { rest }) => {
                let completed = batched.len() - rest.len().min(batched.len());
                outcomes.extend((0..completed).map(|_| Outcome::Completed));
                metrics::counter!("tokenops_jobs_finished_total", "kind" => kind, "outcome" => "completed")
                    .increment(completed as u64);
                metrics::histogram!("tokenops_job_batch_size", "kind" => kind).record(completed as f64);
                metrics::histogram!("tokenops_job_duration_seconds", "kind" => kind)
                    .record(started.elapsed().as_secs_f64());
                alone.extend(rest);
            }
            Err(error) => {
                tracing::debug!(kind, %error, jobs = batched.len(), "a batch failed; its jobs run one at a time");
                alone.extend(batched);
            }
        }
        outcomes.extend(self.run_all_alone(alone).await);
        outcomes
    }

    async fn run_all_alone(&self, jobs: Vec<Job>) -> Vec<Outcome> {
        // Those a batch left wait again, behind one another.
        self.wait(&jobs);
        // Known as running while they wait their turn, so that a shutdown gives their leases
        // back (each `run_one` forgets its own when it ends).
        if let Ok(mut running) = self.running.lock() {
            running.extend(
                jobs.iter().filter_map(|job| job.lease_token.map(|token| (job.id, Lease { job_id: job.id, token }))),
            );
        }
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            outcomes.push(self.run_one(job).await);
        }
        outcomes
    }

    async fn run_one(&self, job: Job) -> Outcome {
        let Some(token) = job.lease_token else {
            return Outcome::Lost;
        };
        let lease = Lease { job_id: job.id, token };
        if !self.start(&job) {
            if let Ok(mut running) = self.running.lock() {
                running.remove(&job.id);
            }
            return Outcome::Lost;
        }
        if let Ok(mut running) = self.running.lock() {
            running.insert(job.id, lease);
        }
        let started = std::time::Instant::now();
        let span = tracing::info_span!("job", job_id = %job.id, kind = %job.kind, attempt = job.attempts);
        let outcome = self.execute(&job, lease).instrument(span).await;
        if let Ok(mut running) = self.running.lock() {
            running.remove(&job.id);
        }
        let label = match outcome {
            Outcome::Completed => "completed",
            Outcome::Retried => "retried",
            Outcome::Dead => "dead",
            Outcome::Lost => "lost",
        };
        metrics::counter!("tokenops_jobs_finished_total", "kind" => job.kind.clone(), "outcome" => label).increment(1);
        metrics::histogram!("tokenops_job_duration_seconds", "kind" => job.kind.clone())
            .record(started.elapsed().as_secs_f64());
        outcome
    }

    async fn execute(&self, job: &Job, lease: Lease) -> Outcome {
        let Some(handler) = self.handlers.get(job.kind.as_str()) else {
            return self
                .record_failure(job, lease, JobError::Permanent(format!("no handler for job kind {:?}", job.kind)))
                .await;
        };
        if job.attempts > job.max_attempts {
            // Claimed again after a crash on its last attempt: never run beyond the budget.
            return self
                .record_failure(job, lease, JobError::Permanent("attempts exhausted by interrupted runs".into()))
                .await;
        }
        let ctx = JobContext::new(lease, self.clock.clone());
        let leases = [lease];
        let result = tokio::select! {
            biased;
            result = handler.run(job, &ctx) => result,
            // The heartbeat only returns when the lease is lost: stop the handler (its open
            // transaction rolls back) rather than run beside the worker that took the job over.
            () = self.keep_leases(&leases) => Err(JobError::Fenced),
        };
        match result {
            Ok(_finished) => Outcome::Completed,
            Err(error) => self.record_failure(job, lease, error).await,
        }
    }

    /// Extends the leases every third of their length while the handler runs, so that a job
    /// that outlives one lease is not claimed again; returns only when a lease is lost.
    async fn keep_leases(&self, leases: &[Lease]) {
        // In job id order, the order `complete_all` locks them in: two transactions never wait
        // for each other's rows in opposite orders.
        let mut leases = leases.to_vec();
        leases.sort_by_key(|lease| lease.job_id);
        let period = Duration::from_millis(u64::try_from(self.settings.lease_ms / 3).unwrap_or(1_000).max(10));
        loop {
            tokio::time::sleep(period).await;
            let now = self.clock.now();
            let extended = async {
                let mut tx = self.store.write().await?;
                let mut lost = None;
                for lease in &leases {
                    if !tx.jobs().extend_lease(*lease, now.plus_millis(self.settings.lease_ms), now).await? {
                        lost = Some(lease.job_id);
                        break;
                    }
                }
                tx.commit().await?;
                Ok::<Option<Uuid>, tokenops_store::StoreError>(lost)
            }
            .await;
            match extended {
                Ok(None) => {}
                Ok(Some(job_id)) => {
                    tracing::warn!(%job_id, "lost the lease of a running job; stopping it");
                    return;
                }
                // The leases still run until they expire; the next beat tries again.
                Err(e) => tracing::warn!(error = %e, "could not extend running jobs' leases"),
            }
        }
    }

    async fn record_failure(&self, job: &Job, lease: Lease, error: JobError) -> Outcome {
        if matches!(error, JobError::Fenced) {
            // Another worker holds the job now; its outcome is that worker's to record.
            return Outcome::Lost;
        }
        let now: Timestamp = self.clock.now();
        let result = async {
            let mut tx = self.store.write().await?;
            let outcome = match &error {
                JobError::Fenced => Outcome::Lost,
                JobError::Retry(reason) if job.attempts < job.max_attempts => {
                    let delay = self.settings.backoff.delay_ms(job.attempts, &mut rand::thread_rng());
                    tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempts, delay_ms = delay, %reason, "job failed; will retry");
                    if tx.jobs().retry(lease, now.plus_millis(delay), reason, now).await? { Outcome::Retried } else { Outcome::Lost }
                }
                JobError::Retry(reason) | JobError::Permanent(reason) => {
                    tracing::error!(job_id = %job.id, kind = %job.kind, attempt = job.attempts, %reason, "job is dead");
                    if let Some(handler) = self.handlers.get(job.kind.as_str())
                        && let Err(e) = handler.on_dead(job, tx.as_mut(), reason, now).await
                    {
                        return Err(tokenops_store::StoreError::Backend(format!("on_dead: {e}").into()));
                    }
                    if tx.jobs().bury(lease, reason, now).await? { Outcome::Dead } else { Outcome::Lost }
                }
            };
            tx.commit().await?;
            Ok::<_, tokenops_store::StoreError>(outcome)
        }
        .await;
        result.unwrap_or_else(|e| {
            tracing::warn!(job_id = %job.id, error = %e, "could not record a job failure; its lease will expire");
            Outcome::Lost
        })
    }
}
