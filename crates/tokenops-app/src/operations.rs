//! Token operations: submission (the spec's rules 1–6, then 202 with the operation; balances
//! are not checked here), reads and lists, locks and breaks as integrators read them. What
//! happens after acceptance is `settlement`.

use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::account::{Account, AccountRef, AccountStatus};
use tokenops_domain::asset::{Amount, AssetId, format_minor_units};
use tokenops_domain::contract::ContractStatus;
use tokenops_domain::operation::{
    Break, BreakFilter, BreakReason, Counterparty, FailureCode, Lock, LockStatus, NewOperation, Operation,
    OperationFilter, OperationState, TxType,
};
use tokenops_domain::paging::{KeysetRequest, Page, PageRequest};
use tokenops_domain::permission::Permission;
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::Store;
use uuid::Uuid;

use crate::context::Caller;
use crate::error::{AppResult, Code, Error};
use crate::jobs::kinds;
use crate::write::{AuditAction, Write};

pub const SUBMIT: AuditAction = AuditAction {
    name: "transaction.submit",
    category: "TRANSACTIONS",
    resource_type: "transaction",
    per_caller: false,
};

/// A token operation as the API returns it, and as `transaction.*` events carry it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationOut {
    pub transaction_id: Uuid,
    pub tx_type: TxType,
    pub asset_id: String,
    pub account_ref: String,
    pub customer_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterparty_ref: Option<String>,
    /// Decimal string in the asset's minor unit.
    #[schema(example = "125.00")]
    pub amount: String,
    #[schema(value_type = Object)]
    pub params: serde_json::Value,
    pub state: OperationState,
    /// Absent until the operation reached the ledger.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tx_hash: Option<String>,
    /// Present with txHash once the ledger transaction was included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_number: Option<u64>,
    /// Absent (not null) while in flight and when confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(schema_with = failure_code_schema)]
    pub failure_code: Option<&'static str>,
    /// The more specific reason: EXECUTION_REVERTED when the ledger reverted the transaction,
    /// CUSTODY_REFUSED, DEPENDENCY_UNAVAILABLE, a policy step's code, or a submission error's.
    /// Absent when none was reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_code: Option<String>,
    /// With reasonCode EXECUTION_REVERTED: the ledger's decoded revert (the token contract's
    /// custom error, such as `InsufficientAvailableBalance`, or a revert string). Absent
    /// otherwise. An addition to the spec's fields.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revert_reason: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// `failureCode` as an open enum, as the spec has it: a string whose values today are listed, not
/// an `enum` a client would refuse a new code by. The list is `FailureCode::ALL`, so that it
/// cannot drift from the codes the service sends.
fn failure_code_schema() -> utoipa::openapi::schema::Object {
    let today: Vec<&str> = FailureCode::ALL.iter().map(|c| c.as_str()).collect();
    utoipa::openapi::schema::ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::Type::String)
        .description(Some(format!(
            "Why the operation failed: one of {} today; on a CANCELLED operation (its approval request cancelled), {}. \
             An open enum: clients must accept other values. Absent (not null) while in flight and when confirmed.",
            today.join(", "),
            CANCELLED_FAILURE_CODE
        )))
        .build()
}

/// What a CANCELLED operation reads as its `failureCode`: the spec lets a cancelled operation
/// carry free text there, and one way leads to CANCELLED, its approval request cancelled.
pub const CANCELLED_FAILURE_CODE: &str = "APPROVAL_CANCELLED";

fn failure_code_of(o: &Operation) -> Option<&'static str> {
    match o.state {
        OperationState::Cancelled => Some(CANCELLED_FAILURE_CODE),
        _ => o.failure_code.map(FailureCode::as_str),
    }
}

fn amount_text(amount: Amount, asset: AssetId) -> String {
    format_minor_units(amount.minor_units(), asset.minor_unit())
}

impl From<&Operation> for OperationOut {
    fn from(o: &Operation) -> Self {
        Self {
            transaction_id: o.id,
            tx_type: o.tx_type,
            asset_id: o.asset_id.to_string(),
            account_ref: o.account_ref.to_string(),
            customer_ref: o.customer_ref.to_string(),
            // The spec's field: "Only for TRANSFER or LOCK". A RELEASE keeps its lock's
            // counterparty (it pays it, and the counterpartyRef filter finds it) but does not show it.
            counterparty_ref: o
                .counterparty_ref
                .as_ref()
                .filter(|_| matches!(o.tx_type, TxType::Transfer | TxType::Lock))
                .map(ToString::to_string),
            amount: amount_text(o.amount, o.asset_id),
            params: o.params.clone(),
            state: o.state,
            tx_hash: o.tx_hash.map(|h| h.to_string()),
            block_number: o.block_number,
            failure_code: failure_code_of(o),
            reason_code: o.reason_code.clone(),
            revert_reason: o.revert_reason.clone(),
            created_at: o.created_at,
            updated_at: o.updated_at,
        }
    }
}

/// A lock as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LockOut {
    /// The LOCK operation's transactionId.
    pub lock_id: Uuid,
    pub account_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counterparty_ref: Option<String>,
    pub asset_id: String,
    pub amount: String,
    pub status: LockStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Timestamp>,
    /// The RELEASE or CANCEL completing it (in flight or done).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed_by: Option<Uuid>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&Lock> for LockOut {
    fn from(l: &Lock) -> Self {
        Self {
            lock_id: l.id,
            account_ref: l.account_ref.to_string(),
            counterparty_ref: l.counterparty_ref.as_ref().map(ToString::to_string),
            asset_id: l.asset_id.to_string(),
            amount: amount_text(l.amount, l.asset_id),
            status: l.status,
            expires_at: l.expires_at,
            completed_by: l.completed_by,
            created_at: l.created_at,
            updated_at: l.updated_at,
        }
    }
}

/// A break as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BreakOut {
    pub id: Uuid,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_id: Option<Uuid>,
    pub account_ref: String,
    pub asset_id: String,
    pub reason: BreakReason,
    pub detail: String,
    #[schema(value_type = String, format = DateTime)]
    pub detected_at: Timestamp,
}

impl From<&Break> for BreakOut {
    fn from(b: &Break) -> Self {
        Self {
            id: b.id,
            transaction_id: b.transaction_id,
            account_ref: b.account_ref.to_string(),
            asset_id: b.asset_id.to_string(),
            reason: b.reason,
            detail: b.detail.clone(),
            detected_at: b.detected_at,
        }
    }
}

/// A submission as the client sent it, each field still text: every rule is checked here.
#[derive(Debug, Clone, Default)]
pub struct Submission {
    pub tx_type: Option<String>,
    pub asset_id: Option<String>,
    pub account_ref: Option<String>,
    pub counterparty_ref: Option<String>,
    pub amount: Option<String>,
    pub params: Option<serde_json::Value>,
}

fn invalid(field: &str, problem: impl std::fmt::Display) -> Error {
    Error::invalid_field(field, problem)
}

/// Checks the shape of a submission that needs no store: type, fields allowed per type,
/// params scalars. Returns the type and params object.
fn check_shape(s: &Submission) -> AppResult<(TxType, serde_json::Map<String, serde_json::Value>)> {
    let text = s.tx_type.as_deref().ok_or_else(|| invalid("txType", "is required"))?;
    let tx_type = TxType::parse(text).ok_or_else(|| {
        invalid("txType", format!("{text:?} is not one of TRANSFER, LOCK, RELEASE, CANCEL, MINT, BURN"))
    })?;
    let params = match &s.params {
        None | Some(serde_json::Value::Null) => serde_json::Map::new(),
        Some(serde_json::Value::Object(map)) => map.clone(),
        Some(_) => return Err(invalid("params", "must be an object")),
    };
    if let Some((name, _)) = params.iter().find(|(_, v)| v.is_object() || v.is_array()) {
        return Err(invalid(&format!("params.{name}"), "must be a scalar (string, number, boolean or null)"));
    }
    match tx_type.counterparty() {
        Counterparty::Required if s.counterparty_ref.is_none() => {
            return Err(invalid("counterpartyRef", "is required on a TRANSFER"));
        }
        Counterparty::Forbidden if s.counterparty_ref.is_some() => {
            return Err(invalid(
                "counterpartyRef",
                format!("is allowed only on TRANSFER or LOCK, not {}", tx_type.as_str()),
            ));
        }
        _ => {}
    }
    if tx_type == TxType::Lock && params.contains_key("lockId") {
        return Err(invalid(
            "params.lockId",
            "must not be given on a LOCK (the lock's id is the LOCK's transactionId)",
        ));
    }
    if tx_type.completes_lock() {
        for (field, present) in
            [("assetId", s.asset_id.is_some()), ("accountRef", s.account_ref.is_some()), ("amount", s.amount.is_some())]
        {
            if present {
                return Err(invalid(
                    field,
                    format!("must not be given on a {}: the lock decides it", tx_type.as_str()),
                ));
            }
        }
    }
    Ok((tx_type, params))
}

/// The fields of a submission that moves money (not a RELEASE or CANCEL), parsed: every rule
/// about them that needs no store, in the spec's order (the asset's code, the amount at its
/// minor unit, then the accounts, named in a form a reference takes and not twice).
struct Fields {
    asset: AssetId,
    amount: Amount,
    account: AccountRef,
    counterparty: Option<AccountRef>,
}

fn parse_fields(s: &Submission) -> AppResult<Fields> {
    let asset_text = s.asset_id.as_deref().ok_or_else(|| invalid("assetId", "is required"))?;
    let asset = AssetId::parse(asset_text).map_err(|e| invalid("assetId", e))?;
    let amount_text = s.amount.as_deref().ok_or_else(|| invalid("amount", "is required"))?;
    let amount = Amount::parse(amount_text, asset.minor_unit()).map_err(|e| invalid("amount", e))?;
    let account_text = s.account_ref.as_deref().ok_or_else(|| invalid("accountRef", "is required"))?;
    let account = AccountRef::parse(account_text).map_err(|e| invalid("accountRef", e))?;
    let counterparty = match s.counterparty_ref.as_deref() {
        None => None,
        Some(text) => {
            let other = AccountRef::parse(text).map_err(|e| invalid("counterpartyRef", e))?;
            if other == account {
                return Err(invalid("counterpartyRef", "must name another account than accountRef"));
            }
            Some(other)
        }
    };
    Ok(Fields { asset, amount, account, counterparty })
}

/// Every rule of a submission by `caller` that needs no store, in the order `submit` checks
/// them: what a dry run answers for a script's `submit` without reading the organisation's
/// contracts, accounts and locks.
pub fn check_without_store(s: &Submission, caller: &Caller) -> AppResult<()> {
    let (tx_type, params) = check_shape(s)?;
    if matches!(tx_type, TxType::Mint | TxType::Burn) {
        caller.require(Permission::TransactionMint)?;
    }
    if tx_type.completes_lock() {
        lock_id_of(tx_type, &params)?;
    } else {
        parse_fields(s)?;
    }
    Ok(())
}

/// The lock a RELEASE or CANCEL names: `params.lockId`, a UUID in the form the API writes
/// (the lock's transactionId): one lock, one spelling, as for path ids.
fn lock_id_of(tx_type: TxType, params: &serde_json::Map<String, serde_json::Value>) -> AppResult<Uuid> {
    params
        .get("lockId")
        .and_then(|v| v.as_str())
        .and_then(tokenops_domain::ids::canonical_uuid)
        .ok_or_else(|| invalid("params.lockId", format!("a {} needs the lock's id (a UUID)", tx_type.as_str())))
}

/// An account named by a submission, among those read for it: it must exist, hold the asset
/// and be ACTIVE (400).
fn usable_account(found: &[Account], field: &str, reference: &AccountRef, asset: AssetId) -> AppResult<Account> {
    let account = found
        .iter()
        .find(|a| a.account_ref == *reference)
        .ok_or_else(|| invalid(field, format!("names no account: {reference}")))?;
    if account.asset_id != asset {
        return Err(invalid(field, format!("account {reference} holds {}, not {asset}", account.asset_id)));
    }
    if account.status != AccountStatus::Active {
        return Err(invalid(field, format!("account {reference} is {}, not ACTIVE", account.status.as_str())));
    }
    Ok(account.clone())
}

pub struct Operations {
    store: Arc<dyn Store>,
}

impl Operations {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Accepts an operation (SUBMITTED, with its `operation.evaluate` job) once every rule of
    /// the submission holds; balances are not checked (a shortfall fails in settlement).
    pub async fn submit(&self, w: &mut Write, submission: Submission) -> AppResult<Operation> {
        let tenant = w.tenant()?;
        let (tx_type, params) = check_shape(&submission)?;
        if matches!(tx_type, TxType::Mint | TxType::Burn) {
            w.context().caller.require(Permission::TransactionMint)?;
        }
        let id = new_id();
        let (asset, account, counterparty, amount, lock_id) =
            if tx_type.completes_lock() {
                let lock = self.lock_to_complete(w, tenant, tx_type, &params, id).await?;
                let owner =
                    w.tx().accounts().get(tenant, &lock.account_ref).await?.ok_or_else(|| {
                        Error::internal(format!("lock {} names an account that does not exist", lock.id))
                    })?;
                let counterparty = if tx_type == TxType::Release { lock.counterparty_ref.clone() } else { None };
                (lock.asset_id, owner, counterparty, lock.amount, Some(lock.id))
            } else {
                let Fields { asset, amount, account, counterparty } = parse_fields(&submission)?;
                // One read for the contract and both accounts.
                let named: Vec<AccountRef> = std::iter::once(account.clone()).chain(counterparty.clone()).collect();
                let reads = w.tx().operations().submission_reads(tenant, asset, &named).await?;
                if !reads.asset_active {
                    return Err(invalid("assetId", format!("{} has no ACTIVE contract", asset.code())));
                }
                let account = usable_account(&reads.accounts, "accountRef", &account, asset)?;
                let counterparty = match counterparty {
                    None => None,
                    Some(other) => Some(usable_account(&reads.accounts, "counterpartyRef", &other, asset)?.account_ref),
                };
                let lock_id = (tx_type == TxType::Lock).then_some(id);
                (asset, account, counterparty, amount, lock_id)
            };
        // After the lock's rows are held: a completion that waited for them is judged and
        // stamped as of then (see `Write::now`).
        let now = w.now();
        let operation = Operation::submitted(
            NewOperation {
                id,
                tenant_id: tenant,
                tx_type,
                asset_id: asset,
                customer_ref: account.customer_ref.clone(),
                account_ref: account.account_ref,
                counterparty_ref: counterparty,
                amount,
                params: serde_json::Value::Object(params),
                lock_id,
                submitted_by: w.context().caller.subject.clone(),
                idempotency_key: w.idempotency_key().map(str::to_owned),
                correlation_id: w.context().correlation_id.clone(),
            },
            now,
        );
        w.tx().operations().insert(&operation).await?;
        crate::signals::operation_entered(&operation, now);
        w.enqueue(kinds::OPERATION_EVALUATE, serde_json::json!({ "transactionId": id })).await?;
        w.set_resource_id(id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": OperationOut::from(&operation) }));
        Ok(operation)
    }

    /// The ACTIVE lock a RELEASE or CANCEL completes, marked as being completed by `by`.
    async fn lock_to_complete(
        &self,
        w: &mut Write,
        tenant: TenantId,
        tx_type: TxType,
        params: &serde_json::Map<String, serde_json::Value>,
        by: Uuid,
    ) -> AppResult<Lock> {
        let lock_id = lock_id_of(tx_type, params)?;
        // The LOCK operation first, then its lock: the order its confirmation takes them in, so
        // that a confirmation committing meanwhile is seen whole (the operation CONFIRMED and
        // its lock ACTIVE), never half.
        let lock_operation = w.tx().operations().get_for_update(tenant, lock_id).await?;
        let Some(mut lock) = w.tx().locks().get_for_update(tenant, lock_id).await? else {
            // Not visible yet while its LOCK is in flight: the client retries (same key).
            return Err(match lock_operation {
                Some(op) if op.tx_type == TxType::Lock && !op.state.is_terminal() => Error::not_found(format!(
                    "Lock {lock_id} is not visible yet: its LOCK is {}; retry shortly",
                    op.state.as_str()
                ))
                .with_code(Code::LockNotYetVisible)
                .retry_with_same_key(),
                Some(op) if op.tx_type == TxType::Lock => {
                    invalid("params.lockId", format!("lock {lock_id} is not ACTIVE: its LOCK {}", op.state.as_str()))
                }
                Some(op) => invalid("params.lockId", format!("{lock_id} is a {}, not a LOCK", op.tx_type.as_str())),
                _ => Error::not_found(format!("No lock {lock_id}")).with_code(Code::LockNotFound).retry_with_same_key(),
            });
        };
        if lock.status != LockStatus::Active {
            return Err(invalid("params.lockId", format!("lock {lock_id} is {}, not ACTIVE", lock.status.as_str())));
        }
        if let Some(other) = lock.completed_by {
            return Err(invalid("params.lockId", format!("lock {lock_id} is already being completed by {other}")));
        }
        // Past its expiry the hold is not paid out (the ledger keeps it to the next whole
        // second, then refuses: CHAIN_FAILED after the 202); a CANCEL still returns it to its
        // owner, as the expiry sweep would.
        if let Some(expires_at) = lock.expires_at
            && tx_type == TxType::Release
            && expires_at <= w.now()
        {
            return Err(invalid(
                "params.lockId",
                format!(
                    "lock {lock_id} expired at {}: it cannot be released, it returns to its owner",
                    expires_at.to_iso8601()
                ),
            ));
        }
        // The asset's contract must be ACTIVE, as for every other submission: a switched-off
        // contract would only fail the completion UNPROCESSABLE after the 202.
        let contract = w.tx().contracts().get(tenant, lock.asset_id).await?;
        if contract.is_none_or(|c| c.status != ContractStatus::Active) {
            return Err(invalid(
                "params.lockId",
                format!("lock {lock_id} holds {}, which has no ACTIVE contract", lock.asset_id.code()),
            ));
        }
        lock.completed_by = Some(by);
        lock.updated_at = w.now();
        w.tx().locks().update(&lock).await?;
        Ok(lock)
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<Operation> {
        let mut tx = self.store.read().await?;
        tx.operations().get(tenant, id).await?.ok_or_else(|| operation_not_found(id))
    }

    /// Newest first (style A).
    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> AppResult<Page<Operation>> {
        let mut tx = self.store.read().await?;
        Ok(tx.operations().list(tenant, filter, page).await?)
    }

    /// Newest first (style D).
    pub async fn list_after(
        &self,
        tenant: TenantId,
        filter: &OperationFilter,
        window: KeysetRequest,
    ) -> AppResult<Vec<Operation>> {
        let mut tx = self.store.read().await?;
        Ok(tx.operations().list_after(tenant, filter, window).await?)
    }

    /// A lock, once its LOCK is on the ledger.
    pub async fn lock(&self, tenant: TenantId, id: Uuid) -> AppResult<Lock> {
        let mut tx = self.store.read().await?;
        tx.locks()
            .get(tenant, id)
            .await?
            .ok_or_else(|| Error::not_found(format!("Lock {id} not found")).with_code(Code::LockNotFound))
    }

    /// An account's locks, newest first.
    pub async fn locks_of(
        &self,
        tenant: TenantId,
        account_ref: &str,
        status: Option<LockStatus>,
        page: PageRequest,
    ) -> AppResult<Page<Lock>> {
        let not_found = || crate::accounts::account_not_found(account_ref);
        let reference = AccountRef::parse(account_ref).map_err(|_| not_found())?;
        let mut tx = self.store.read().await?;
        tx.accounts().get(tenant, &reference).await?.ok_or_else(not_found)?;
        Ok(tx.locks().list_for_account(tenant, &reference, status, page).await?)
    }

    /// Newest first.
    pub async fn breaks(&self, tenant: TenantId, filter: &BreakFilter, page: PageRequest) -> AppResult<Page<Break>> {
        let mut tx = self.store.read().await?;
        Ok(tx.breaks().list(tenant, filter, page).await?)
    }
}

pub fn operation_not_found(id: Uuid) -> Error {
    Error::not_found(format!("Transaction {id} not found")).with_code(Code::TransactionNotFound)
}
