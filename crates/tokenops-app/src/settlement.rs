//! The settlement pipeline of an accepted operation, as durable jobs:
//!
//! 1. `operation.evaluate`: the policy step (no ACTIVE policy yet means approved) and the
//!    checks that decide whether the operation can be processed at all (the accounts and the
//!    contract still ACTIVE, a LOCK's expiry valid and in the future: else `UNPROCESSABLE`);
//!    → PENDING_SETTLEMENT and `operation.settle`.
//! 2. `operation.settle`: custody signs the ledger transaction (a refusal is
//!    `SIGNING_REJECTED`, nothing reaches the ledger); the signed bytes are recorded before
//!    they are sent, so an unknown outcome is only ever resolved by sending **the same bytes**
//!    again; temporary failures retry with backoff, then `RETRY_EXHAUSTED` (with a break);
//!    → SETTLING with `txHash` and `operation.track`.
//! 3. `operation.track`: the receipt → CONFIRMED with `blockNumber` (positions, locks and
//!    `transaction.confirmed` move with it), or FAILED `CHAIN_FAILED` with the decoded revert
//!    as `reasonCode` and a break.
//!
//! States only move forward (`OperationState::may_become`); a job that finds its operation
//! elsewhere than it expects does nothing.
//!
//! Each step also runs in batches (`run_batch`): the common case of up to `BATCH_LIMIT`
//! operations with one read, one ledger round and one commit (two for signing: the signatures
//! are committed before anything is sent); anything unusual is left to `run`. A batch of
//! evaluations goes straight on into step 2's work for the approved (approval and signature
//! in one commit), so that no `operation.settle` job is needed for them; an evaluation job
//! that finds its operation signed but unsent settles it.

use async_trait::async_trait;
use std::str::FromStr;
use std::sync::Arc;
use tokenops_custody::{Address, B256, Custody, CustodyError};
use tokenops_domain::account::{AccountRef, AccountStatus};
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::operation::{BreakReason, FailureCode, LockStatus, OperationState, TxType};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_ledger::{Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, SignedTransaction, U256};
use tokenops_store::{BreakRecord, InFlight, Job, LockRecord, NewJob, OperationRecord, Store, Tx};
use uuid::Uuid;

use crate::jobs::{BatchContext, BatchFinished, Finished, JobContext, JobError, JobHandler, kinds};
use crate::operations::OperationOut;
use crate::write::Operation;

/// The most jobs of one pipeline step run together: one read, one ledger round and one commit
/// for all of them.
const BATCH_LIMIT: usize = 128;

pub const SETTLED: Operation =
    Operation { name: "transaction.settle", category: "TRANSACTIONS", resource_type: "transaction" };

/// Tunables of the pipeline.
#[derive(Debug, Clone, Copy)]
pub struct SettlementSettings {
    /// How long `operation.track` waits between receipt polls.
    pub receipt_poll_ms: i64,
    pub job_max_attempts: u32,
}

/// What every pipeline job needs.
pub struct Pipeline {
    pub store: Arc<dyn Store>,
    pub custody: Arc<dyn Custody>,
    pub ledger: Arc<dyn Ledger>,
    pub settings: SettlementSettings,
}

fn target(job: &Job) -> Result<(TenantId, Uuid), JobError> {
    let tenant = job.tenant_id.ok_or_else(|| JobError::Permanent(format!("{} without a tenant", job.kind)))?;
    let id = job
        .payload
        .get("transactionId")
        .and_then(|v| v.as_str())
        .and_then(|s| Uuid::parse_str(s).ok())
        .ok_or_else(|| JobError::Permanent("payload has no transactionId".into()))?;
    Ok((tenant, id))
}

/// A batch's jobs split by their operations, read in one transaction: those whose operation
/// is in `state` (with it), those whose operation has moved on or is gone (finished with no
/// effect, as `run` would), and those `run` must look at alone (no readable target, or an
/// operation elsewhere that `alone` says `run` still has work on).
struct Sorted {
    due: Vec<(Job, OperationRecord)>,
    idle: Vec<Job>,
    rest: Vec<Job>,
}

async fn sort_batch(
    tx: &mut dyn Tx,
    jobs: Vec<Job>,
    state: OperationState,
    alone: impl Fn(&OperationRecord) -> bool + Send,
) -> Result<Sorted, JobError> {
    let mut sorted = Sorted { due: Vec::with_capacity(jobs.len()), idle: Vec::new(), rest: Vec::new() };
    let mut targeted = Vec::with_capacity(jobs.len());
    let mut seen = std::collections::HashSet::with_capacity(jobs.len());
    for job in jobs {
        match target(&job) {
            // A second job for one operation (a stale claim beside a fresh one) runs alone.
            Ok(target) if seen.insert(target) => targeted.push((job, target)),
            _ => sorted.rest.push(job),
        }
    }
    let ids: Vec<(TenantId, Uuid)> = targeted.iter().map(|(_, target)| *target).collect();
    let found = tx.operations().get_many(&ids, false).await?;
    for ((job, _), operation) in targeted.into_iter().zip(found) {
        match operation {
            Some(operation) if operation.state == state => sorted.due.push((job, operation)),
            Some(operation) if alone(&operation) => sorted.rest.push(job),
            _ => sorted.idle.push(job),
        }
    }
    Ok(sorted)
}

/// Reads the operations for update in one go (where the store can), for `advance_row`.
async fn lock_rows(tx: &mut dyn Tx, operations: &[&OperationRecord]) -> Result<Vec<Option<OperationRecord>>, JobError> {
    let ids: Vec<(TenantId, Uuid)> = operations.iter().map(|o| (o.tenant_id, o.id)).collect();
    Ok(tx.operations().get_many(&ids, true).await?)
}

/// Signatures made but not yet handed to `record_signatures`: dropped armed (the run was
/// stopped), it gives their nonces back.
struct Unrecorded {
    ledger: Arc<dyn Ledger>,
    signed: Vec<SignedTransaction>,
}

impl Unrecorded {
    fn disarm(&mut self) {
        self.signed.clear();
    }
}

impl Drop for Unrecorded {
    fn drop(&mut self) {
        if self.signed.is_empty() {
            return;
        }
        let (ledger, signed) = (self.ledger.clone(), std::mem::take(&mut self.signed));
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                for transaction in signed.iter().rev() {
                    ledger.abandon(transaction).await;
                }
            });
        }
    }
}

/// The contracts and accounts the operations of one run name, each read once: a batch's
/// operations mostly name the same few.
#[derive(Default)]
struct Lookups {
    contracts: std::collections::HashMap<(TenantId, String), Option<tokenops_store::ContractRecord>>,
    accounts: std::collections::HashMap<(TenantId, AccountRef), Option<tokenops_store::AccountRecord>>,
}

impl Lookups {
    async fn contract(
        &mut self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        asset: &str,
    ) -> Result<Option<tokenops_store::ContractRecord>, JobError> {
        let key = (tenant, asset.to_owned());
        if let Some(found) = self.contracts.get(&key) {
            return Ok(found.clone());
        }
        let found = tx.contracts().get(tenant, asset).await?;
        self.contracts.insert(key, found.clone());
        Ok(found)
    }

    async fn account(
        &mut self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        reference: &AccountRef,
    ) -> Result<Option<tokenops_store::AccountRecord>, JobError> {
        let key = (tenant, reference.clone());
        if let Some(found) = self.accounts.get(&key) {
            return Ok(found.clone());
        }
        let found = tx.accounts().get(tenant, reference).await?;
        self.accounts.insert(key, found.clone());
        Ok(found)
    }
}

fn internal(e: impl std::fmt::Display) -> JobError {
    JobError::Retry(e.to_string())
}

/// The ledger's id of a lock's hold: the lock id's 16 bytes, right-aligned.
pub fn hold_id(lock_id: Uuid) -> B256 {
    let mut bytes = [0u8; 32];
    bytes[16..].copy_from_slice(lock_id.as_bytes());
    B256::from(bytes)
}

fn parse_address(text: Option<&str>, what: &str) -> Result<Address, String> {
    let text = text.ok_or_else(|| format!("{what} has no address"))?;
    Address::from_str(text).map_err(|_| format!("{what} has an invalid address {text:?}"))
}

impl Pipeline {
    async fn load(&self, tenant: TenantId, id: Uuid) -> Result<Option<OperationRecord>, JobError> {
        let mut tx = self.store.read().await?;
        Ok(tx.operations().get(tenant, id).await?)
    }

    fn job(&self, kind: &str, tenant: TenantId, id: Uuid, run_at: Timestamp) -> NewJob {
        NewJob {
            kind: kind.to_owned(),
            tenant_id: Some(tenant),
            payload: serde_json::json!({ "transactionId": id }),
            run_at,
            max_attempts: self.settings.job_max_attempts,
            dedupe_key: None,
        }
    }

    /// Moves the operation (read for update in `tx`) from `from` to `to` by `change`, with the
    /// event the new state calls for; `false` when the operation is no longer in `from`.
    async fn advance(
        &self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        id: Uuid,
        from: OperationState,
        change: impl FnOnce(&mut OperationRecord),
        now: Timestamp,
    ) -> Result<Option<OperationRecord>, JobError> {
        let row = tx.operations().get_for_update(tenant, id).await?;
        self.advance_row(tx, row, from, change, now).await
    }

    /// As `advance`, on the operation's row as the caller read it for update.
    async fn advance_row(
        &self,
        tx: &mut dyn Tx,
        row: Option<OperationRecord>,
        from: OperationState,
        change: impl FnOnce(&mut OperationRecord),
        now: Timestamp,
    ) -> Result<Option<OperationRecord>, JobError> {
        let Some(mut operation) = row else {
            return Ok(None);
        };
        if operation.state != from {
            return Ok(None);
        }
        change(&mut operation);
        debug_assert!(from.may_become(operation.state) || from == operation.state);
        operation.updated_at = now;
        tx.operations().update(&operation).await?;
        Ok(Some(operation))
    }

    /// Records each signed transaction on its operation (one commit for all), moving it from
    /// `from` (SUBMITTED, when evaluation goes straight on, or PENDING_SETTLEMENT) to
    /// PENDING_SETTLEMENT, unless a signature is recorded already: from then on only the
    /// recorded bytes are ever sent.
    /// A signature that was not recorded (another is, or the operation moved on) has its nonce
    /// given back. When the commit fails, the store is read again and the nonces of the
    /// signatures it does not hold are given back (a failed sync may follow a commit that
    /// landed: those signatures are recorded and keep their nonces).
    async fn record_signatures(
        &self,
        signed: &[(TenantId, Uuid, &SignedTransaction)],
        from: OperationState,
        now: Timestamp,
    ) -> Result<Vec<Recorded>, JobError> {
        let ours: Vec<String> = signed
            .iter()
            .map(|(_, _, transaction)| serde_json::to_string(&StoredSignature::of(transaction)).map_err(internal))
            .collect::<Result<_, _>>()?;
        let recorded = async {
            let mut tx = self.store.write().await?;
            let ids: Vec<(TenantId, Uuid)> = signed.iter().map(|(tenant, id, _)| (*tenant, *id)).collect();
            let rows = tx.operations().get_many(&ids, true).await?;
            let mut outcomes = Vec::with_capacity(signed.len());
            for (ours, row) in ours.iter().zip(rows) {
                let moved = self
                    .advance_row(
                        tx.as_mut(),
                        row,
                        from,
                        |o| {
                            o.state = OperationState::PendingSettlement;
                            if o.signed_transaction.is_none() {
                                o.signed_transaction = Some(ours.clone());
                            }
                        },
                        now,
                    )
                    .await?;
                outcomes.push(match moved.and_then(|o| o.signed_transaction) {
                    Some(kept) if kept == *ours => Recorded::Ours,
                    Some(kept) => Recorded::Other(kept),
                    None => Recorded::Gone,
                });
            }
            tx.commit().await?;
            Ok::<_, JobError>(outcomes)
        }
        .await;
        let unrecorded: Vec<bool> = match &recorded {
            Ok(outcomes) => outcomes.iter().map(|o| !matches!(o, Recorded::Ours)).collect(),
            Err(_) => match self.holds_signatures(signed, &ours).await {
                Ok(held) => held.into_iter().map(|held| !held).collect(),
                Err(e) => {
                    // The gap sweep (`nonce_gaps`) settles them once the store answers again.
                    tracing::warn!(error = %e, "could not tell which signatures were recorded; their nonces are kept for the gap sweep");
                    vec![false; signed.len()]
                }
            },
        };
        // Latest first, so that each nonce steps its sender's slot back.
        for ((_, _, transaction), unrecorded) in signed.iter().zip(unrecorded).rev() {
            if unrecorded {
                self.ledger.abandon(transaction).await;
            }
        }
        recorded
    }

    /// Whether the store holds each of `ours` as its operation's signature.
    async fn holds_signatures(
        &self,
        signed: &[(TenantId, Uuid, &SignedTransaction)],
        ours: &[String],
    ) -> Result<Vec<bool>, JobError> {
        let mut read = self.store.read().await?;
        let ids: Vec<(TenantId, Uuid)> = signed.iter().map(|(tenant, id, _)| (*tenant, *id)).collect();
        let rows = read.operations().get_many(&ids, false).await?;
        Ok(rows
            .iter()
            .zip(ours)
            .map(|(row, ours)| row.as_ref().and_then(|o| o.signed_transaction.as_ref()) == Some(ours))
            .collect())
    }

    /// The common case of settling a batch: signs each operation's ledger call, records every
    /// signature in one commit (moving each operation from `from` to PENDING_SETTLEMENT), sends
    /// what was recorded, and moves the sent to SETTLING with their track jobs in the commit
    /// that finishes the batch. A refusal, a signature recorded first by another run, or a
    /// failed send is left to `run`, which then finds the recorded bytes and sends those.
    async fn sign_and_send(
        &self,
        calls: Vec<(Job, OperationRecord, Address, LedgerCall)>,
        from: OperationState,
        idle: Vec<Job>,
        mut rest: Vec<Job>,
        ctx: &BatchContext,
    ) -> Result<BatchFinished, JobError> {
        let p = self;
        let mut signed = Vec::with_capacity(calls.len());
        // Should the batch be stopped (its lease lost) before the signatures are recorded, their
        // nonces are given back rather than left as gaps.
        let mut unsent = Unrecorded { ledger: p.ledger.clone(), signed: Vec::new() };
        for (job, operation, token, call) in calls {
            match p.ledger.sign(token, &call, p.custody.as_ref()).await {
                Ok(transaction) => {
                    unsent.signed.push(transaction.clone());
                    signed.push((job, operation, transaction));
                }
                Err(_) => rest.push(job),
            }
        }
        let records: Vec<(TenantId, Uuid, &SignedTransaction)> =
            signed.iter().map(|(_, o, t)| (o.tenant_id, o.id, t)).collect();
        // From here `record_signatures` settles each nonce's fate itself. (Stopped while its
        // commit is in flight, the outcome is unknown and the nonces are kept.)
        unsent.disarm();
        let recorded = p.record_signatures(&records, from, ctx.clock().now()).await?;
        let mut sent = Vec::with_capacity(signed.len());
        for ((job, operation, transaction), recorded) in signed.into_iter().zip(recorded) {
            // Only our own recorded bytes go out from here; `run` sends another's.
            if !matches!(recorded, Recorded::Ours) {
                rest.push(job);
                continue;
            }
            match p.ledger.send(&transaction).await {
                Ok(hash) => sent.push((job, operation, hash)),
                Err(_) => rest.push(job),
            }
        }
        let now = ctx.clock().now();
        // A transaction just sent is in no block yet: the first look waits one poll.
        let first_poll = now.plus_millis(p.settings.receipt_poll_ms);
        let mut tx = p.store.write().await?;
        let operations: Vec<&OperationRecord> = sent.iter().map(|(_, o, _)| o).collect();
        let rows = lock_rows(tx.as_mut(), &operations).await?;
        let mut next = Vec::with_capacity(rows.len());
        for (row, (_, _, hash)) in rows.into_iter().zip(&sent) {
            let moved = p
                .advance_row(
                    tx.as_mut(),
                    row,
                    OperationState::PendingSettlement,
                    |o| {
                        o.state = OperationState::Settling;
                        o.tx_hash = Some(format!("{hash:#x}"));
                    },
                    now,
                )
                .await?;
            if let Some(o) = moved {
                next.push(p.job(kinds::OPERATION_TRACK, o.tenant_id, o.id, first_poll));
            }
        }
        tx.jobs().enqueue_all(&next, now).await?;
        let done = idle.iter().map(|job| job.id).chain(sent.iter().map(|(job, _, _)| job.id)).collect();
        ctx.finish(tx, done, rest).await
    }

    /// Ends the operation FAILED with `code` and `reason`: its event, its lock bookkeeping, a
    /// break when it reached the ledger or ran out of retries, and the audit record.
    #[allow(clippy::too_many_arguments)]
    async fn fail(
        &self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        id: Uuid,
        from: OperationState,
        code: FailureCode,
        reason: String,
        block_number: Option<u64>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let row = tx.operations().get_for_update(tenant, id).await?;
        self.fail_row(tx, row, from, code, reason, block_number, now).await
    }

    /// As `fail`, on the operation's row as the caller read it for update.
    #[allow(clippy::too_many_arguments)]
    async fn fail_row(
        &self,
        tx: &mut dyn Tx,
        row: Option<OperationRecord>,
        from: OperationState,
        code: FailureCode,
        reason: String,
        block_number: Option<u64>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let reason_code = reason_code_of(code, &reason);
        let Some(operation) = self
            .advance_row(
                tx,
                row,
                from,
                |o| {
                    o.state = OperationState::Failed;
                    o.failure_code = Some(code);
                    o.reason_code = Some(reason_code);
                    if block_number.is_some() {
                        o.block_number = block_number;
                    }
                },
                now,
            )
            .await?
        else {
            return Ok(());
        };
        let tenant = operation.tenant_id;
        // A RELEASE or CANCEL that failed leaves its lock ACTIVE for another try.
        if let Some(lock_id) = operation.lock_id.filter(|_| operation.tx_type.completes_lock())
            && let Some(mut lock) = tx.locks().get_for_update(tenant, lock_id).await?
            && lock.completed_by == Some(operation.id)
        {
            lock.completed_by = None;
            lock.updated_at = now;
            tx.locks().update(&lock).await?;
        }
        let break_reason = match code {
            FailureCode::ChainFailed => Some(BreakReason::ChainFailed),
            FailureCode::RetryExhausted => Some(BreakReason::RetryExhausted),
            _ => None,
        };
        if let Some(break_reason) = break_reason {
            let detail = match &operation.tx_hash {
                Some(hash) => format!("{reason} (txHash {hash})"),
                None => reason.clone(),
            };
            tx.breaks()
                .insert(&BreakRecord {
                    id: new_id(),
                    tenant_id: tenant,
                    transaction_id: Some(operation.id),
                    account_ref: operation.account_ref.clone(),
                    asset_id: operation.asset_id.clone(),
                    reason: break_reason,
                    detail,
                    detected_at: now,
                })
                .await?;
        }
        let event = if code == FailureCode::ValidationRejected {
            EventType::TransactionRejected
        } else {
            EventType::TransactionFailed
        };
        self.publish(tx, event, &operation, now).await?;
        self.audit(tx, &operation, AuditOutcome::Failure, now).await
    }

    async fn publish(
        &self,
        tx: &mut dyn Tx,
        event_type: EventType,
        operation: &OperationRecord,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let data = serde_json::to_value(OperationOut::from(operation)).map_err(internal)?;
        let event = Event {
            id: new_id(),
            tenant_id: operation.tenant_id,
            event_type: event_type.as_str().to_owned(),
            occurred_at: now,
            correlation_id: operation.correlation_id.clone(),
            idempotency_key: operation.idempotency_key.clone(),
            resource: ResourceRef::new("transaction", operation.id.to_string()),
            data,
            dispatched_at: None,
        };
        crate::events::publish(tx, &event, self.settings.job_max_attempts, now).await.map_err(internal)
    }

    async fn audit(
        &self,
        tx: &mut dyn Tx,
        operation: &OperationRecord,
        outcome: AuditOutcome,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let record = crate::audit::worker_record(
            operation.tenant_id,
            &SETTLED,
            operation.id.to_string(),
            outcome,
            serde_json::json!({ "after": OperationOut::from(operation) }),
            now,
        );
        Ok(tx.audit().record(&record).await?)
    }

    /// The ledger call of an operation, with the token's address: every address it needs read
    /// from the store. `Err` is a reason the operation cannot be processed (UNPROCESSABLE).
    async fn ledger_call(
        &self,
        operation: &OperationRecord,
        now: Timestamp,
    ) -> Result<Result<(Address, LedgerCall), String>, JobError> {
        let mut tx = self.store.read().await?;
        self.ledger_call_in(tx.as_mut(), &mut Lookups::default(), operation, now).await
    }

    /// As `ledger_call`, reading through `tx` what `lookups` does not hold yet.
    async fn ledger_call_in(
        &self,
        tx: &mut dyn Tx,
        lookups: &mut Lookups,
        operation: &OperationRecord,
        now: Timestamp,
    ) -> Result<Result<(Address, LedgerCall), String>, JobError> {
        let tenant = operation.tenant_id;
        let Some(contract) = lookups
            .contract(tx, tenant, &operation.asset_id)
            .await?
            .filter(|c| c.status == tokenops_domain::account::ContractStatus::Active)
        else {
            return Ok(Err(format!("{} has no ACTIVE contract", operation.asset_id)));
        };
        // Completing a lock is allowed on an INACTIVE account: the funds are already committed.
        let needs_active = !operation.tx_type.completes_lock();
        let token = match parse_address(contract.address.as_deref(), "the contract") {
            Ok(token) => token,
            Err(reason) => return Ok(Err(reason)),
        };
        let wallet_of = |account: Option<tokenops_store::AccountRecord>, what: &str| -> Result<Address, String> {
            let account = account.ok_or_else(|| format!("{what} no longer exists"))?;
            if needs_active && account.status != AccountStatus::Active {
                return Err(format!("{what} {} is not ACTIVE", account.account_ref));
            }
            parse_address(account.wallet_address.as_deref(), what)
        };
        let owner = wallet_of(lookups.account(tx, tenant, &operation.account_ref).await?, "the account");
        let counterparty = match &operation.counterparty_ref {
            Some(reference) => Some(wallet_of(lookups.account(tx, tenant, reference).await?, "the counterparty")),
            None => None,
        };
        let amount = U256::from(u64::try_from(operation.amount).unwrap_or(0));
        let call = (|| -> Result<LedgerCall, String> {
            let owner = owner?;
            let counterparty = counterparty.transpose()?;
            Ok(match operation.tx_type {
                TxType::Mint => LedgerCall::Mint { to: owner, amount },
                TxType::Burn => LedgerCall::Burn { from: owner, amount },
                TxType::Transfer => LedgerCall::Transfer {
                    from: owner,
                    to: counterparty.ok_or("a TRANSFER without its counterparty")?,
                    amount,
                },
                TxType::Lock => LedgerCall::Hold {
                    owner,
                    id: hold_id(operation.id),
                    payee: counterparty,
                    amount,
                    expires_at: lock_expiry(operation, now)?
                        .map(|t| u64::try_from(t.as_micros() / 1_000_000).unwrap_or(0)),
                },
                TxType::Release => {
                    LedgerCall::ExecuteHold { actor: owner, id: hold_id(operation.lock_id.unwrap_or(operation.id)) }
                }
                TxType::Cancel => {
                    LedgerCall::CancelHold { actor: owner, id: hold_id(operation.lock_id.unwrap_or(operation.id)) }
                }
            })
        })();
        Ok(call.map(|call| (token, call)))
    }
}

/// A LOCK's `params.expiresAt`: absent, or an ISO 8601 instant after `now`.
fn lock_expiry(operation: &OperationRecord, now: Timestamp) -> Result<Option<Timestamp>, String> {
    match operation.params.get("expiresAt") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(text)) => {
            let at = Timestamp::parse_iso8601(text)
                .map_err(|_| format!("params.expiresAt {text:?} is not an ISO 8601 instant"))?;
            if at <= now {
                return Err(format!("params.expiresAt {text} is not in the future"));
            }
            Ok(Some(at))
        }
        Some(other) => Err(format!("params.expiresAt {other} is not an ISO 8601 instant")),
    }
}

/// The short, stable reason code the spec reports: the decoded revert for CHAIN_FAILED
/// (`InsufficientAvailableBalance`), else a code of the failure.
fn reason_code_of(code: FailureCode, reason: &str) -> String {
    match code {
        FailureCode::ChainFailed => reason.split([':', ' ']).next().unwrap_or("EXECUTION_REVERTED").to_owned(),
        FailureCode::SigningRejected => "CUSTODY_REFUSED".to_owned(),
        FailureCode::RetryExhausted => "DEPENDENCY_UNAVAILABLE".to_owned(),
        FailureCode::Unprocessable => "UNPROCESSABLE".to_owned(),
        other => other.as_str().to_owned(),
    }
}

/// After a restart, sends the stored signed transactions of every unsettled operation again,
/// per sender in nonce order, before any worker signs anything new. A ledger whose pending
/// transactions did not survive the restart (the embedded ledger's mempool, a node that dropped
/// them) then counts those nonces again, so no stored signature's nonce is handed to another
/// transaction. Returns how many were sent; a transaction the ledger already has is no error.
pub async fn resend_unsettled(p: &Pipeline) -> Result<usize, JobError> {
    let unsettled = {
        let mut tx = p.store.read().await?;
        tx.operations().unsettled_signed(100_000).await?
    };
    let mut signed: Vec<SignedTransaction> = Vec::with_capacity(unsettled.len());
    for operation in &unsettled {
        match operation.signed_transaction.as_deref().map(decode_signed) {
            Some(Ok(transaction)) => signed.push(transaction),
            Some(Err(e)) => {
                // Its nonce waits for the gap sweep, which cannot send it either: say so loudly.
                tracing::error!(transaction_id = %operation.id, error = %e, "a stored signed transaction cannot be decoded");
            }
            None => {}
        }
    }
    signed.sort_by(|a, b| a.sender.cmp(&b.sender).then(a.nonce.cmp(&b.nonce)));
    let mut sent = 0;
    for transaction in &signed {
        match p.ledger.send(transaction).await {
            Ok(_) => sent += 1,
            Err(e) => tracing::warn!(hash = %transaction.hash, error = %e, "resending a stored transaction at start"),
        }
    }
    if sent > 0 {
        tracing::info!(sent, "sent the stored transactions of unsettled operations again");
    }
    Ok(sent)
}

// ---------------------------------------------------------------------------------------------
// operation.evaluate

pub struct Evaluate(pub Arc<Pipeline>);

/// Approved and signed by an evaluation batch that stopped before sending: no settle job exists
/// for it, so the evaluation job itself must see it settled.
fn signed_unsent(operation: &OperationRecord) -> bool {
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
            None => {
                // No ACTIVE policy governs any action yet: approved (the policies area plugs in
                // here, raising approval requests or refusing).
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
            // No ACTIVE policy governs any action yet: approved (the policies area plugs in
            // here, raising approval requests or refusing).
            match p.ledger_call_in(read.as_mut(), &mut lookups, &operation, now).await? {
                Ok((token, call)) => calls.push((job, operation, token, call)),
                Err(_) => rest.push(job),
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

// ---------------------------------------------------------------------------------------------
// operation.settle

pub struct Settle(pub Arc<Pipeline>);

/// For a break's detail: the hash of the operation's recorded signed transaction, which may
/// have reached the ledger even though the operation never got to SETTLING.
fn signed_hash_note(operation: &OperationRecord) -> String {
    match operation.signed_transaction.as_deref().map(decode_signed) {
        Some(Ok(signed)) => format!(" (signed transaction {:#x})", signed.hash),
        _ => String::new(),
    }
}

pub(crate) fn decode_signed(text: &str) -> Result<SignedTransaction, JobError> {
    serde_json::from_str::<StoredSignature>(text)
        .map_err(|e| JobError::Permanent(format!("stored signed transaction: {e}")))?
        .into_signed()
}

/// What recording a signature found.
enum Recorded {
    /// Ours is the operation's signature now: send it.
    Ours,
    /// Another was recorded first (its text): only that one may be sent.
    Other(String),
    /// The operation left PENDING_SETTLEMENT.
    Gone,
}

/// The signed transaction as the operation keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredSignature {
    hash: String,
    raw: String,
    sender: String,
    nonce: u64,
}

impl StoredSignature {
    fn of(t: &SignedTransaction) -> Self {
        Self {
            hash: format!("{:#x}", t.hash),
            raw: format!("0x{}", hex_of(&t.raw)),
            sender: format!("{:#x}", t.sender),
            nonce: t.nonce,
        }
    }

    fn into_signed(self) -> Result<SignedTransaction, JobError> {
        let bad = |what: &str| JobError::Permanent(format!("stored signed transaction: invalid {what}"));
        Ok(SignedTransaction {
            hash: self.hash.parse().map_err(|_| bad("hash"))?,
            raw: self.raw.parse().map_err(|_| bad("raw bytes"))?,
            sender: self.sender.parse().map_err(|_| bad("sender"))?,
            nonce: self.nonce,
        })
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

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
                            o.tx_hash = Some(format!("{hash:#x}"));
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

// ---------------------------------------------------------------------------------------------
// operation.track

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
            .as_deref()
            .and_then(|h| h.parse().ok())
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
            match operation.tx_hash.as_deref().and_then(|h| h.parse().ok()) {
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
        let settled: Vec<&OperationRecord> = outcomes
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

/// The position changes of the operations one transaction confirms, applied together at its
/// end in one order (organisation, then account): two transactions then never wait for each
/// other's position rows in opposite orders, which PostgreSQL would end as a deadlock.
#[derive(Default)]
struct PositionDeltas(std::collections::BTreeMap<(TenantId, AccountRef), (i64, i64)>);

impl PositionDeltas {
    fn add(&mut self, tenant: TenantId, account: &AccountRef, total: i64, held: i64) {
        let delta = self.0.entry((tenant, account.clone())).or_default();
        delta.0 += total;
        delta.1 += held;
    }

    async fn apply(self, tx: &mut dyn Tx, now: Timestamp) -> Result<(), JobError> {
        for ((tenant, account), (total, held)) in self.0 {
            tx.positions().apply(tenant, &account, total, held, now).await?;
        }
        Ok(())
    }
}

/// CONFIRMED: the operation, its effect on locks, its event and audit record; its effect on
/// positions goes into `positions`, for the caller to apply before committing.
#[allow(clippy::too_many_arguments)]
async fn confirm(
    p: &Pipeline,
    tx: &mut dyn Tx,
    positions: &mut PositionDeltas,
    tenant: TenantId,
    id: Uuid,
    block_number: u64,
    now: Timestamp,
) -> Result<(), JobError> {
    let row = tx.operations().get_for_update(tenant, id).await?;
    confirm_row(p, tx, positions, row, block_number, now).await
}

/// As `confirm`, on the operation's row as the caller read it for update.
async fn confirm_row(
    p: &Pipeline,
    tx: &mut dyn Tx,
    positions: &mut PositionDeltas,
    row: Option<OperationRecord>,
    block_number: u64,
    now: Timestamp,
) -> Result<(), JobError> {
    let Some(operation) = p
        .advance_row(
            tx,
            row,
            OperationState::Settling,
            |o| {
                o.state = OperationState::Confirmed;
                o.block_number = Some(block_number);
            },
            now,
        )
        .await?
    else {
        return Ok(());
    };
    let tenant = operation.tenant_id;
    let amount = operation.amount;
    let owner = &operation.account_ref;
    match operation.tx_type {
        TxType::Mint => positions.add(tenant, owner, amount, 0),
        TxType::Burn => positions.add(tenant, owner, -amount, 0),
        TxType::Transfer => {
            positions.add(tenant, owner, -amount, 0);
            if let Some(other) = &operation.counterparty_ref {
                positions.add(tenant, other, amount, 0);
            }
        }
        TxType::Lock => {
            positions.add(tenant, owner, 0, amount);
            let expires_at = lock_expiry(&operation, operation.created_at).ok().flatten();
            tx.locks()
                .insert(&LockRecord {
                    id: operation.id,
                    tenant_id: tenant,
                    account_ref: owner.clone(),
                    counterparty_ref: operation.counterparty_ref.clone(),
                    asset_id: operation.asset_id.clone(),
                    amount,
                    expires_at,
                    status: LockStatus::Active,
                    completed_by: None,
                    created_at: now,
                    updated_at: now,
                })
                .await?;
        }
        TxType::Release | TxType::Cancel => {
            let lock_id = operation.lock_id.unwrap_or(operation.id);
            if let Some(mut lock) = tx.locks().get_for_update(tenant, lock_id).await? {
                let payee = if operation.tx_type == TxType::Release { lock.counterparty_ref.clone() } else { None };
                match payee {
                    // Paid out: held and total leave the owner, the payee's total grows.
                    Some(payee) if payee != lock.account_ref => {
                        positions.add(tenant, &lock.account_ref, -lock.amount, -lock.amount);
                        positions.add(tenant, &payee, lock.amount, 0);
                    }
                    // Back to the owner's available balance.
                    _ => positions.add(tenant, &lock.account_ref, 0, -lock.amount),
                }
                // Only the sweep's own CANCEL (no Idempotency-Key: it never came through the
                // API) expires a lock; a client's `params.expired` is just a parameter.
                let expired = operation.submitted_by == LOCK_EXPIRY_SUBMITTER
                    && operation.idempotency_key.is_none()
                    && operation.params.get("expired").and_then(|v| v.as_bool()) == Some(true);
                lock.status = match operation.tx_type {
                    TxType::Release => LockStatus::Released,
                    _ if expired => LockStatus::Expired,
                    _ => LockStatus::Cancelled,
                };
                lock.completed_by = Some(operation.id);
                lock.updated_at = now;
                tx.locks().update(&lock).await?;
            }
        }
    }
    p.publish(tx, EventType::TransactionConfirmed, &operation, now).await?;
    p.audit(tx, &operation, AuditOutcome::Success, now).await
}

// ---------------------------------------------------------------------------------------------
// locks.expire: expired locks go back to their owners

/// The submitter recorded on the CANCELs the expiry sweep makes.
pub const LOCK_EXPIRY_SUBMITTER: &str = "system:lock-expiry";

/// Finds ACTIVE locks past their expiry that nothing completes yet and submits, for each, a
/// CANCEL (marked `params.expired`) through the pipeline; once it confirms, the lock is EXPIRED
/// and its funds are the owner's again.
pub struct ExpireLocks(pub Arc<Pipeline>);

#[async_trait]
impl JobHandler for ExpireLocks {
    fn kind(&self) -> &'static str {
        kinds::LOCKS_EXPIRE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let now = ctx.clock().now();
        let expired = {
            let mut tx = p.store.read().await?;
            tx.locks().expired(now, 200).await?
        };
        for candidate in expired {
            let mut tx = p.store.write().await?;
            let tenant = candidate.tenant_id;
            let Some(mut lock) = tx.locks().get_for_update(tenant, candidate.id).await? else { continue };
            let still_due = lock.status == LockStatus::Active
                && lock.completed_by.is_none()
                && lock.expires_at.is_some_and(|at| at <= now);
            // A lock of a switched-off contract waits for it to be ACTIVE again: a CANCEL now
            // would only fail UNPROCESSABLE, sweep after sweep.
            let contract_active = tx
                .contracts()
                .get(tenant, &lock.asset_id)
                .await?
                .is_some_and(|c| c.status == tokenops_domain::account::ContractStatus::Active);
            let Some(owner) =
                tx.accounts().get(tenant, &lock.account_ref).await?.filter(|_| still_due && contract_active)
            else {
                continue;
            };
            let cancel = OperationRecord {
                id: new_id(),
                tenant_id: tenant,
                tx_type: TxType::Cancel,
                asset_id: lock.asset_id.clone(),
                account_ref: lock.account_ref.clone(),
                customer_ref: owner.customer_ref,
                counterparty_ref: None,
                amount: lock.amount,
                params: serde_json::json!({ "lockId": lock.id, "expired": true }),
                lock_id: Some(lock.id),
                state: OperationState::Submitted,
                tx_hash: None,
                block_number: None,
                failure_code: None,
                reason_code: None,
                signed_transaction: None,
                submitted_by: LOCK_EXPIRY_SUBMITTER.to_owned(),
                idempotency_key: None,
                correlation_id: None,
                created_at: now,
                updated_at: now,
            };
            tx.operations().insert(&cancel).await?;
            lock.completed_by = Some(cancel.id);
            lock.updated_at = now;
            tx.locks().update(&lock).await?;
            tx.jobs().enqueue(&p.job(kinds::OPERATION_EVALUATE, tenant, cancel.id, now), now).await?;
            tx.commit().await?;
        }
        ctx.finish(p.store.write().await?).await
    }
}

// ---------------------------------------------------------------------------------------------
// positions.reconcile: the ledger against the service's own expectation

/// Compares every provisioned account's ledger balances (total and held) with its position,
/// the sum of its confirmed operations, and records a `BALANCE_MISMATCH` break for each
/// difference (once per distinct difference). Accounts with an operation between signing and
/// its receipt are skipped this round: the ledger may be ahead of the positions.
pub struct Reconcile(pub Arc<Pipeline>);

impl Reconcile {
    async fn in_flight(
        &self,
        tenant: TenantId,
        account: &tokenops_domain::account::AccountRef,
    ) -> Result<bool, JobError> {
        let mut tx = self.0.store.read().await?;
        for state in [OperationState::PendingSettlement, OperationState::Settling] {
            let filter = tokenops_store::OperationFilter {
                state: Some(state),
                account_ref: Some(account.clone()),
                tx_type: None,
            };
            let page = tx
                .operations()
                .list(tenant, &filter, tokenops_domain::paging::PageRequest { page: 0, size: 1 })
                .await?;
            if page.total > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

#[async_trait]
impl JobHandler for Reconcile {
    fn kind(&self) -> &'static str {
        kinds::POSITIONS_RECONCILE
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.0;
        let mut after = None;
        loop {
            let batch = {
                let mut tx = p.store.read().await?;
                tx.accounts().provisioned_after(after, 200).await?
            };
            let Some(last) = batch.last() else { break };
            after = Some(last.id);
            for account in batch {
                let tenant = account.tenant_id;
                if self.in_flight(tenant, &account.account_ref).await? {
                    continue;
                }
                let (contract, expected) = {
                    let mut tx = p.store.read().await?;
                    (
                        tx.contracts().get(tenant, &account.asset_id).await?,
                        tx.positions().get(tenant, &account.account_ref).await?,
                    )
                };
                let (Ok(token), Ok(wallet)) = (
                    parse_address(contract.as_ref().and_then(|c| c.address.as_deref()), "the contract"),
                    parse_address(account.wallet_address.as_deref(), "the account"),
                ) else {
                    continue;
                };
                let balances = match p.ledger.balances(token, wallet).await {
                    Ok(balances) => balances,
                    Err(e) => {
                        tracing::warn!(account = %account.account_ref, error = %e, "reconciliation could not read a balance");
                        continue;
                    }
                };
                let as_i64 = |v: U256| i64::try_from(v).unwrap_or(i64::MAX);
                let (total, held) = (as_i64(balances.total), as_i64(balances.held));
                if total == expected.total && held == expected.held {
                    continue;
                }
                let detail = format!(
                    "ledger total {total}, held {held} at block {}; expected total {}, held {} (minor units); difference total {}, held {}",
                    balances.block_number,
                    expected.total,
                    expected.held,
                    total.saturating_sub(expected.total),
                    held.saturating_sub(expected.held)
                );
                let now = ctx.clock().now();
                let mut tx = p.store.write().await?;
                let filter = tokenops_store::BreakFilter {
                    reason: Some(BreakReason::BalanceMismatch),
                    account_ref: Some(account.account_ref.clone()),
                    from: None,
                    to: None,
                };
                let latest = tx
                    .breaks()
                    .list(tenant, &filter, tokenops_domain::paging::PageRequest { page: 0, size: 1 })
                    .await?;
                let same = latest.items.first().is_some_and(|b| same_difference(&b.detail, &detail));
                if !same {
                    tx.breaks()
                        .insert(&BreakRecord {
                            id: new_id(),
                            tenant_id: tenant,
                            transaction_id: None,
                            account_ref: account.account_ref.clone(),
                            asset_id: account.asset_id.clone(),
                            reason: BreakReason::BalanceMismatch,
                            detail,
                            detected_at: now,
                        })
                        .await?;
                    tx.commit().await?;
                }
            }
        }
        ctx.finish(p.store.write().await?).await
    }
}

/// Two mismatch details describe the same difference when their differences agree: a drift
/// that persists while balances move is one break, not one per movement.
fn same_difference(a: &str, b: &str) -> bool {
    let difference = |s: &str| s.split("; difference ").nth(1).map(str::to_owned);
    difference(a).is_some() && difference(a) == difference(b)
}

// ---------------------------------------------------------------------------------------------
// operations.resume: the safety net under the pipeline

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
