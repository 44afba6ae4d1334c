//! Background jobs as read from either backend.

use super::Columns;
use crate::{Job, JobStatus, StoreResult};

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
