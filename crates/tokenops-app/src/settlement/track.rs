//! `operation.track`, step 3: the receipt of the sent transaction ends the operation CONFIRMED
//! (see `confirm`) or FAILED `CHAIN_FAILED`; a transaction the ledger does not know is sent
//! again, the same bytes.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_ledger::{Outcome, ReceiptStatus};
use tokenops_store::{Job, Tx};

use super::confirm::{PositionDeltas, confirm, confirm_row};
use super::signatures::decode_signed;
use super::{BATCH_LIMIT, Pipeline, Sorted, lock_rows, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, Finished, JobContext, JobError, JobHandler, kinds};

pub struct Track(pub Arc<Pipeline>);

#[async_trait]
impl JobHandler for Track {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_TRACK
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let (tenant, id) = target(job)?;
        let from = OperationState::Settling;
        let Some(operation) = p.load(tenant, id).await?.filter(|o| o.state == from) else {
            return ctx.finish(p.store.write().await?).await;
        };
        let hash = operation
            .tx_hash
            .map(crate::chain::ledger_hash)
            .ok_or_else(|| JobError::Permanent("a SETTLING operation without a txHash".into()))?;
        let receipt = match p.ledger.receipt(hash).await {
            Ok(receipt) => receipt,
            Err(e) => return Err(JobError::Retry(e.to_string())),
        };
        let now = ctx.clock().now();
        let mut tx = p.store.write().await?;
        match receipt {
            ReceiptStatus::Pending => {
                tx.jobs()
                    .enqueue(
                        &p.job(kinds::OPERATION_TRACK, tenant, id, now.plus_millis(p.settings.receipt_poll_ms)),
                        now,
                    )
                    .await?;
            }
            ReceiptStatus::Unknown => {
                // Dropped or never received: the same signed bytes again, never a new signature.
                if let Some(text) = &operation.signed_transaction {
                    p.ledger.send(&decode_signed(text)?).await.map_err(|e| JobError::Retry(e.to_string()))?;
                }
                tx.jobs()
                    .enqueue(
                        &p.job(kinds::OPERATION_TRACK, tenant, id, now.plus_millis(p.settings.receipt_poll_ms)),
                        now,
                    )
                    .await?;
            }
            ReceiptStatus::Included { block_number, outcome: Outcome::Success } => {
                let mut positions = PositionDeltas::default();
                confirm(p, tx.as_mut(), &mut positions, tenant, id, block_number, now).await?;
                positions.apply(tx.as_mut(), now).await?;
            }
            ReceiptStatus::Included { block_number, outcome: Outcome::Reverted { reason, .. } } => {
                let reason = format!("{reason}: the ledger reverted the transaction");
                p.fail(tx.as_mut(), tenant, id, from, FailureCode::ChainFailed, reason, Some(block_number), now)
                    .await?;
            }
        }
        ctx.finish(tx).await
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// Reads every receipt at once and lands all the outcomes in one commit; a transaction the
    /// ledger does not know is left to `run`, which sends its recorded bytes again.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let from = OperationState::Settling;
        let Sorted { due, idle, mut rest } = {
            let mut read = p.store.read().await?;
            sort_batch(read.as_mut(), jobs, from, |_| false).await?
        };
        let mut tracked = Vec::with_capacity(due.len());
        for (job, operation) in due {
            match operation.tx_hash.map(crate::chain::ledger_hash) {
                Some(hash) => tracked.push((job, operation, hash)),
                None => rest.push(job),
            }
        }
        let hashes: Vec<_> = tracked.iter().map(|(_, _, hash)| *hash).collect();
        let receipts = p.ledger.receipts(&hashes).await.map_err(|e| JobError::Retry(e.to_string()))?;
        let now = ctx.clock().now();
        let mut outcomes = Vec::with_capacity(tracked.len());
        let mut done = idle;
        for ((job, operation, _), receipt) in tracked.into_iter().zip(receipts) {
            if receipt == ReceiptStatus::Unknown {
                rest.push(job);
            } else {
                outcomes.push((operation, receipt));
                done.push(job);
            }
        }
        let mut tx = p.store.write().await?;
        let settled: Vec<&Operation> = outcomes
            .iter()
            .filter(|(_, receipt)| matches!(receipt, ReceiptStatus::Included { .. }))
            .map(|(o, _)| o)
            .collect();
        let mut rows = lock_rows(tx.as_mut(), &settled).await?.into_iter();
        let mut positions = PositionDeltas::default();
        let mut polls = Vec::new();
        for (operation, receipt) in outcomes {
            match receipt {
                ReceiptStatus::Unknown => {}
                ReceiptStatus::Pending => {
                    let next = now.plus_millis(p.settings.receipt_poll_ms);
                    polls.push(p.job(kinds::OPERATION_TRACK, operation.tenant_id, operation.id, next));
                }
                ReceiptStatus::Included { block_number, outcome: Outcome::Success } => {
                    let row = rows.next().flatten();
                    confirm_row(p, tx.as_mut(), &mut positions, row, block_number, now).await?;
                }
                ReceiptStatus::Included { block_number, outcome: Outcome::Reverted { reason, .. } } => {
                    let row = rows.next().flatten();
                    let reason = format!("{reason}: the ledger reverted the transaction");
                    p.fail_row(tx.as_mut(), row, from, FailureCode::ChainFailed, reason, Some(block_number), now)
                        .await?;
                }
            }
        }
        tx.jobs().enqueue_all(&polls, now).await?;
        positions.apply(tx.as_mut(), now).await?;
        let done = done.iter().map(|job| job.id).collect();
        ctx.finish(tx, done, rest).await
    }

    /// Receipts that could not be followed to the end (the ledger unreachable for the whole
    /// retry schedule, or the confirmation failing to commit) leave the operation FAILED
    /// `RETRY_EXHAUSTED` with a break naming its txHash: its ledger outcome must be verified.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let reason = format!("the receipt could not be followed: {reason}");
        self.0.fail(tx, tenant, id, OperationState::Settling, FailureCode::RetryExhausted, reason, None, now).await
    }
}
