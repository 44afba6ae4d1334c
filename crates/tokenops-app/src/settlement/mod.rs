//! The settlement pipeline of an accepted operation, as durable jobs:
//!
//! 1. `operation.evaluate`: the checks that decide whether the operation can be processed at
//!    all (the accounts and the contract still ACTIVE, a LOCK's expiry valid and in the future:
//!    else `UNPROCESSABLE`), then the policy step (the ACTIVE policies of the operation's
//!    action; none means approved): approved → PENDING_SETTLEMENT and `operation.settle`;
//!    refused → FAILED `VALIDATION_REJECTED`; approvers needed → AWAITING_APPROVAL with a
//!    POLICY approval request, whose resolution (`PolicyResolution`) moves it on.
//! 2. `operation.settle`: custody signs the ledger transaction (a refusal is
//!    `SIGNING_REJECTED`, nothing reaches the ledger); the signed bytes are recorded before
//!    they are sent, so an unknown outcome is only ever resolved by sending **the same bytes**
//!    again; temporary failures retry with backoff, then `RETRY_EXHAUSTED` (with a break);
//!    → SETTLING with `txHash` and `operation.track`.
//! 3. `operation.track`: the receipt → CONFIRMED with `blockNumber` (positions, locks and
//!    `transaction.confirmed` move with it), or FAILED `CHAIN_FAILED` with the decoded revert
//!    as `reasonCode` and a break; a ledger that cannot be reached is waited for (SETTLING).
//!
//! States only move forward (`OperationState::may_become`); a job that finds its operation
//! elsewhere than it expects does nothing.
//!
//! Every step has one code path, the batch (`JobHandler::run_batch`; one job alone is a batch
//! of one), over one skeleton:
//!
//! 1. sort the claimed jobs by their operations, read in one go (`sort_batch`): due, moved on
//!    (done with no effect), a second job for one operation (left to run alone), unreadable
//!    (failed);
//! 2. decide per row outside any transaction (the policy, the ledger call, signing, sending,
//!    receipts), each job to its outcome or to a failure of its own (`JobError::Retry` is
//!    retried with backoff by the runner, touching no other job of the batch);
//! 3. lock the rows of the outcomes in id order (`lock_rows`) and move each from the state it
//!    was decided in (`Pipeline::advance_row`, `fail_row`, `confirm_row`: a row that moved on
//!    meanwhile is left alone);
//! 4. in the same commit, enqueue the next steps' jobs and finish the batch's done jobs
//!    (`BatchContext::finish`).
//!
//! Up to `BATCH_LIMIT` operations take one read, one ledger round and one commit (two for
//! signing: the signatures are committed before anything is sent). Evaluation goes straight on
//! into step 2's work for the approved (approval and signature in one commit), so that no
//! `operation.settle` job is needed for them (only for one custody did not sign, or whose
//! signature could not be recorded); an evaluation job that finds its operation signed but
//! unsent sends it.
//!
//! The files follow the pipeline: `evaluate` (step 1, with the policy decision `decide`, and
//! `approval` for the operations it holds for people and their requests' resolution),
//! `settle` (step 2), `track` (step 3) with `confirm` (what CONFIRMED moves with it); shared by
//! them: `signatures` (the settle work of evaluate and settle, recording, sending and the
//! stored form of signed transactions) and `outcome` (FAILED, events and audit records); the
//! pipeline itself, its batch sorting and the ledger call of an operation are here. The sweeps beside the pipeline live in modules of their
//! own: `lock_expiry`, `reconciliation`, `resume` and `nonce_gaps`.

mod approval;
mod confirm;
mod evaluate;
mod outcome;
mod settle;
mod signatures;
mod track;

/// The resource type of the approval requests the policies raise for operations.
pub const POLICY_RESOURCE_TYPE: &str = "transaction";

pub use approval::PolicyResolution;
pub(crate) use approval::resolve_approvers;
pub use evaluate::Evaluate;
pub use settle::Settle;
pub(crate) use signatures::decode_signed;
pub use signatures::{encode_signed, resend_unsettled};
pub use track::Track;

use std::sync::Arc;
use tokenops_custody::{Address, B256, Custody};
use tokenops_domain::account::{Account, AccountRef, AccountStatus};
use tokenops_domain::asset::AssetId;
use tokenops_domain::contract::Contract;
use tokenops_domain::operation::{Operation, OperationState, TxType};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_ledger::{Ledger, LedgerCall, U256};
use tokenops_store::{Job, NewJob, Store, Tx};
use uuid::Uuid;

use crate::jobs::JobError;
use crate::write::AuditAction;

/// The most jobs of one pipeline step run together: one read, one ledger round and one commit
/// for all of them.
const BATCH_LIMIT: usize = 128;

pub const SETTLED: AuditAction = AuditAction {
    name: "transaction.settle",
    category: "TRANSACTIONS",
    resource_type: "transaction",
    per_caller: false,
};

/// Tunables of the pipeline.
#[derive(Debug, Clone, Copy)]
pub struct SettlementSettings {
    /// How long `operation.track` waits between receipt polls.
    pub receipt_poll_ms: i64,
    pub job_max_attempts: u32,
    /// How long after submission an undecidable policy step may keep retrying.
    pub policy_decision_timeout_ms: i64,
}

/// What every pipeline job needs.
pub struct Pipeline {
    pub store: Arc<dyn Store>,
    pub custody: Arc<dyn Custody>,
    pub ledger: Arc<dyn Ledger>,
    pub settings: SettlementSettings,
    /// For the requests the policy step raises.
    pub approvals: crate::approvals::ApprovalSettings,
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
/// the step has work on (`wanted`, with it), those whose operation has moved on or is gone
/// (finished with no effect), those to run alone (a second job for one operation), and those
/// that failed (no readable target).
struct Sorted {
    due: Vec<(Job, Operation)>,
    idle: Vec<Job>,
    rest: Vec<Job>,
    failed: Vec<(Job, JobError)>,
}

async fn sort_batch(
    tx: &mut dyn Tx,
    jobs: Vec<Job>,
    wanted: impl Fn(&Operation) -> bool + Send,
) -> Result<Sorted, JobError> {
    let mut sorted =
        Sorted { due: Vec::with_capacity(jobs.len()), idle: Vec::new(), rest: Vec::new(), failed: Vec::new() };
    let mut targeted = Vec::with_capacity(jobs.len());
    let mut seen = std::collections::HashSet::with_capacity(jobs.len());
    for job in jobs {
        match target(&job) {
            // A second job for one operation (a stale claim beside a fresh one) runs alone.
            Ok(target) if seen.insert(target) => targeted.push((job, target)),
            Ok(_) => sorted.rest.push(job),
            Err(error) => sorted.failed.push((job, error)),
        }
    }
    let ids: Vec<(TenantId, Uuid)> = targeted.iter().map(|(_, target)| *target).collect();
    let found = tx.operations().get_many(&ids, false).await?;
    for ((job, _), operation) in targeted.into_iter().zip(found) {
        match operation {
            Some(operation) if wanted(&operation) => sorted.due.push((job, operation)),
            _ => sorted.idle.push(job),
        }
    }
    Ok(sorted)
}

/// Reads the operations for update in one go (where the store can, in id order), for
/// `advance_row`; none at all costs no round trip.
async fn lock_rows(tx: &mut dyn Tx, operations: &[&Operation]) -> Result<Vec<Option<Operation>>, JobError> {
    if operations.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<(TenantId, Uuid)> = operations.iter().map(|o| (o.tenant_id, o.id)).collect();
    Ok(tx.operations().get_many(&ids, true).await?)
}

/// The contracts and accounts the operations of one run name, each read once: a batch's
/// operations mostly name the same few.
#[derive(Default)]
struct Lookups {
    contracts: std::collections::HashMap<(TenantId, AssetId), Option<Contract>>,
    accounts: std::collections::HashMap<(TenantId, AccountRef), Option<Account>>,
}

impl Lookups {
    async fn contract(
        &mut self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        asset: AssetId,
    ) -> Result<Option<Contract>, JobError> {
        let key = (tenant, asset);
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
    ) -> Result<Option<Account>, JobError> {
        let key = (tenant, reference.clone());
        if let Some(found) = self.accounts.get(&key) {
            return Ok(found.clone());
        }
        let found = tx.accounts().get(tenant, reference).await?;
        self.accounts.insert(key, found.clone());
        Ok(found)
    }
}

/// The ledger's id of a lock's hold: the lock id's 16 bytes, right-aligned.
pub fn hold_id(lock_id: Uuid) -> B256 {
    let mut bytes = [0u8; 32];
    bytes[16..].copy_from_slice(lock_id.as_bytes());
    B256::from(bytes)
}

pub(crate) fn parse_address(address: Option<tokenops_domain::chain::Address>, what: &str) -> Result<Address, String> {
    address.map(crate::chain::ledger_address).ok_or_else(|| format!("{what} has no address"))
}

impl Pipeline {
    /// The next step's job for an operation whose job `parent` is running in a batch: it carries
    /// the parent's trace context.
    pub(crate) fn job_after(&self, parent: &Job, kind: &str, tenant: TenantId, id: Uuid, run_at: Timestamp) -> NewJob {
        let mut job = self.job(kind, tenant, id, run_at);
        job.payload = crate::trace::stamp_with(job.payload, crate::trace::of_job(parent).map(|c| c.child()));
        job
    }

    pub(crate) fn job(&self, kind: &str, tenant: TenantId, id: Uuid, run_at: Timestamp) -> NewJob {
        NewJob {
            kind: kind.to_owned(),
            tenant_id: Some(tenant),
            payload: crate::trace::stamp(serde_json::json!({ "transactionId": id })),
            run_at,
            max_attempts: self.settings.job_max_attempts,
            dedupe_key: None,
        }
    }

    /// Moves the operation (its row as the caller read it for update) from `from` by `change`;
    /// `None` when the operation is gone or no longer in `from`.
    async fn advance_row(
        &self,
        tx: &mut dyn Tx,
        row: Option<Operation>,
        from: OperationState,
        change: impl FnOnce(&mut Operation),
        now: Timestamp,
    ) -> Result<Option<Operation>, JobError> {
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
        if operation.state != from {
            crate::signals::operation_entered(&operation, now);
        }
        Ok(Some(operation))
    }

    /// The ledger call of an operation, with the token's address, reading through `tx` what
    /// `lookups` does not hold yet. `Err` is a reason the operation cannot be processed
    /// (UNPROCESSABLE).
    async fn ledger_call_in(
        &self,
        tx: &mut dyn Tx,
        lookups: &mut Lookups,
        operation: &Operation,
        now: Timestamp,
    ) -> Result<Result<(Address, LedgerCall), String>, JobError> {
        let tenant = operation.tenant_id;
        let Some(contract) = lookups
            .contract(tx, tenant, operation.asset_id)
            .await?
            .filter(|c| c.status == tokenops_domain::contract::ContractStatus::Active)
        else {
            return Ok(Err(format!("{} has no ACTIVE contract", operation.asset_id)));
        };
        // Completing a lock is allowed on an INACTIVE account: the funds are already committed.
        let needs_active = !operation.tx_type.completes_lock();
        let token = match parse_address(contract.address, "the contract") {
            Ok(token) => token,
            Err(reason) => return Ok(Err(reason)),
        };
        let wallet_of = |account: Option<Account>, what: &str| -> Result<Address, String> {
            let account = account.ok_or_else(|| format!("{what} no longer exists"))?;
            if needs_active && account.status != AccountStatus::Active {
                return Err(format!("{what} {} is not ACTIVE", account.account_ref));
            }
            parse_address(account.wallet_address, what)
        };
        let owner = wallet_of(lookups.account(tx, tenant, &operation.account_ref).await?, "the account");
        let counterparty = match &operation.counterparty_ref {
            Some(reference) => Some(wallet_of(lookups.account(tx, tenant, reference).await?, "the counterparty")),
            None => None,
        };
        let amount = U256::from(operation.amount.minor_units());
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
                    expires_at: lock_expiry(operation, now)?.map(ledger_seconds),
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

/// An expiry in the ledger's whole seconds, rounded up: the hold then lives at least until the
/// instant the client gave (rounded down, a hold expiring within the block's second would revert
/// `HoldExpired` at once, and a RELEASE would fail up to a second before `expiresAt`).
fn ledger_seconds(at: Timestamp) -> u64 {
    u64::try_from(at.as_micros()).map_or(0, |micros| micros.div_ceil(1_000_000))
}

/// A LOCK's `params.expiresAt`: absent, or an ISO 8601 instant after `now`.
fn lock_expiry(operation: &Operation, now: Timestamp) -> Result<Option<Timestamp>, String> {
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
