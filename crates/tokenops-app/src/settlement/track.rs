//! `operation.track`, step 3: the receipt of the sent transaction ends the operation CONFIRMED
//! (see `confirm`) or FAILED `CHAIN_FAILED`; a transaction the ledger does not know is sent
//! again, the same bytes, or signed anew once another transaction has taken its nonce.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_ledger::{LedgerError, Outcome, ReceiptStatus};
use tokenops_store::{Job, Tx};

use super::confirm::{PositionDeltas, confirm_row};
use super::signatures::decode_signed;
use super::{BATCH_LIMIT, Pipeline, Sorted, lock_rows, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, JobError, JobHandler, kinds};

pub struct Track(pub Arc<Pipeline>);

/// How often a sent transaction's receipt is asked for while the ledger cannot be reached.
const OUTAGE_POLL_MS: i64 = 5_000;

#[async_trait]
impl JobHandler for Track {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_TRACK
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// Reads every receipt at once and lands all the outcomes in one commit: a pending one next_jobs
    /// again, one the ledger does not know is sent again (the recorded bytes) and next_jobs again.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let from = OperationState::Settling;
        let Sorted { due, idle, rest, mut failed } = {
            let mut read = p.store.read().await?;
            sort_batch(read.as_mut(), jobs, |o| o.state == from).await?
        };
        let mut tracked = Vec::with_capacity(due.len());
        for (job, operation) in due {
            match operation.tx_hash.map(crate::chain::ledger_hash) {
                Some(hash) => tracked.push((job, operation, hash)),
                None => failed.push((job, JobError::Permanent("a SETTLING operation without a txHash".into()))),
            }
        }
        let hashes: Vec<_> = tracked.iter().map(|(_, _, hash)| *hash).collect();
        let now = ctx.clock().now();
        let mut done = idle;
        // A transaction that was sent may be included whenever the ledger comes back: while the
        // ledger gives no answer at all, its operation waits SETTLING (polled at
        // `OUTAGE_POLL_MS`, in fresh jobs, so no retry budget runs out) rather than be reported
        // FAILED with an outcome nobody knows. Answers that are errors keep the retry budget.
        let mut waiting = Vec::new();
        let receipts = if hashes.is_empty() {
            Vec::new()
        } else {
            match p.ledger.receipts(&hashes).await {
                Ok(receipts) => receipts,
                // No answer at all: every hash is alike unknown, so the whole batch waits. An
                // error answer (perhaps about one hash) is retried job by job, within budget.
                Err(e @ LedgerError::Unreachable { .. }) => {
                    tracing::warn!(error = %e, operations = tracked.len(), "the ledger cannot be asked for receipts; polling on");
                    waiting.extend(tracked.drain(..).map(|(job, operation, _)| (job, operation)));
                    Vec::new()
                }
                Err(e) => return Err(JobError::retry(e)),
            }
        };
        let mut outcomes = Vec::with_capacity(tracked.len());
        let mut superseded = Vec::new();
        for ((job, operation, _), receipt) in tracked.into_iter().zip(receipts) {
            if receipt == ReceiptStatus::Unknown {
                // Dropped or never received: the same signed bytes again, never a new signature,
                // unless another transaction has taken their nonce for good.
                let resent = match operation.signed_transaction.as_deref().map(decode_signed) {
                    Some(Ok(signed)) => {
                        match p.ledger.send(&signed).await.inspect_err(crate::signals::ledger_send_failed) {
                            Ok(_) => Ok(()),
                            Err(LedgerError::Superseded { reason }) => {
                                superseded.push((job.clone(), operation, signed.hash, reason));
                                done.push(job);
                                continue;
                            }
                            Err(LedgerError::Unreachable { .. }) => {
                                waiting.push((job, operation));
                                continue;
                            }
                            Err(e) => Err(JobError::retry(e)),
                        }
                    }
                    Some(Err(error)) => Err(error),
                    None => Ok(()),
                };
                if let Err(error) = resent {
                    failed.push((job, error));
                    continue;
                }
            }
            outcomes.push((job.clone(), operation, receipt));
            done.push(job);
        }
        let mut tx = p.store.write().await?;
        // One lock for all the rows this commit changes: the superseded first, then the settled.
        let settled = outcomes.iter().filter(|(_, _, receipt)| matches!(receipt, ReceiptStatus::Included { .. }));
        let changed: Vec<&Operation> =
            superseded.iter().map(|(_, o, _, _)| o).chain(settled.map(|(_, o, _)| o)).collect();
        let mut rows = lock_rows(tx.as_mut(), &changed).await?.into_iter();
        let mut next_jobs = Vec::new();
        for (job, _, hash, reason) in &superseded {
            let row = rows.next().flatten();
            if let Some(o) = p.sign_anew(tx.as_mut(), row, from, *hash, reason, now).await? {
                next_jobs.push(p.job_after(job, kinds::OPERATION_SETTLE, o.tenant_id, o.id, now));
            }
        }
        for (job, operation) in waiting {
            let poll_at = now.plus_millis(OUTAGE_POLL_MS.max(p.settings.receipt_poll_ms));
            let mut poll = p.job(kinds::OPERATION_TRACK, operation.tenant_id, operation.id, poll_at);
            poll.payload = crate::trace::stamp_with(poll.payload, crate::trace::of_job(&job));
            next_jobs.push(poll);
            done.push(job);
        }
        let mut positions = PositionDeltas::default();
        for (job, operation, receipt) in outcomes {
            match receipt {
                ReceiptStatus::Pending | ReceiptStatus::Unknown => {
                    let poll_at = now.plus_millis(p.settings.receipt_poll_ms);
                    // The same context, not a child: each poll continues the operation's track.
                    let mut poll = p.job(kinds::OPERATION_TRACK, operation.tenant_id, operation.id, poll_at);
                    poll.payload = crate::trace::stamp_with(poll.payload, crate::trace::of_job(&job));
                    next_jobs.push(poll);
                }
                ReceiptStatus::Included { block_number, outcome: Outcome::Success } => {
                    let row = rows.next().flatten();
                    confirm_row(p, tx.as_mut(), &mut positions, row, block_number, now).await?;
                }
                ReceiptStatus::Included { block_number, outcome: Outcome::Reverted { reason, .. } } => {
                    let row = rows.next().flatten();
                    let reason = format!("{reason}{}", super::outcome::REVERTED);
                    p.fail_row(tx.as_mut(), row, from, FailureCode::ChainFailed, reason, Some(block_number), now)
                        .await?;
                }
            }
        }
        tx.jobs().enqueue_all(&next_jobs, now).await?;
        positions.apply(tx.as_mut(), now).await?;
        let done = done.iter().map(|job| job.id).collect();
        ctx.finish(tx, done, rest, failed).await
    }

    /// Receipts that could not be followed to the end (the ledger answering errors, or the
    /// store failing to commit the outcome, for the whole retry schedule) leave the operation
    /// FAILED `RETRY_EXHAUSTED` with a break naming its txHash: its ledger outcome must be
    /// verified. (A ledger that gives no answer at all is waited for, above.)
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let row = tx.operations().get_for_update(tenant, id).await?;
        let reason = format!("the receipt could not be followed: {reason}");
        self.0.fail_row(tx, row, OperationState::Settling, FailureCode::RetryExhausted, reason, None, now).await
    }
}
