//! Background jobs as read from either backend.

use super::Columns;
use crate::{Job, JobStatus, QueueStats, StoreResult};
use tokenops_domain::Timestamp;

pub const JOB_COLUMNS: &str = "id, kind, tenant_id, payload, status, attempts, max_attempts, run_at, lease_token, lease_until, last_error, created_at, updated_at";

pub fn job(row: &impl Columns) -> StoreResult<Job> {
    // A counter beyond u32 saturates rather than failing the claim: it only ever grows.
    let counter = |name: &str| -> StoreResult<u32> { Ok(u32::try_from(row.int(name)?).unwrap_or(u32::MAX)) };
    Ok(Job {
        id: row.uuid("id")?,
        kind: row.text("kind")?,
        tenant_id: row.opt_tenant("tenant_id")?,
        payload: row.json("payload")?,
        status: row.parsed("status", "job status", JobStatus::parse)?,
        attempts: counter("attempts")?,
        max_attempts: counter("max_attempts")?,
        run_at: row.timestamp("run_at")?,
        lease_token: row.opt_uuid("lease_token")?,
        lease_until: row.opt_timestamp("lease_until")?,
        last_error: row.opt_text("last_error")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

/// One kind's row of the queue's figures (`kind`, the counts `queued`, `running`, `dead`, and
/// `oldest_due`, the run time of its oldest due job), its age taken at `now`.
pub fn queue_stats(row: &impl Columns, now: Timestamp) -> StoreResult<(String, QueueStats)> {
    // A count is never negative; a due job's age is, at worst, zero.
    let count = |name: &str| -> StoreResult<u64> { Ok(u64::try_from(row.int(name)?).unwrap_or(0)) };
    let stats = QueueStats {
        queued: count("queued")?,
        running: count("running")?,
        dead: count("dead")?,
        oldest_due_age_ms: row
            .opt_timestamp("oldest_due")?
            .map(|at| at.millis_until(now))
            .unwrap_or(0)
            .try_into()
            .unwrap_or(0),
    };
    Ok((row.text("kind")?, stats))
}
