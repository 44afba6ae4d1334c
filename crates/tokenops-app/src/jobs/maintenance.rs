//! `maintenance.prune`: deletes idempotency records past their retention, finished jobs past
//! theirs, and expired refresh tokens, sign-in challenges and unrevealed client secrets. The runner enqueues it periodically under a dedupe key, so nodes never run it twice
//! at once.

use super::{Finished, JobContext, JobError, JobHandler, kinds};
use async_trait::async_trait;
use std::sync::Arc;
use tokenops_store::{Job, Store};

#[derive(Debug, Clone, Copy)]
pub struct MaintenanceSettings {
    /// Idempotency records are kept at least this long (the spec's floor is 24 hours).
    pub idempotency_retention_ms: i64,
    pub finished_job_retention_ms: i64,
}

pub struct Maintenance {
    pub store: Arc<dyn Store>,
    pub settings: MaintenanceSettings,
}

#[async_trait]
impl JobHandler for Maintenance {
    fn kind(&self) -> &'static str {
        kinds::MAINTENANCE_PRUNE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let now = ctx.clock().now();
        let mut tx = self.store.write().await?;
        let keys = tx.idempotency().prune(now.minus_millis(self.settings.idempotency_retention_ms)).await?;
        let jobs = tx.jobs().prune_done(now.minus_millis(self.settings.finished_job_retention_ms)).await?;
        // A day's grace keeps a just-expired refresh token answering "expired" rather than
        // "unknown" in logs; the answer to the client is the same 401 either way.
        let refresh_tokens = tx.refresh_tokens().delete_expired(now.minus_millis(24 * 3_600_000)).await?;
        let challenges = tx.challenges().delete_expired(now).await?;
        let reveals = tx.secret_reveals().delete_expired(now).await?;
        let finished = ctx.finish(tx).await?;
        tracing::info!(
            idempotency_records = keys,
            finished_jobs = jobs,
            refresh_tokens,
            challenges,
            secret_reveals = reveals,
            "pruned"
        );
        Ok(finished)
    }
}
