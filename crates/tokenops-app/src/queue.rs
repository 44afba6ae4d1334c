//! The job queue's depth, as the metrics endpoint reports it.

use crate::{App, AppResult};

/// How many jobs wait, run and died, and how long the oldest due one has waited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueStats {
    pub queued: u64,
    pub running: u64,
    pub dead: u64,
    /// Age of the oldest job that is due and waiting, in milliseconds.
    pub oldest_due_age_ms: u64,
}

impl App {
    pub async fn queue_stats(&self) -> AppResult<QueueStats> {
        let tokenops_store::QueueStats { queued, running, dead, oldest_due_age_ms } = self.jobs.stats().await?;
        Ok(QueueStats { queued, running, dead, oldest_due_age_ms })
    }
}
