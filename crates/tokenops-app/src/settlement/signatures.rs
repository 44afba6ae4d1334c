//! Signed transactions: recording them on their operations before anything is sent (and
//! giving back the nonces of those not recorded), signing and sending a batch, the form an
//! operation keeps its signature in, and sending the stored ones again at start.

use std::sync::Arc;
use tokenops_custody::{Address, CustodyError};
use tokenops_domain::operation::Operation;
use tokenops_domain::operation::{FailureCode, OperationState};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_ledger::{Ledger, LedgerCall, LedgerError, SignedTransaction};
use tokenops_store::{Job, Tx};
use uuid::Uuid;

use super::approval::Approval;
use super::evaluate::signed_unsent;
use super::{Lookups, Pipeline, Sorted, lock_rows};
use crate::jobs::{BatchContext, BatchFinished, JobError, kinds};

/// How long an operation whose wallet another node signs for waits before its settle step is
/// claimed again (by either node: the one holding the wallet, or, once its lease lapsed, any).
const ELSEWHERE_DELAY_MS: i64 = 200;

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

impl Pipeline {
    /// Records each signed transaction on its operation (one commit for all), moving it from
    /// `from` (SUBMITTED, when evaluation goes straight on, or PENDING_SETTLEMENT) to
    /// PENDING_SETTLEMENT, unless a signature is recorded already: from then on only the
    /// recorded bytes are ever sent.
    /// A signature that was not recorded (another is, or the operation moved on) has its nonce
    /// given back. When the commit fails, the store is read again and the nonces of the
    /// signatures it does not hold are given back (a failed sync may follow a commit that
    /// landed: those signatures are recorded and keep their nonces).
    pub(super) async fn record_signatures(
        &self,
        signed: &[(TenantId, Uuid, &SignedTransaction)],
        from: OperationState,
        now: Timestamp,
    ) -> Result<Vec<Recorded>, JobError> {
        let ours: Vec<String> =
            signed.iter().map(|(_, _, transaction)| encode_signed(transaction)).collect::<Result<_, _>>()?;
        let recorded = async {
            let mut tx = self.store.write().await?;
            let ids: Vec<(TenantId, Uuid)> = signed.iter().map(|(tenant, id, _)| (*tenant, *id)).collect();
            let rows = tx.operations().get_many(&ids, true).await?;
            let mut outcomes = Vec::with_capacity(signed.len());
            for (ours, row) in ours.iter().zip(rows) {
                // Signed already, by another claim of this job or another job: only those bytes
                // may be sent, whichever state this run expected.
                if let Some(kept) = row
                    .as_ref()
                    .filter(|o| o.state == OperationState::PendingSettlement)
                    .and_then(|o| o.signed_transaction.clone())
                {
                    outcomes.push(if kept == *ours { Recorded::Ours } else { Recorded::Other(kept) });
                    continue;
                }
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

    /// Settles the operations of a batch (step 2, also run by step 1 for the approved): signs
    /// each of `work.calls`, records every signature in one commit (moving each operation from
    /// `from` to PENDING_SETTLEMENT), sends what was recorded and `work.signed`, and lands every
    /// outcome in the commit that finishes the batch: the sent to SETTLING with their track
    /// jobs, the failed FAILED. A job whose try may succeed later fails alone with `Retry`.
    pub(super) async fn sign_and_send(
        &self,
        work: Work,
        from: OperationState,
        sorted: Sorted,
        ctx: &BatchContext,
    ) -> Result<BatchFinished, JobError> {
        let p = self;
        let Sorted { idle, mut rest, mut failed, .. } = sorted;
        let mut done: Vec<Uuid> = idle.iter().map(|job| job.id).collect();
        let mut endings: Vec<(Job, Operation, Ending)> = Vec::with_capacity(work.calls.len() + work.signed.len());
        for (job, operation, reason) in work.unprocessable {
            let from = operation.state;
            endings.push((job, operation, Ending::Fail { from, code: FailureCode::Unprocessable, reason }));
        }
        for (job, operation, code, reason) in work.refused {
            let from = operation.state;
            endings.push((job, operation, Ending::Fail { from, code, reason }));
        }
        for (job, operation, approval) in work.held {
            endings.push((job, operation, Ending::Hold(approval)));
        }
        let mut signed = Vec::with_capacity(work.calls.len());
        // Should the batch be stopped (its lease lost) before the signatures are recorded, their
        // nonces are given back rather than left as gaps.
        let mut unsent = Unrecorded { ledger: p.ledger.clone(), signed: Vec::new() };
        for (job, operation, token, call) in work.calls {
            match p.ledger.sign(token, &call, p.custody.as_ref()).await {
                Ok(transaction) => {
                    unsent.signed.push(transaction.clone());
                    signed.push((job, operation, transaction));
                }
                // Approved, not signed: the settle step signs it, with its own retries.
                Err(_) if from == OperationState::Submitted => endings.push((job, operation, Ending::Approve)),
                // Another node signs for the wallet: no failure, so no attempt spent.
                Err(LedgerError::Elsewhere { .. }) => endings.push((job, operation, Ending::Later)),
                Err(LedgerError::Signing(CustodyError::Refused { reason, .. })) => {
                    let reason = format!("custody refused to sign: {reason}");
                    endings.push((job, operation, Ending::Fail { from, code: FailureCode::SigningRejected, reason }));
                }
                Err(e) if e.is_temporary() && !last_attempt(&job) => failed.push((job, JobError::retry(e))),
                Err(e) => {
                    let code = if e.is_temporary() { FailureCode::RetryExhausted } else { FailureCode::ChainFailed };
                    endings.push((job, operation, Ending::Fail { from, code, reason: e.to_string() }));
                }
            }
        }
        let records: Vec<(TenantId, Uuid, &SignedTransaction)> =
            signed.iter().map(|(_, o, t)| (o.tenant_id, o.id, t)).collect();
        // From here `record_signatures` settles each nonce's fate itself. (Stopped while its
        // commit is in flight, the outcome is unknown and the nonces are kept.)
        unsent.disarm();
        let recorded = if records.is_empty() {
            Ok(Vec::new())
        } else {
            p.record_signatures(&records, from, ctx.clock().now()).await
        };
        let recorded = match recorded {
            Ok(recorded) => recorded,
            // An evaluation whose signatures could not be recorded still lands its approvals: a
            // settle job signs them again, with its own retries.
            Err(_) if from == OperationState::Submitted => records.iter().map(|_| Recorded::Gone).collect(),
            Err(e) => return Err(e),
        };
        let mut to_send = work.signed;
        for ((job, operation, transaction), recorded) in signed.into_iter().zip(recorded) {
            match recorded {
                // Not recorded: approved, for a settle job, if still SUBMITTED when it commits.
                Recorded::Gone if from == OperationState::Submitted => endings.push((job, operation, Ending::Approve)),
                Recorded::Ours => to_send.push((job, operation, transaction)),
                // Only the recorded bytes are ever sent.
                Recorded::Other(text) => match decode_signed(&text) {
                    Ok(theirs) => to_send.push((job, operation, theirs)),
                    Err(error) => failed.push((job, error)),
                },
                Recorded::Gone => done.push(job.id),
            }
        }
        for (job, operation, transaction) in to_send {
            match p.ledger.send(&transaction).await.inspect_err(crate::signals::ledger_send_failed) {
                Ok(hash) => endings.push((job, operation, Ending::Sent(crate::chain::domain_hash(hash)))),
                Err(LedgerError::Superseded { reason }) => {
                    endings.push((job, operation, Ending::SignAnew { superseded: transaction.hash, reason }));
                }
                Err(e) if e.is_temporary() && !last_attempt(&job) => failed.push((job, JobError::retry(e))),
                Err(e) => {
                    // The outcome may be unknown: the break names the signed transaction's hash.
                    let code = if e.is_temporary() { FailureCode::RetryExhausted } else { FailureCode::ChainFailed };
                    let reason = format!("{e} (signed transaction {:#x})", transaction.hash);
                    let from = OperationState::PendingSettlement;
                    endings.push((job, operation, Ending::Fail { from, code, reason }));
                }
            }
        }
        if done.is_empty() && endings.is_empty() {
            return Ok(ctx.end(rest, failed));
        }
        let now = ctx.clock().now();
        // A transaction just sent is in no block yet: the first look waits one poll.
        let first_poll = now.plus_millis(p.settings.receipt_poll_ms);
        let mut tx = p.store.write().await?;
        let operations: Vec<&Operation> = endings.iter().map(|(_, o, _)| o).collect();
        let rows = lock_rows(tx.as_mut(), &operations).await?;
        let mut next = Vec::with_capacity(rows.len());
        for (row, (job, _, ending)) in rows.into_iter().zip(endings) {
            match ending {
                // Signed meanwhile (by an earlier claim of this very evaluation, or a commit that
                // landed though it reported a failure): this job, not a settle job, owes it its
                // settlement, which it takes up when it runs alone.
                Ending::Approve | Ending::Hold(_) | Ending::Fail { from: OperationState::Submitted, .. }
                    if row.as_ref().is_some_and(signed_unsent) =>
                {
                    rest.push(job);
                    continue;
                }
                Ending::Sent(hash) => {
                    let change = |o: &mut Operation| {
                        o.state = OperationState::Settling;
                        o.tx_hash = Some(hash);
                    };
                    let from = OperationState::PendingSettlement;
                    if let Some(o) = p.advance_row(tx.as_mut(), row, from, change, now).await? {
                        next.push(p.job_after(&job, kinds::OPERATION_TRACK, o.tenant_id, o.id, first_poll));
                    }
                }
                Ending::Approve => {
                    let change = |o: &mut Operation| o.state = OperationState::PendingSettlement;
                    if let Some(o) = p.advance_row(tx.as_mut(), row, OperationState::Submitted, change, now).await? {
                        next.push(p.job_after(&job, kinds::OPERATION_SETTLE, o.tenant_id, o.id, now));
                    }
                }
                Ending::SignAnew { superseded, reason } => {
                    let from = OperationState::PendingSettlement;
                    if let Some(o) = p.sign_anew(tx.as_mut(), row, from, superseded, &reason, now).await? {
                        next.push(p.job_after(&job, kinds::OPERATION_SETTLE, o.tenant_id, o.id, now));
                    }
                }
                Ending::Later => {
                    metrics::counter!("tokenops_settle_deferred_elsewhere_total").increment(1);
                    if let Some(o) = row.filter(|o| o.state == OperationState::PendingSettlement) {
                        let later = now.plus_millis(ELSEWHERE_DELAY_MS);
                        next.push(p.job_after(&job, kinds::OPERATION_SETTLE, o.tenant_id, o.id, later));
                    }
                }
                Ending::Hold(approval) => p.hold_row(tx.as_mut(), row, approval, now).await?,
                Ending::Fail { from, code, reason } => {
                    p.fail_row(tx.as_mut(), row, from, code, reason, None, now).await?;
                }
            }
            done.push(job.id);
        }
        tx.jobs().enqueue_all(&next, now).await?;
        ctx.finish(tx, done, rest, failed).await
    }
}

impl Pipeline {
    /// The settle work of a batch's due operations (read through `read`): the recorded bytes of
    /// those signed already, the ledger call of the others, or why one cannot be processed. A
    /// stored signature that cannot be decoded fails its job for good.
    pub(super) async fn plan(&self, read: &mut dyn Tx, sorted: &mut Sorted, now: Timestamp) -> Result<Work, JobError> {
        let mut lookups = Lookups::default();
        let mut work = Work::default();
        for (job, operation) in std::mem::take(&mut sorted.due) {
            if let Some(text) = operation.signed_transaction.as_deref() {
                match decode_signed(text) {
                    Ok(signed) => work.signed.push((job, operation, signed)),
                    Err(error) => sorted.failed.push((job, error)),
                }
                continue;
            }
            // What settlement needs must still hold: ACTIVE accounts and contract, a valid expiry.
            match self.ledger_call_in(read, &mut lookups, &operation, now).await? {
                Ok((token, call)) => work.calls.push((job, operation, token, call)),
                Err(reason) => work.unprocessable.push((job, operation, reason)),
            }
        }
        Ok(work)
    }
}

/// What the settle work of a batch starts from.
#[derive(Default)]
pub(super) struct Work {
    /// To sign and send: each operation's ledger call, with the token's address.
    pub calls: Vec<(Job, Operation, Address, LedgerCall)>,
    /// Signed already: the recorded bytes, sent again.
    pub signed: Vec<(Job, Operation, SignedTransaction)>,
    /// Cannot be processed (why): FAILED `UNPROCESSABLE` from the state they are in.
    pub unprocessable: Vec<(Job, Operation, String)>,
    /// Ended by the policy step (`reasonCode: why`): FAILED `VALIDATION_REJECTED` when refused,
    /// `POLICY_TIMEOUT` when it could not decide in time.
    pub refused: Vec<(Job, Operation, FailureCode, String)>,
    /// Waiting for people: AWAITING_APPROVAL with an approval request.
    pub held: Vec<(Job, Operation, Approval)>,
}

/// How an operation's settle work ends in the batch's last commit.
enum Ending {
    /// Sent (its hash): SETTLING, and tracked.
    Sent(tokenops_domain::chain::TxHash),
    /// Approved but not signed (an evaluation): PENDING_SETTLEMENT, for a settle job.
    Approve,
    /// Its recorded bytes (this hash) can never be included: signed anew by a settle job.
    SignAnew {
        superseded: tokenops_ledger::TxHash,
        reason: String,
    },
    /// Not signed because another node signs for its wallet now: a settle job again, shortly,
    /// for whichever node holds the wallet then.
    Later,
    /// Held by the policies: AWAITING_APPROVAL (or refused, when its approvers cannot be
    /// resolved).
    Hold(Approval),
    Fail {
        from: OperationState,
        code: FailureCode,
        reason: String,
    },
}

impl Pipeline {
    /// Drops the operation's recorded signature when it is still the `superseded` one (another
    /// transaction is included with its nonce, so those bytes can never be), moving it from
    /// `from` (PENDING_SETTLEMENT, or SETTLING when the ledger had taken the bytes and dropped
    /// them) back to PENDING_SETTLEMENT without a txHash, for a settle job to sign it anew.
    /// Nothing of the operation reached the ledger, so signing again cannot move value twice;
    /// failing it instead would fail an operation for what only an outage did.
    pub(super) async fn sign_anew(
        &self,
        tx: &mut dyn Tx,
        row: Option<Operation>,
        from: OperationState,
        superseded: tokenops_ledger::TxHash,
        reason: &str,
        now: Timestamp,
    ) -> Result<Option<Operation>, JobError> {
        let holds_superseded = |o: &Operation| {
            o.signed_transaction.as_deref().map(decode_signed).is_some_and(|t| t.is_ok_and(|t| t.hash == superseded))
        };
        let Some(row) = row.filter(holds_superseded) else { return Ok(None) };
        tracing::warn!(transaction_id = %row.id, hash = %superseded, reason, "a recorded signature lost its nonce to another transaction; signing the operation anew");
        metrics::counter!("tokenops_signatures_superseded_total").increment(1);
        let change = |o: &mut Operation| {
            o.state = OperationState::PendingSettlement;
            o.signed_transaction = None;
            o.tx_hash = None;
        };
        self.advance_row(tx, Some(row), from, change, now).await
    }
}

/// Whether a failure of this run is the job's last: then it ends the operation, not a retry.
fn last_attempt(job: &Job) -> bool {
    job.attempts >= job.max_attempts
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

/// For a break's detail: the hash of the operation's recorded signed transaction, which may
/// have reached the ledger even though the operation never got to SETTLING.
pub(super) fn signed_hash_note(operation: &Operation) -> String {
    match operation.signed_transaction.as_deref().map(decode_signed) {
        Some(Ok(signed)) => format!(" (signed transaction {:#x})", signed.hash),
        _ => String::new(),
    }
}

/// The form an operation keeps its signed transaction in (`Operation::signed_transaction`).
pub fn encode_signed(transaction: &SignedTransaction) -> Result<String, JobError> {
    serde_json::to_string(&StoredSignature::of(transaction)).map_err(JobError::retry)
}

pub(crate) fn decode_signed(text: &str) -> Result<SignedTransaction, JobError> {
    serde_json::from_str::<StoredSignature>(text)
        .map_err(|e| JobError::Permanent(format!("stored signed transaction: {e}")))?
        .into_signed()
}

/// What recording a signature found.
pub(super) enum Recorded {
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
