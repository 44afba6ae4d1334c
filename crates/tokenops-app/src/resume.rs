//! `operations.resume`: the safety net under the settlement pipeline, which gives an in-flight
//! operation that no job carries the job its state calls for.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::OperationState;
use tokenops_store::{InFlight, Job};
use uuid::Uuid;

use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::settlement::Pipeline;

/// Finds in-flight operations (SUBMITTED, PENDING_SETTLEMENT, SETTLING) that have been unchanged
/// for `unchanged_for` and that no live pipeline job carries, and enqueues the job their state
/// calls for. Each step only moves an operation from the state it expects, so a job too many
/// does nothing; a job too few would leave the operation waiting for good. Every resumption is
/// logged as a warning: it means some path finished a job without carrying its operation on.
pub struct ResumeStranded {
    pub pipeline: Arc<Pipeline>,
    pub unchanged_for: std::time::Duration,
}

/// The most in-flight operations one sweep reads (least recently changed first), and the most
/// it resumes: a backlog of operations that jobs still carry must not hide a stranded one.
const RESUME_CANDIDATES: u32 = 200_000;
const RESUME_BATCH: usize = 1_000;

impl ResumeStranded {
    /// The candidates unchanged since before `before` that no live job names, read in one
    /// transaction: operations first, then jobs, so that a job finishing in between (and moving
    /// its operation) is caught by the re-check under the write lock.
    async fn stranded(&self, before: Timestamp) -> Result<Vec<InFlight>, JobError> {
        let mut read = self.pipeline.store.read().await?;
        let candidates = read.operations().in_flight_unchanged_since(before, RESUME_CANDIDATES).await?;
        if candidates.is_empty() {
            return Ok(candidates);
        }
        let kinds = [kinds::OPERATION_EVALUATE, kinds::OPERATION_SETTLE, kinds::OPERATION_TRACK];
        let carried: std::collections::HashSet<Uuid> = read
            .jobs()
            .live_payload_values(&kinds, "transactionId")
            .await?
            .iter()
            .filter_map(|id| Uuid::parse_str(id).ok())
            .collect();
        let mut stranded: Vec<InFlight> =
            candidates.into_iter().filter(|o| !carried.contains(&o.id)).take(RESUME_BATCH).collect();
        // Locked in id order, as every batch of the pipeline locks its operations.
        stranded.sort_by_key(|o| o.id);
        Ok(stranded)
    }
}

#[async_trait]
impl JobHandler for ResumeStranded {
    fn kind(&self) -> &'static str {
        kinds::OPERATIONS_RESUME
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.pipeline;
        let now = ctx.clock().now();
        let unchanged_ms = i64::try_from(self.unchanged_for.as_millis()).unwrap_or(i64::MAX);
        let stranded = self.stranded(now.minus_millis(unchanged_ms)).await?;
        let mut tx = p.store.write().await?;
        let mut resumed = Vec::new();
        for seen in stranded {
            let (tenant, id) = (seen.tenant_id, seen.id);
            // Unchanged since the sweep read it: no job moved it on in between.
            let Some(operation) = tx
                .operations()
                .get_for_update(tenant, id)
                .await?
                .filter(|o| o.state == seen.state && o.updated_at == seen.updated_at)
            else {
                continue;
            };
            let kind = match operation.state {
                OperationState::Submitted => kinds::OPERATION_EVALUATE,
                OperationState::PendingSettlement => kinds::OPERATION_SETTLE,
                OperationState::Settling => kinds::OPERATION_TRACK,
                _ => continue,
            };
            tx.jobs().enqueue(&p.job(kind, tenant, id, now), now).await?;
            resumed.push((id, operation.state, kind));
        }
        let finished = ctx.finish(tx).await?;
        // Told only once the new jobs are committed.
        for (id, state, kind) in resumed {
            tracing::warn!(
                transaction_id = %id,
                state = state.as_str(),
                job = kind,
                "resumed an in-flight operation that no job carried"
            );
            metrics::counter!("tokenops_operations_resumed_total", "state" => state.as_str()).increment(1);
        }
        Ok(finished)
    }
}
