//! `operation.settle`, step 2: custody signs the operation's ledger call, the signature is
//! recorded, then sent; the sent move to SETTLING.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_custody::CustodyError;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::{FailureCode, OperationState};
use tokenops_ledger::LedgerError;
use tokenops_store::{Job, Tx};

use super::signatures::{Recorded, decode_signed, signed_hash_note};
use super::{BATCH_LIMIT, Lookups, Pipeline, Sorted, sort_batch, target};
use crate::jobs::{BatchContext, BatchFinished, Finished, JobContext, JobError, JobHandler, kinds};

pub struct Settle(pub Arc<Pipeline>);

#[async_trait]
impl JobHandler for Settle {
    fn kind(&self) -> &'static str {
        kinds::OPERATION_SETTLE
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let (tenant, id) = target(job)?;
        let from = OperationState::PendingSettlement;
        let Some(operation) = p.load(tenant, id).await?.filter(|o| o.state == from) else {
            return ctx.finish(p.store.write().await?).await;
        };
        let last_attempt = job.attempts >= job.max_attempts;
        let signed = match &operation.signed_transaction {
            Some(text) => decode_signed(text)?,
            None => {
                let (token, call) = match p.ledger_call(&operation, ctx.clock().now()).await? {
                    Ok(call) => call,
                    Err(reason) => {
                        let mut tx = p.store.write().await?;
                        p.fail(
                            tx.as_mut(),
                            tenant,
                            id,
                            from,
                            FailureCode::Unprocessable,
                            reason,
                            None,
                            ctx.clock().now(),
                        )
                        .await?;
                        return ctx.finish(tx).await;
                    }
                };
                match p.ledger.sign(token, &call, p.custody.as_ref()).await {
                    Ok(signed) => {
                        // Recorded before it is sent: from here on only these bytes are sent.
                        let recorded = p.record_signatures(&[(tenant, id, &signed)], from, ctx.clock().now()).await?;
                        match recorded.into_iter().next() {
                            Some(Recorded::Ours) => signed,
                            Some(Recorded::Other(text)) => decode_signed(&text)?,
                            Some(Recorded::Gone) | None => return ctx.finish(p.store.write().await?).await,
                        }
                    }
                    Err(LedgerError::Signing(CustodyError::Refused { reason, .. })) => {
                        let mut tx = p.store.write().await?;
                        let reason = format!("custody refused to sign: {reason}");
                        p.fail(
                            tx.as_mut(),
                            tenant,
                            id,
                            from,
                            FailureCode::SigningRejected,
                            reason,
                            None,
                            ctx.clock().now(),
                        )
                        .await?;
                        return ctx.finish(tx).await;
                    }
                    Err(e) if e.is_temporary() && !last_attempt => return Err(JobError::Retry(e.to_string())),
                    Err(e) => {
                        let code =
                            if e.is_temporary() { FailureCode::RetryExhausted } else { FailureCode::ChainFailed };
                        let mut tx = p.store.write().await?;
                        p.fail(tx.as_mut(), tenant, id, from, code, e.to_string(), None, ctx.clock().now()).await?;
                        return ctx.finish(tx).await;
                    }
                }
            }
        };
        match p.ledger.send(&signed).await {
            Ok(hash) => {
                let now = ctx.clock().now();
                let mut tx = p.store.write().await?;
                let moved = p
                    .advance(
                        tx.as_mut(),
                        tenant,
                        id,
                        from,
                        |o| {
                            o.state = OperationState::Settling;
                            o.tx_hash = Some(crate::chain::domain_hash(hash));
                        },
                        now,
                    )
                    .await?;
                if moved.is_some() {
                    // A transaction just sent is in no block yet: the first look waits one poll.
                    let first_poll = now.plus_millis(p.settings.receipt_poll_ms);
                    tx.jobs().enqueue(&p.job(kinds::OPERATION_TRACK, tenant, id, first_poll), now).await?;
                }
                ctx.finish(tx).await
            }
            Err(e) if e.is_temporary() && !last_attempt => Err(JobError::Retry(e.to_string())),
            Err(e) => {
                // The outcome may be unknown: the break names the signed transaction's hash.
                let code = if e.is_temporary() { FailureCode::RetryExhausted } else { FailureCode::ChainFailed };
                let reason = format!("{e} (signed transaction {:#x})", signed.hash);
                let mut tx = p.store.write().await?;
                p.fail(tx.as_mut(), tenant, id, from, code, reason, None, ctx.clock().now()).await?;
                ctx.finish(tx).await
            }
        }
    }

    fn batch_limit(&self) -> usize {
        BATCH_LIMIT
    }

    /// Signs every operation, records all the signatures in one commit, sends them, and moves
    /// the sent ones to SETTLING in a second commit. Anything unusual (a signature already
    /// recorded, an operation that cannot be processed, a refusal, a failed send) is left to
    /// `run`, which then finds the recorded bytes and sends those again.
    async fn run_batch(&self, jobs: Vec<Job>, ctx: &BatchContext) -> Result<BatchFinished, JobError> {
        let p = &self.0;
        let from = OperationState::PendingSettlement;
        let now = ctx.clock().now();
        let mut read = p.store.read().await?;
        let Sorted { due, idle, mut rest } = sort_batch(read.as_mut(), jobs, from, |_| false).await?;
        let mut lookups = Lookups::default();
        let mut calls = Vec::with_capacity(due.len());
        for (job, operation) in due {
            if operation.signed_transaction.is_some() {
                rest.push(job);
                continue;
            }
            match p.ledger_call_in(read.as_mut(), &mut lookups, &operation, now).await? {
                Ok((token, call)) => calls.push((job, operation, token, call)),
                Err(_) => rest.push(job),
            }
        }
        drop(read);
        p.sign_and_send(calls, from, idle, rest, ctx).await
    }

    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok((tenant, id)) = target(job) else { return Ok(()) };
        let row = tx.operations().get_for_update(tenant, id).await?;
        let reason = format!("settlement stopped: {reason}{}", row.as_ref().map(signed_hash_note).unwrap_or_default());
        let from = OperationState::PendingSettlement;
        self.0.fail_row(tx, row, from, FailureCode::RetryExhausted, reason, None, now).await
    }
}
