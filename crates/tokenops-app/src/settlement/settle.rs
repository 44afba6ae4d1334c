//! `operation.settle`, step 2: custody signs the operation's ledger call, the signature is
//! recorded, then sent; the sent move to SETTLING.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, OperationState};
use tokenops_store::{Job, Tx};

use super::signatures::signed_hash_note;
use super::{BATCH_LIMIT, Pipeline, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};

pub struct Settle(pub Arc<Pipeline>);

#[async_trait]
impl JobHandler for Settle {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_SETTLE
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// Signs every operation not signed yet, records all the signatures in one commit, sends
    /// them (and the recorded bytes of those signed already), and moves the sent ones to
    /// SETTLING in a second commit (`Pipeline::sign_and_send`).
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let from = OperationState::PendingSettlement;
        let now = ctx.clock().now();
        let mut read = p.store.read().await?;
        let mut sorted = sort_batch(read.as_mut(), jobs, |o| o.state == from).await?;
        let work = p.plan(read.as_mut(), &mut sorted, now).await?;
        drop(read);
        p.sign_and_send(work, from, sorted, ctx).await
    }

    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let row = tx.operations().get_for_update(tenant, id).await?;
        let reason = format!("settlement stopped: {reason}{}", row.as_ref().map(signed_hash_note).unwrap_or_default());
        let from = OperationState::PendingSettlement;
        self.0.fail_row(tx, row, from, FailureCode::RetryExhausted, reason, None, now).await
    }
}
