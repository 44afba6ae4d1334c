//! `operation.evaluate`, step 1: the policy decision (`decide`) and the checks that decide
//! whether the operation can be processed at all; the approved move on to settlement.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_store::{Job, Tx};

use super::signatures::signed_hash_note;
use super::{BATCH_LIMIT, Lookups, Pipeline, Settle, Sorted, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, Finished, JobContext, JobError, JobHandler, kinds};

pub struct Evaluate(pub Arc<Pipeline>);

/// What the policies say about an operation that can be processed.
enum Decision {
    /// It goes on to settlement.
    Approved,
}

/// The policy step. No ACTIVE policy governs any action yet: every operation is approved. The
/// policy engine plugs in here (raising approval requests or refusing), for `run` and
/// `run_batch` alike.
fn decide(_operation: &Operation) -> Decision {
    Decision::Approved
}

/// Approved and signed by an evaluation batch that stopped before sending: no settle job exists
/// for it, so the evaluation job itself must see it settled.
fn signed_unsent(operation: &Operation) -> bool {
    operation.state == OperationState::PendingSettlement && operation.signed_transaction.is_some()
}

#[async_trait]
impl JobHandler for Evaluate {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_EVALUATE
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let (tenant, id) = target(job)?;
        let now = ctx.clock().now();
        let operation = match p.load(tenant, id).await? {
            Some(operation) if operation.state == OperationState::Submitted => operation,
            // A batch approved and signed it, then stopped before it was sent: settlement goes
            // on from the recorded signature (`run_batch`).
            Some(operation) if signed_unsent(&operation) => return Settle(p.clone()).run(job, ctx).await,
            _ => return ctx.finish(p.store.write().await?).await,
        };
        // What settlement needs must still hold: ACTIVE accounts and contract, a valid expiry.
        let unprocessable = p.ledger_call(&operation, now).await?.err();
        let mut tx = p.store.write().await?;
        // Decided on the row as it is now, not as it was read: an earlier claim of this very job
        // (its lease expired under load) may have signed it in a batch since. Then this job,
        // not a settle job, owes it its settlement, and finishing here would strand it.
        let row = tx.operations().get_for_update(tenant, id).await?;
        match &row {
            Some(operation) if operation.state == OperationState::Submitted => {}
            Some(operation) if signed_unsent(operation) => {
                drop(tx);
                return Settle(p.clone()).run(job, ctx).await;
            }
            _ => return ctx.finish(tx).await,
        }
        match unprocessable {
            Some(reason) => {
                p.fail_row(tx.as_mut(), row, OperationState::Submitted, FailureCode::Unprocessable, reason, None, now)
                    .await?;
            }
            None => match decide(&operation) {
                Decision::Approved => {
                    let moved = p
                        .advance_row(
                            tx.as_mut(),
                            row,
                            OperationState::Submitted,
                            |o| o.state = OperationState::PendingSettlement,
                            now,
                        )
                        .await?;
                    if moved.is_some() {
                        tx.jobs().enqueue(&p.job(kinds::OPERATION_SETTLE, tenant, id, now), now).await?;
                    }
                }
            },
        }
        ctx.finish(tx).await
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// The approved go straight on into settlement (`Pipeline::sign_and_send`): approval and
    /// the signature commit together, and the batch finishes once the operations are sent, so
    /// no `operation.settle` job runs for them. An operation that cannot be processed is left
    /// to `run`, which records why; one that the batch leaves signed but unsent, `run` settles.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let now = ctx.clock().now();
        let mut read = p.store.read().await?;
        // Signed but unsent (an earlier batch stopped after its first commit): `run` settles it.
        let Sorted { due, idle, mut rest } =
            sort_batch(read.as_mut(), jobs, OperationState::Submitted, signed_unsent).await?;
        let mut lookups = Lookups::default();
        let mut calls = Vec::with_capacity(due.len());
        for (job, operation) in due {
            match decide(&operation) {
                Decision::Approved => match p.ledger_call_in(read.as_mut(), &mut lookups, &operation, now).await? {
                    Ok((token, call)) => calls.push((job, operation, token, call)),
                    Err(_) => rest.push(job),
                },
            }
        }
        drop(read);
        p.sign_and_send(calls, OperationState::Submitted, idle, rest, ctx).await
    }

    /// An evaluation that ran out of attempts, before approval (SUBMITTED) or after a batch
    /// signed its operation (PENDING_SETTLEMENT), fails the operation `RETRY_EXHAUSTED` with a
    /// break: nothing waits for a job that will never run again.
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
