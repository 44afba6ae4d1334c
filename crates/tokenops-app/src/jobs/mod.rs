//! Durable background jobs: the handler trait, the runner that leases and runs jobs (`worker`),
//! the retry schedule (`backoff`) and the job kinds of the service (`kinds` and one module per
//! handler). Job handlers must be idempotent: a job may run again after a crash. A handler runs
//! one job at a time (`JobHandler::run`) or only in batches (`JobHandler::run_batch`, one job
//! being a batch of one), to pay one transaction for many.

mod backoff;
mod dispatch;
mod maintenance;
mod runner;

pub use backoff::Backoff;
pub use dispatch::DispatchEvent;
pub use maintenance::{Maintenance, MaintenanceSettings};
pub use runner::{DrainReport, JobRunner, RunnerSettings};

use crate::clock::Clock;
use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_store::{Job, Lease, NewJob, Tx};

/// The job kinds of the service.
pub mod kinds {
    /// Hands one outbox event on to its subscribers.
    pub const EVENT_DISPATCH: &str = "event.dispatch";
    /// Prunes expired idempotency records and old finished jobs.
    pub const MAINTENANCE_PRUNE: &str = "maintenance.prune";
    /// Delivers one sealed mail message.
    pub const MAIL_SEND: &str = "mail.send";
    /// Deploys (or adopts) a PENDING token contract.
    pub const CONTRACT_DEPLOY: &str = "contract.deploy";
    /// Provisions a PENDING account's wallet.
    pub const ACCOUNT_PROVISION: &str = "account.provision";
    /// Policy step of a SUBMITTED operation.
    pub const OPERATION_EVALUATE: &str = "operation.evaluate";
    /// Signs and sends an approved operation.
    pub const OPERATION_SETTLE: &str = "operation.settle";
    /// Follows a sent operation to its receipt.
    pub const OPERATION_TRACK: &str = "operation.track";
    /// Returns expired locks to their owners (periodic).
    pub const LOCKS_EXPIRE: &str = "locks.expire";
    /// Compares ledger balances with the service's positions (periodic).
    pub const POSITIONS_RECONCILE: &str = "positions.reconcile";
    /// Gives an in-flight operation that no pipeline job carries any more its next job
    /// (periodic; the safety net under the pipeline).
    pub const OPERATIONS_RESUME: &str = "operations.resume";
    /// Sends again, or fills, the nonce a wallet's waiting transactions are held back by
    /// (periodic; see `nonce_gaps`).
    pub const NONCE_GAPS_HEAL: &str = "nonce_gaps.heal";
    /// Expires the PENDING approval requests past their deadline (one enqueued per request,
    /// for its deadline).
    pub const APPROVALS_EXPIRE: &str = "approvals.expire";
    /// Runs one execution of an automation's script.
    pub const AUTOMATION_RUN: &str = "automation.run";
    /// Periodic: queues the runs of due SCHEDULED automations.
    pub const AUTOMATIONS_SCHEDULE: &str = "automations.schedule";
    /// Makes one attempt of one webhook delivery (`deliveryId`, `attempt`).
    pub const WEBHOOK_DELIVER: &str = "webhook.deliver";
    /// Periodic: replaces the JWS_ES256 delivery signing key at its rotation age and withdraws
    /// replaced keys past their overlap.
    pub const WEBHOOKS_ROTATE_KEY: &str = "webhooks.rotate_key";
    /// Periodic: seals the audit records committed since the last run into each chain's next
    /// blocks and signs the heads (`audit_chain`).
    pub const AUDIT_SEAL: &str = "audit.seal";
}

/// Why a run did not finish the job.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    /// A temporary failure (dependency unreachable, timeout): retried with backoff.
    #[error("temporary failure: {0}")]
    Retry(String),
    /// A failure that another attempt cannot fix: the job is dead at once.
    #[error("permanent failure: {0}")]
    Permanent(String),
    /// Our lease was lost to another worker; that worker owns the outcome now.
    #[error("lease lost")]
    Fenced,
}

impl JobError {
    /// A temporary failure described by `e`: the job runs again after its backoff.
    pub fn retry(e: impl std::fmt::Display) -> Self {
        JobError::Retry(e.to_string())
    }
}

impl From<tokenops_store::StoreError> for JobError {
    fn from(e: tokenops_store::StoreError) -> Self {
        JobError::retry(e)
    }
}

/// Proof that a handler finished its job through [`JobContext::finish`]: the only way to make
/// one, so a handler cannot complete a job apart from its effects.
#[derive(Debug)]
#[must_use]
pub struct Finished(());

/// What a running handler gets besides the job: the clock, and the means to finish the job in
/// the same transaction as its effects.
pub struct JobContext {
    lease: Lease,
    clock: Arc<dyn Clock>,
}

impl JobContext {
    fn new(lease: Lease, clock: Arc<dyn Clock>) -> Self {
        Self { lease, clock }
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Marks the job done inside `tx` and commits: the job's effects and its completion land
    /// together, and only while the lease is still ours (fencing).
    pub async fn finish(&self, mut tx: Box<dyn Tx>) -> Result<Finished, JobError> {
        if !tx.jobs().complete(self.lease, self.clock.now()).await? {
            return Err(JobError::Fenced);
        }
        tx.commit().await?;
        Ok(Finished(()))
    }

    /// `finish`, with `next` enqueued after this job is marked done: a job that puts its work
    /// back as a new job under its own dedupe key is not refused by itself.
    pub async fn hand_over(&self, mut tx: Box<dyn Tx>, next: &NewJob) -> Result<Finished, JobError> {
        if !tx.jobs().complete(self.lease, self.clock.now()).await? {
            return Err(JobError::Fenced);
        }
        tx.jobs().enqueue(next, self.clock.now()).await?;
        tx.commit().await?;
        Ok(Finished(()))
    }
}

/// What a handler running a batch gets: the clock, and the means to finish any of the batch's
/// jobs in the same transaction as their effects.
pub struct BatchContext {
    leases: Vec<Lease>,
    clock: Arc<dyn Clock>,
}

/// Proof that a batch ended through [`BatchContext`]: the jobs it finished are done, `failed`
/// failed each with its own error (recorded as a run of that job alone would be: retried with
/// backoff, or dead), and `rest` are left to run alone, each as a batch of one.
#[derive(Debug)]
#[must_use]
pub struct BatchFinished {
    rest: Vec<Job>,
    failed: Vec<(Job, JobError)>,
}

impl BatchContext {
    fn new(leases: Vec<Lease>, clock: Arc<dyn Clock>) -> Self {
        Self { leases, clock }
    }

    pub fn clock(&self) -> &dyn Clock {
        &*self.clock
    }

    /// Marks `done` (ids of this batch's jobs) done inside `tx` and commits; `rest` will run
    /// alone, and `failed` are recorded as failed. A lost lease fails the whole commit
    /// ([`JobError::Fenced`]), so nothing lands for a job another worker has taken over.
    pub async fn finish(
        &self,
        mut tx: Box<dyn Tx>,
        done: Vec<uuid::Uuid>,
        rest: Vec<Job>,
        failed: Vec<(Job, JobError)>,
    ) -> Result<BatchFinished, JobError> {
        let now = self.clock.now();
        let mut leases = Vec::with_capacity(done.len());
        for job_id in done {
            let lease = self
                .leases
                .iter()
                .find(|l| l.job_id == job_id)
                .copied()
                .ok_or_else(|| JobError::Permanent(format!("job {job_id} is not in this batch")))?;
            leases.push(lease);
        }
        leases.sort_by_key(|lease| lease.job_id);
        if tx.jobs().complete_all(&leases, now).await? != leases.len() {
            return Err(JobError::Fenced);
        }
        tx.commit().await?;
        Ok(BatchFinished { rest, failed })
    }

    /// Ends the batch with nothing to commit: every job failed, or is left to run alone.
    pub fn end(&self, rest: Vec<Job>, failed: Vec<(Job, JobError)>) -> BatchFinished {
        BatchFinished { rest, failed }
    }
}

/// One kind of job. A handler implements one of two shapes:
/// - `run`, one job at a time, writing its effects in a transaction it hands to
///   [`JobContext::finish`], whose `Finished` it returns;
/// - `batch_limit` (above 1) and `run_batch`, several jobs at once through [`BatchContext`]: the
///   runner hands it up to that many claimed jobs of its kind, and one job alone runs as a batch
///   of one (the default `run`), so that each rule has one code path.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    fn kind(&self) -> &'static str;

    /// Runs one job; by default as a batch of one through [`JobHandler::run_batch`].
    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let batch = BatchContext::new(vec![ctx.lease], ctx.clock.clone());
        let BatchFinished { rest, mut failed } = self.run_batch(vec![job.clone()], &batch).await?;
        if let Some((_, error)) = failed.pop() {
            return Err(error);
        }
        if !rest.is_empty() {
            // Only a second job for one operation is left alone, and a batch of one has none.
            return Err(JobError::Retry("its batch of one left it".into()));
        }
        Ok(Finished(()))
    }

    /// The most jobs of this kind [`JobHandler::run_batch`] takes at once; 1 (the default)
    /// runs every job alone through [`JobHandler::run`].
    fn batch_limit(&self) -> usize {
        1
    }

    /// Runs several jobs of this kind together, in as few transactions as it can, each job to
    /// its own outcome: done in the commit, failed with its own error (which touches no other
    /// job of the batch), or left to run alone. When the whole batch fails (its commit, a
    /// lost lease), each of its jobs runs again alone, so whatever the batch committed before
    /// failing must be a step the batch path takes up from (settlement's recorded signatures
    /// are: it sends the recorded bytes). Side effects outside the store must be safe to repeat.
    async fn run_batch(&self, _jobs: Vec<Job>, _ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        Err(JobError::Permanent(format!("{} runs one job at a time", self.kind())))
    }

    /// Called when the job dies (its attempts ran out, or it failed for good), inside the
    /// transaction that buries it. A handler whose job leaves a resource waiting records the
    /// failure on that resource here, so that nothing waits for a job that will never run
    /// again. If this fails (the store is down), the burial fails with it and the job is
    /// claimed again later, to die then.
    async fn on_dead(&self, _job: &Job, _tx: &mut dyn Tx, _reason: &str, _now: Timestamp) -> Result<(), JobError> {
        Ok(())
    }
}
