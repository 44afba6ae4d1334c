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
use tokenops_store::{Claimed, Job, Lease, NewJob, QueueStats, Store, StoreResult, in_background};
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
    /// claimed again (by this node too) and runs twice at once.
    waiting: Mutex<HashMap<Lease, Waiting>>,
}

/// A claimed job waiting to start.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    /// Until when its lease is known to be ours; `None` once found lost.
    held_until: Option<Timestamp>,
    /// When it began to wait: past `MAX_WAIT_IN_LEASES` leases its lease is no longer
    /// extended, so that a node whose slots are all stuck does not keep its backlog from the
    /// other nodes for ever.
    since: Timestamp,
}

/// Ten leases (ten minutes by default): far longer than a backlog waits on a node whose jobs
/// move, since the backlog is refilled only once it runs below half.
const MAX_WAIT_IN_LEASES: i64 = 10;

enum Outcome {
    Completed,
    Retried,
    Dead,
    Lost,
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Retried => "retried",
            Outcome::Dead => "dead",
            Outcome::Lost => "lost",
        }
    }
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

    /// The job kinds this runner has handlers for.
    pub fn kinds(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.handlers.keys().copied()
    }

    /// The queue's figures per job kind.
    pub async fn stats(&self) -> StoreResult<Vec<(String, QueueStats)>> {
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

    async fn claim(&self, limit: usize) -> StoreResult<Claimed> {
        let now = self.clock.now();
        let mut tx = self.store.write().await?;
        let claimed = tx
            .jobs()
            .claim_with_next_due(now, now.plus_millis(self.settings.lease_ms), u32::try_from(limit).unwrap_or(u32::MAX))
            .await?;
        tx.commit().await?;
        self.wait(&claimed.jobs);
        Ok(claimed)
    }

    /// How long an idle worker waits for a wake-up: until the earliest queued job falls due, at
    /// most the poll interval. A commit that enqueues wakes the worker, but a job enqueued for
    /// later (a receipt poll, a retry's backoff) is not claimable then: without this the
    /// worker would find it only at its next poll.
    fn idle_wait(&self, next_due: Option<Timestamp>) -> Duration {
        let poll = self.settings.poll_interval;
        next_due.map_or(poll, |at| {
            let micros = at.as_micros().saturating_sub(self.clock.now().as_micros());
            Duration::from_micros(u64::try_from(micros).unwrap_or(0)).min(poll)
        })
    }

    /// Marks freshly claimed jobs as waiting to start: their leases are kept from now on.
    fn wait(&self, jobs: &[Job]) {
        let now = self.clock.now();
        if let Ok(mut waiting) = self.waiting.lock() {
            for job in jobs {
                if let Some(lease) = lease_of(job) {
                    // The claim asked for a whole lease from now, whatever the store reported.
                    let held_until = job.lease_until.unwrap_or_else(|| now.plus_millis(self.settings.lease_ms));
                    waiting.entry(lease).or_insert(Waiting { held_until: Some(held_until), since: now });
                }
            }
        }
    }

    /// Makes jobs that ran in a batch wait again, to run alone: their leases are extended
    /// first, so that those the batch lost (or whose heartbeat fell behind) are known and
    /// dropped, not started beside the claim that holds them now. Returns those still held.
    async fn wait_again(&self, jobs: Vec<Job>) -> (Vec<Job>, usize) {
        let now = self.clock.now();
        let leases: Vec<Lease> = jobs.iter().filter_map(lease_of).collect();
        let held = match self.extend_all(&leases, now).await {
            Ok(held) => held,
            Err(e) => {
                // Unknown: only the claim's own lease end is certain (below), and `start`
                // refuses a job past it rather than run it beside a claim that took it over.
                tracing::warn!(error = %e, "could not extend the leases of jobs a batch left");
                Vec::new()
            }
        };
        let extended: HashMap<Lease, bool> = leases.into_iter().zip(held).collect();
        let (mut kept, mut lost) = (Vec::with_capacity(jobs.len()), 0);
        if let Ok(mut waiting) = self.waiting.lock() {
            for job in jobs {
                match lease_of(&job) {
                    Some(lease) if extended.get(&lease) == Some(&false) => lost += 1,
                    Some(lease) => {
                        let held_until = if extended.get(&lease) == Some(&true) {
                            Some(now.plus_millis(self.settings.lease_ms))
                        } else {
                            job.lease_until
                        };
                        waiting.insert(lease, Waiting { held_until, since: now });
                        kept.push(job);
                    }
                    None => kept.push(job),
                }
            }
        }
        (kept, lost)
    }

    /// Takes a job out of the waiting ones to start it; `false` when its lease is lost (another
    /// claim may hold it by now, so it must not start here). A lease too near its end for the
    /// job's own heartbeat, which first beats a third of a lease after the start, is extended
    /// first.
    async fn start(&self, job: &Job) -> bool {
        let Some(lease) = lease_of(job) else { return true };
        let waited = self.waiting.lock().ok().and_then(|mut waiting| waiting.remove(&lease));
        let Some(Waiting { held_until, .. }) = waited else { return true };
        let now = self.clock.now();
        match held_until {
            None => false,
            Some(until) if until > now.plus_millis(self.settings.lease_ms / 3) => true,
            Some(_) => matches!(self.extend_all(&[lease], now).await.as_deref(), Ok([true])),
        }
    }

    /// Extends each lease (in job id order, the order every holder of several job rows takes
    /// them in) in one transaction; whether each is still ours.
    async fn extend_all(&self, leases: &[Lease], now: Timestamp) -> StoreResult<Vec<bool>> {
        let mut order: Vec<usize> = (0..leases.len()).collect();
        order.sort_by_key(|&i| leases[i].job_id);
        let mut held = vec![false; leases.len()];
        if leases.is_empty() {
            return Ok(held);
        }
        let mut tx = self.store.write().await?;
        for i in order {
            held[i] = tx.jobs().extend_lease(leases[i], now.plus_millis(self.settings.lease_ms), now).await?;
        }
        tx.commit().await?;
        Ok(held)
    }

    /// Extends the leases of the waiting jobs every third of a lease, for as long as the
    /// runner runs; a lease found lost marks its job as not to be started.
    async fn keep_waiting(&self) -> std::convert::Infallible {
        let period = Duration::from_millis(u64::try_from(self.settings.lease_ms / 3).unwrap_or(1_000).max(10));
        loop {
            tokio::time::sleep(period).await;
            let now = self.clock.now();
            let oldest = now.minus_millis(MAX_WAIT_IN_LEASES * self.settings.lease_ms);
            let leases: Vec<Lease> = self
                .waiting
                .lock()
                .map(|waiting| {
                    waiting
                        .iter()
                        .filter(|(_, w)| w.held_until.is_some() && w.since > oldest)
                        .map(|(lease, _)| *lease)
                        .collect()
                })
                .unwrap_or_default();
            match self.extend_all(&leases, now).await {
                Ok(held) => {
                    let lost = held.iter().filter(|held| !**held).count();
                    if lost > 0 {
                        tracing::warn!(
                            jobs = lost,
                            "lost the leases of jobs waiting to start; they will not start here"
                        );
                    }
                    if let Ok(mut waiting) = self.waiting.lock() {
                        for (lease, held) in leases.iter().zip(held) {
                            if let Some(entry) = waiting.get_mut(lease) {
                                // Never back: `wait_again` may have extended it since.
                                entry.held_until = held
                                    .then(|| now.plus_millis(self.settings.lease_ms))
                                    .map(|until| entry.held_until.map_or(until, |known| known.max(until)));
                            }
                        }
                    }
                }
                // The leases run until their known ends; `start` refuses any past it.
                Err(e) => tracing::warn!(error = %e, "could not extend waiting jobs' leases"),
            }
        }
    }

    /// Runs every job that is due at the clock's current time, and every job those enqueue,
    /// until none is due. Jobs scheduled for later (retries) stay queued: move the clock to run them.
    pub async fn drain(&self) -> StoreResult<DrainReport> {
        let mut report = DrainReport::default();
        loop {
            let mut jobs: VecDeque<Job> = self.claim(64).await?.jobs.into();
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
        // When the earliest job the last claim could not take yet falls due.
        let mut next_due: Option<Timestamp> = None;
        // The periodic sweeps are paced by a monotonic timer: how often the worker looks is real
        // time, not business time (what each sweep finds due is judged against the `Clock`).
        let start = tokio::time::Instant::now();
        let mut due: Vec<(&'static str, Duration, tokio::time::Instant)> =
            self.settings.periodic.iter().map(|(kind, every)| (*kind, *every, start)).collect();
        let concurrency = self.settings.concurrency;
        let keeper = {
            let runner = self.clone();
            // A heartbeat is job work: its writes queue as background writes, like `keep_leases`'.
            tokio::spawn(in_background(async move {
                let _never = runner.keep_waiting().await;
            }))
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
                    Ok(claimed) => {
                        claimed_any = !claimed.jobs.is_empty();
                        next_due = claimed.next_due;
                        backlog.extend(claimed.jobs);
                    }
                    Err(e) => {
                        // Stale by now, and one already past would make the wait below none
                        // at all: retry a store that fails at the poll interval.
                        next_due = None;
                        tracing::warn!(error = %e, "could not claim jobs");
                    }
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
                _ = self.store.wait_for_jobs(self.idle_wait(next_due)), if backlog.is_empty() && busy() < concurrency => {}
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            }
        }
        // Claimed jobs that never started go back to the queue at once.
        self.release(backlog.drain(..).filter_map(|job| lease_of(&job))).await;
        let drained =
            tokio::time::timeout(self.settings.shutdown_grace, async { while tasks.join_next().await.is_some() {} })
                .await;
        if drained.is_err() {
            tasks.abort_all();
            while tasks.join_next().await.is_some() {}
            self.release_running().await;
        }
        // Only now: jobs waiting behind others of their batch keep their leases until they run.
        keeper.abort();
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
    /// several, recording the failure of each job the batch failed; then alone whatever the
    /// batch left (or all of them, if the whole batch failed). A job alone of a batching kind
    /// runs as a batch of one (`JobHandler::run`'s default).
    async fn run_batch(&self, mut jobs: Vec<Job>) -> Vec<Outcome> {
        let handler = match jobs.first().and_then(|job| self.handlers.get(job.kind.as_str())) {
            Some(handler) if jobs.len() > 1 => handler.clone(),
            _ => return self.run_all_alone(jobs).await,
        };
        // Jobs past their attempt budget are buried by `run_one`, never batched.
        let (mut alone, batched): (Vec<Job>, Vec<Job>) =
            jobs.drain(..).partition(|job| job.lease_token.is_none() || job.attempts > job.max_attempts);
        let (mut started, mut lost) = (Vec::with_capacity(batched.len()), Vec::new());
        for job in batched {
            if self.start(&job).await {
                started.push(job);
            } else {
                lost.push(job);
            }
        }
        let batched = started;
        let mut outcomes: Vec<Outcome> = lost.iter().map(|_| Outcome::Lost).collect();
        if batched.is_empty() {
            outcomes.extend(self.run_all_alone(alone).await);
            return outcomes;
        }
        let leases: Vec<Lease> = batched.iter().filter_map(lease_of).collect();
        if let Ok(mut running) = self.running.lock() {
            running.extend(leases.iter().map(|lease| (lease.job_id, *lease)));
        }
        let started = std::time::Instant::now();
        let kind = handler.kind();
        let ctx = BatchContext::new(leases.clone(), self.clock.clone());
        let span = tracing::info_span!("job batch", kind, jobs = batched.len());
        // Each job of the batch has its span in its own trace, lasting as long as the batch.
        let _job_spans: Vec<tracing::Span> = batched.iter().map(|job| crate::trace::job_span(job).0).collect();
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
        let left = match result {
            Ok(BatchFinished { rest, failed }) => {
                let completed = batched.len() - (rest.len() + failed.len()).min(batched.len());
                outcomes.extend((0..completed).map(|_| Outcome::Completed));
                metrics::counter!("tokenops_jobs_finished_total", "kind" => kind, "outcome" => "completed")
                    .increment(completed as u64);
                metrics::histogram!("tokenops_job_batch_size", "kind" => kind).record(completed as f64);
                metrics::histogram!("tokenops_job_duration_seconds", "kind" => kind)
                    .record(started.elapsed().as_secs_f64());
                // Each as a run of that job alone would have failed: retried with backoff, or dead.
                for (job, error) in failed {
                    let outcome = match lease_of(&job) {
                        Some(lease) => self.record_failure(&job, lease, error).await,
                        None => Outcome::Lost,
                    };
                    let label = outcome.label();
                    metrics::counter!("tokenops_jobs_finished_total", "kind" => kind, "outcome" => label).increment(1);
                    outcomes.push(outcome);
                }
                rest
            }
            Err(error) => {
                tracing::debug!(kind, %error, jobs = batched.len(), "a batch failed; its jobs run one at a time");
                batched
            }
        };
        let (left, lost) = self.wait_again(left).await;
        outcomes.extend((0..lost).map(|_| Outcome::Lost));
        alone.extend(left);
        outcomes.extend(self.run_all_alone(alone).await);
        outcomes
    }

    async fn run_all_alone(&self, jobs: Vec<Job>) -> Vec<Outcome> {
        // Known as running while they wait their turn, so that a shutdown gives their leases
        // back (each `run_one` forgets its own when it ends).
        if let Ok(mut running) = self.running.lock() {
            running.extend(jobs.iter().filter_map(lease_of).map(|lease| (lease.job_id, lease)));
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
        if !self.start(&job).await {
            if let Ok(mut running) = self.running.lock() {
                running.remove(&job.id);
            }
            return Outcome::Lost;
        }
        if let Ok(mut running) = self.running.lock() {
            running.insert(job.id, lease);
        }
        let started = std::time::Instant::now();
        let (span, context) = crate::trace::job_span(&job);
        let run = self.execute(&job, lease).instrument(span);
        // Jobs this one enqueues carry its context, so a settlement's steps share one trace.
        let outcome = match context {
            Some(context) => context.scope(run).await,
            None => run.await,
        };
        if let Ok(mut running) = self.running.lock() {
            running.remove(&job.id);
        }
        let label = outcome.label();
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
        let period = Duration::from_millis(u64::try_from(self.settings.lease_ms / 3).unwrap_or(1_000).max(10));
        loop {
            tokio::time::sleep(period).await;
            match self.extend_all(leases, self.clock.now()).await {
                Ok(held) => {
                    if let Some((lease, _)) = leases.iter().zip(held).find(|(_, held)| !held) {
                        tracing::warn!(job_id = %lease.job_id, "lost the lease of a running job; stopping it");
                        return;
                    }
                }
                // The leases still run until they expire; the next beat tries again.
                Err(e) => tracing::warn!(error = %e, "could not extend running jobs' leases"),
            }
        }
    }

    /// Records a failed run: a retry with backoff, or the job's death. While the store cannot
    /// be reached (the failure was most likely that), recording is tried again for up to a
    /// lease: left to expire, the lease would hold the job back for a whole lease after the
    /// store is back, and its operation with it.
    async fn record_failure(&self, job: &Job, lease: Lease, error: JobError) -> Outcome {
        if matches!(error, JobError::Fenced) {
            // Another worker holds the job now; its outcome is that worker's to record.
            return Outcome::Lost;
        }
        let lease_ms = u64::try_from(self.settings.lease_ms).unwrap_or(0);
        // Monotonic: this bounds the real time spent waiting for the store, not business time.
        let give_up = tokio::time::Instant::now() + Duration::from_millis(lease_ms);
        let mut pause = Duration::from_millis(100);
        loop {
            match self.try_record_failure(job, lease, &error).await {
                Ok(outcome) => return outcome,
                Err(e) if e.is_unavailable() && tokio::time::Instant::now() + pause < give_up => {
                    tracing::warn!(job_id = %job.id, error = %e, "could not record a job failure; trying again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(2));
                }
                Err(e) => {
                    tracing::warn!(job_id = %job.id, error = %e, "could not record a job failure; its lease will expire");
                    return Outcome::Lost;
                }
            }
        }
    }

    async fn try_record_failure(
        &self,
        job: &Job,
        lease: Lease,
        error: &JobError,
    ) -> Result<Outcome, tokenops_store::StoreError> {
        let now: Timestamp = self.clock.now();
        {
            let mut tx = self.store.write().await?;
            let outcome = match error {
                JobError::Fenced => Outcome::Lost,
                JobError::Retry(reason) if job.attempts < job.max_attempts => {
                    let delay = self.settings.backoff.delay_ms(job.attempts, &mut rand::thread_rng());
                    tracing::warn!(job_id = %job.id, kind = %job.kind, attempt = job.attempts, delay_ms = delay, %reason, "job failed; will retry");
                    if tx.jobs().retry(lease, now.plus_millis(delay), reason, now).await? {
                        Outcome::Retried
                    } else {
                        Outcome::Lost
                    }
                }
                JobError::Retry(reason) | JobError::Permanent(reason) => {
                    // Buried first: a claim that lost its lease must not record the job's death
                    // on its resource while the claim that holds it works on.
                    if !tx.jobs().bury(lease, reason, now).await? {
                        return Ok(Outcome::Lost);
                    }
                    tracing::error!(job_id = %job.id, kind = %job.kind, attempt = job.attempts, %reason, "job is dead");
                    if let Some(handler) = self.handlers.get(job.kind.as_str())
                        && let Err(e) = handler.on_dead(job, tx.as_mut(), reason, now).await
                    {
                        return Err(tokenops_store::StoreError::Backend(format!("on_dead: {e}").into()));
                    }
                    Outcome::Dead
                }
            };
            tx.commit().await?;
            Ok(outcome)
        }
    }
}

/// The lease a claim gave a job, if it was claimed.
fn lease_of(job: &Job) -> Option<Lease> {
    job.lease_token.map(|token| Lease { job_id: job.id, token })
}
