//! Durable background jobs: the handler trait, the runner that leases and runs jobs (`worker`),
//! the retry schedule (`backoff`) and the job kinds of the service (`kinds` and one module per
//! handler). Job handlers must be idempotent: a job may run again after a crash.

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
use tokenops_store::{Job, Lease, Tx};

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

impl From<tokenops_store::StoreError> for JobError {
    fn from(e: tokenops_store::StoreError) -> Self {
        JobError::Retry(e.to_string())
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
}

/// One kind of job. Implementations write their effects in a transaction they hand to
/// `JobContext::finish`, whose `Finished` they return.
#[async_trait]
pub trait JobHandler: Send + Sync + 'static {
    fn kind(&self) -> &'static str;
    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError>;

    /// Called when the job dies (its attempts ran out, or it failed for good), inside the
    /// transaction that buries it. A handler whose job leaves a resource waiting records the
    /// failure on that resource here, so that nothing waits for a job that will never run
    /// again. If this fails (the store is down), the burial fails with it and the job is
    /// claimed again later, to die then.
    async fn on_dead(&self, _job: &Job, _tx: &mut dyn Tx, _reason: &str, _now: Timestamp) -> Result<(), JobError> {
        Ok(())
    }
}
