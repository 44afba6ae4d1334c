//! `operation.evaluate`, step 1: the policy decision (`decide`) and the checks that decide
//! whether the operation can be processed at all; the approved move on to settlement.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_store::{Job, Tx};

use super::signatures::signed_hash_note;
use super::{BATCH_LIMIT, Pipeline, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};

pub struct Evaluate(pub Arc<Pipeline>);

/// What the policies say about an operation that can be processed.
enum Decision {
    /// It goes on to settlement.
    Approved,
}

/// The policy step. No ACTIVE policy governs any action yet: every operation is approved. The
/// policy engine plugs in here (raising approval requests or refusing).
fn decide(_operation: &Operation) -> Decision {
    Decision::Approved
}

/// Approved and signed by an evaluation that stopped before sending: no settle job exists for
/// it, so the evaluation job itself must see it settled.
pub(super) fn signed_unsent(operation: &Operation) -> bool {
    operation.state == OperationState::PendingSettlement && operation.signed_transaction.is_some()
}

#[async_trait]
impl JobHandler for Evaluate {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_EVALUATE
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// The approved go straight on into settlement (`Pipeline::sign_and_send`): approval and
    /// the signature commit together, and the job finishes once the operation is sent, so no
    /// `operation.settle` job runs for it (only for one custody did not sign). An operation
    /// that cannot be processed ends FAILED `UNPROCESSABLE`; one left signed but unsent (an
    /// earlier run stopped after recording its signature) is sent, the recorded bytes.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let now = ctx.clock().now();
        let mut read = p.store.read().await?;
        let wanted = |o: &Operation| o.state == OperationState::Submitted || signed_unsent(o);
        let mut sorted = sort_batch(read.as_mut(), jobs, wanted).await?;
        let work = p.plan(read.as_mut(), &mut sorted, now).await?;
        // The policy decision, on the operations that can be processed and are not signed yet.
        for (_, operation, _, _) in &work.calls {
            match decide(operation) {
                Decision::Approved => {}
            }
        }
        drop(read);
        p.sign_and_send(work, OperationState::Submitted, sorted, ctx).await
    }

    /// An evaluation that ran out of attempts, before approval (SUBMITTED) or after it signed
    /// its operation (PENDING_SETTLEMENT), fails the operation `RETRY_EXHAUSTED` with a break:
    /// nothing waits for a job that will never run again.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let row = tx.operations().get_for_update(tenant, id).await?;
        let from = match row.as_ref().map(|o| o.state) {
            Some(state @ (OperationState::Submitted | OperationState::PendingSettlement)) => state,
            _ => return Ok(()),
        };
        let reason = format!("evaluation stopped: {reason}{}", row.as_ref().map(signed_hash_note).unwrap_or_default());
        self.0.fail_row(tx, row, from, FailureCode::RetryExhausted, reason, None, now).await
    }
}
