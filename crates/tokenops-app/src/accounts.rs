//! Accounts: registration (PENDING, with an `account.provision` job), status changes by the
//! transition table of `domain::account`, the customer cascade, reads, and balances read from
//! the ledger. Provisioning creates the wallet through custody, records it, registers it on
//! the ledger, and ends ACTIVE (`account.provisioned`) or FAILED
//! (`account.provisioning_failed`, with a reason), exactly once per registration.

use async_trait::async_trait;
use serde::Serialize;
use std::sync::Arc;
use tokenops_custody::{Address, Custody};
use tokenops_domain::account::{Account, AccountChange, AccountFilter, AccountRef, AccountStatus};
use tokenops_domain::asset::{AssetId, format_minor_units};
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::customer::{CustomerRef, CustomerStatus};
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_ledger::{Ledger, LedgerError, U256};
use tokenops_store::{Job, Store, StoreError, Tx};

use crate::chain::{domain_address, ledger_address};
use crate::contracts::active_contract;
use crate::error::{AppResult, Code, Error};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::write::{AuditAction, AuditResource, Write};

const ACCOUNT: AuditResource = AuditResource { category: "ACCOUNTS", resource_type: "account" };
pub const REGISTER: AuditAction = ACCOUNT.action("account.create");
pub const CHANGE_STATUS: AuditAction = ACCOUNT.action("account.update_status");
pub const PROVISIONED: AuditAction = ACCOUNT.action("account.provision");

/// An account as the API returns it, and as `account.*` events carry it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountOut {
    #[schema(example = "acc-0001")]
    pub account_ref: String,
    pub customer_ref: String,
    /// ISO 4217 code.
    pub asset_id: String,
    pub status: AccountStatus,
    /// The account's ledger wallet: present once provisioned (ACTIVE or INACTIVE), absent while
    /// PENDING and when FAILED.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wallet_address: Option<String>,
    /// Why provisioning failed (FAILED only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub provisioned_at: Option<Timestamp>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&Account> for AccountOut {
    fn from(a: &Account) -> Self {
        Self {
            account_ref: a.account_ref.to_string(),
            customer_ref: a.customer_ref.to_string(),
            asset_id: a.asset_id.to_string(),
            status: a.status,
            wallet_address: a.wallet_address.filter(|_| a.status.is_provisioned()).map(|w| w.to_string()),
            failure_reason: a.failure_reason.clone().filter(|_| a.status == AccountStatus::Failed),
            provisioned_at: a.provisioned_at,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// The balance record: amounts as decimal strings in the asset's minor unit, read from the
/// ledger at `blockNumber`.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BalanceOut {
    pub account_ref: String,
    pub customer_ref: String,
    pub asset_id: String,
    #[schema(example = "125.00")]
    pub total: String,
    pub available: String,
    /// Held by ACTIVE locks.
    pub locked: String,
    #[schema(value_type = String, format = DateTime)]
    pub as_of: Timestamp,
    /// The ledger block the balances were read at.
    pub block_number: u64,
}

/// A validated registration.
#[derive(Debug, Clone)]
pub struct NewAccount {
    pub account_ref: AccountRef,
    pub customer_ref: CustomerRef,
    pub asset: AssetId,
}

pub fn account_not_found(account_ref: &str) -> Error {
    Error::not_found(format!("Account {account_ref} not found")).with_code(Code::AccountNotFound)
}

/// Accounts and balances need the asset's contract ACTIVE: 404 without one.
fn no_active_contract(asset: AssetId) -> Error {
    Error::not_found(format!("Asset {asset} has no ACTIVE contract")).with_code(Code::NoActiveContract)
}

fn already_exists(existing: &Account) -> Error {
    Error::conflict(format!("Account {} already exists", existing.account_ref))
        .with_code(Code::AccountExists)
        .with_extra("accountRef", existing.account_ref.as_str())
        .with_extra("existingStatus", existing.status.as_str())
}

/// Emits an account event in a job's transaction.
#[allow(clippy::too_many_arguments)]
async fn publish_account_event(
    tx: &mut dyn Tx,
    event_type: EventType,
    account: &Account,
    data: serde_json::Value,
    correlation_id: Option<String>,
    idempotency_key: Option<String>,
    max_attempts: u32,
    now: Timestamp,
) -> AppResult<()> {
    let event = Event {
        id: new_id(),
        tenant_id: account.tenant_id,
        event_type: event_type.as_str().to_owned(),
        occurred_at: now,
        correlation_id,
        idempotency_key,
        resource: ResourceRef::new("account", account.account_ref.as_str()),
        data,
        dispatched_at: None,
    };
    crate::events::publish(tx, &event, max_attempts, now).await
}

pub struct Accounts {
    store: Arc<dyn Store>,
    ledger: Arc<dyn Ledger>,
}

impl Accounts {
    pub fn new(store: Arc<dyn Store>, ledger: Arc<dyn Ledger>) -> Self {
        Self { store, ledger }
    }

    /// Registers an account (PENDING) and queues its provisioning. 404 when the customer is
    /// missing or the asset has no ACTIVE contract; 422 when the customer is INACTIVE; 409 for
    /// an existing reference unless it FAILED, which is registered again.
    pub async fn register(&self, w: &mut Write, new: NewAccount) -> AppResult<Account> {
        let tenant = w.tenant()?;
        w.set_resource_id(new.account_ref.as_str());
        // An existing reference answers 409 whatever else is wrong with the request, so that a
        // client reconciling a retry learns the account's status first.
        let existing = w.tx().accounts().get_for_update(tenant, &new.account_ref).await?;
        if let Some(old) = existing.as_ref().filter(|a| a.status != AccountStatus::Failed) {
            return Err(already_exists(old));
        }
        let customer = w.tx().customers().get(tenant, &new.customer_ref).await?.ok_or_else(|| {
            Error::not_found(format!("Customer {} not found", new.customer_ref)).with_code(Code::CustomerNotFound)
        })?;
        if active_contract(w.tx(), tenant, new.asset).await?.is_none() {
            return Err(no_active_contract(new.asset));
        }
        if customer.status != CustomerStatus::Active {
            return Err(Error::unprocessable(format!("Customer {} is INACTIVE", customer.customer_ref))
                .with_code(Code::CustomerInactive));
        }
        let now = w.now();
        let mut account = Account {
            id: new_id(),
            tenant_id: tenant,
            account_ref: new.account_ref,
            customer_ref: new.customer_ref,
            asset_id: new.asset,
            status: AccountStatus::Pending,
            wallet_address: None,
            failure_reason: None,
            generation: 1,
            provisioned_at: None,
            created_at: now,
            updated_at: now,
        };
        match existing {
            Some(old) => {
                account.id = old.id;
                account.created_at = old.created_at;
                account.generation = old.generation.saturating_add(1);
                w.tx().accounts().update(&account).await?;
            }
            None => match w.tx().accounts().insert(&account).await {
                Ok(()) => {}
                Err(StoreError::Conflict(_)) => {
                    let raced = w.tx().accounts().get(tenant, &account.account_ref).await?;
                    return Err(raced.map(|a| already_exists(&a)).unwrap_or_else(|| {
                        Error::conflict(format!("Account {} was registered concurrently", account.account_ref))
                    }));
                }
                Err(e) => return Err(e.into()),
            },
        }
        let payload = serde_json::json!({
            "accountRef": account.account_ref.as_str(),
            "generation": account.generation,
            "correlationId": w.context().correlation_id,
            "idempotencyKey": w.idempotency_key(),
        });
        w.enqueue(kinds::ACCOUNT_PROVISION, payload).await?;
        w.set_audit_detail(serde_json::json!({ "after": AccountOut::from(&account) }));
        Ok(account)
    }

    /// Sets ACTIVE or INACTIVE by the transition table; a change emits `account.status_changed`.
    pub async fn change_status(
        &self,
        w: &mut Write,
        account_ref: &AccountRef,
        target: AccountStatus,
    ) -> AppResult<Account> {
        let tenant = w.tenant()?;
        w.set_resource_id(account_ref.as_str());
        // Locks in the cascade's order, customer then account, so that a concurrent customer
        // deactivation and this change apply one after the other without deadlocking.
        let owner =
            w.tx().accounts().get(tenant, account_ref).await?.ok_or_else(|| account_not_found(account_ref.as_str()))?;
        let customer = w.tx().customers().get_for_update(tenant, &owner.customer_ref).await?;
        let customer_status = customer.map(|c| c.status).unwrap_or(CustomerStatus::Inactive);
        let mut account = w
            .tx()
            .accounts()
            .get_for_update(tenant, account_ref)
            .await?
            .ok_or_else(|| account_not_found(account_ref.as_str()))?;
        match account.status.patch_to(target, customer_status) {
            Err(refused) => Err(Error::unprocessable(format!(
                "Account {} cannot become {}: {refused}",
                account.account_ref,
                target.as_str()
            ))
            .with_code(Code::TransitionNotAllowed)),
            Ok(AccountChange::Unchanged) => {
                w.set_audit_detail(serde_json::json!({ "status": account.status, "changed": false }));
                Ok(account)
            }
            Ok(AccountChange::Changed { from, to }) => {
                account.status = to;
                account.updated_at = w.now();
                w.tx().accounts().update(&account).await?;
                emit_status_changed(w, &account, from, None).await?;
                Ok(account)
            }
        }
    }

    pub async fn get(&self, tenant: TenantId, account_ref: &str) -> AppResult<Account> {
        let parsed = AccountRef::parse(account_ref).map_err(|_| account_not_found(account_ref))?;
        let mut tx = self.store.read().await?;
        tx.accounts().get(tenant, &parsed).await?.ok_or_else(|| account_not_found(account_ref))
    }

    /// Oldest first.
    pub async fn list(&self, tenant: TenantId, filter: &AccountFilter, page: PageRequest) -> AppResult<Page<Account>> {
        let mut tx = self.store.read().await?;
        Ok(tx.accounts().list(tenant, filter, page).await?)
    }

    /// The account's balances from the ledger. 404 without the account or an ACTIVE contract
    /// for its asset; 422 while it has no wallet (PENDING or FAILED); 500 when the ledger
    /// cannot be read: never a made-up zero.
    pub async fn balance(&self, tenant: TenantId, account_ref: &str, now: Timestamp) -> AppResult<BalanceOut> {
        let parsed = AccountRef::parse(account_ref).map_err(|_| account_not_found(account_ref))?;
        let (account, contract) = {
            let mut tx = self.store.read().await?;
            let account = tx.accounts().get(tenant, &parsed).await?.ok_or_else(|| account_not_found(account_ref))?;
            let contract = active_contract(tx.as_mut(), tenant, account.asset_id)
                .await?
                .ok_or_else(|| no_active_contract(account.asset_id))?;
            (account, contract)
        };
        let wallet = match (&account.wallet_address, account.status.is_provisioned()) {
            (Some(wallet), true) => ledger_address(*wallet),
            _ => {
                return Err(Error::unprocessable(format!(
                    "Account {} has no wallet yet: it is {}",
                    account.account_ref,
                    account.status.as_str()
                ))
                .with_code(Code::AccountNotProvisioned));
            }
        };
        let token = contract
            .address
            .map(ledger_address)
            .ok_or_else(|| Error::internal("an ACTIVE contract without an address"))?;
        let balances = self.ledger.balances(token, wallet).await.map_err(|e| {
            Error::internal(format!("reading balances from the ledger: {e}")).with_code(Code::LedgerUnavailable)
        })?;
        let amount = |value: U256| -> AppResult<String> {
            let units = u128::try_from(value).map_err(|_| Error::internal("a balance beyond u128"))?;
            Ok(format_minor_units(units, contract.decimals))
        };
        Ok(BalanceOut {
            account_ref: account.account_ref.to_string(),
            customer_ref: account.customer_ref.to_string(),
            asset_id: account.asset_id.to_string(),
            total: amount(balances.total)?,
            available: amount(balances.available)?,
            locked: amount(balances.held)?,
            as_of: now,
            block_number: balances.block_number,
        })
    }
}

/// `account.status_changed` with the account as the API shows it (and, for a cascade, why).
async fn emit_status_changed(
    w: &mut Write,
    account: &Account,
    from: AccountStatus,
    cause: Option<&str>,
) -> AppResult<()> {
    let mut data = serde_json::to_value(AccountOut::from(account)).map_err(Error::internal)?;
    data["previousStatus"] = serde_json::json!(from);
    if let Some(cause) = cause {
        data["cause"] = serde_json::json!(cause);
    }
    w.emit(EventType::AccountStatusChanged, ResourceRef::new("account", account.account_ref.as_str()), data).await?;
    Ok(())
}

/// The customer cascade: a customer set INACTIVE takes its ACTIVE accounts to INACTIVE in the
/// same write, each with `account.status_changed` (cause `CUSTOMER_INACTIVE`). Reactivating the
/// customer leaves its accounts INACTIVE: the bank reactivates each one deliberately.
pub async fn deactivate_for_customer(w: &mut Write, customer_ref: &CustomerRef) -> AppResult<usize> {
    let tenant = w.tenant()?;
    let accounts = w.tx().accounts().for_customer_in_status(tenant, customer_ref, AccountStatus::Active).await?;
    let now = w.now();
    for mut account in accounts.iter().cloned() {
        account.status = AccountStatus::Inactive;
        account.updated_at = now;
        w.tx().accounts().update(&account).await?;
        emit_status_changed(w, &account, AccountStatus::Active, Some("CUSTOMER_INACTIVE")).await?;
        w.record_side_change(
            &CHANGE_STATUS,
            account.account_ref.to_string(),
            serde_json::json!({
                "before": { "status": AccountStatus::Active },
                "after": { "status": AccountStatus::Inactive },
                "cause": "CUSTOMER_INACTIVE",
            }),
        );
    }
    Ok(accounts.len())
}

/// `account.provision`: custody wallet, ledger registration, then ACTIVE (or INACTIVE if the
/// customer was deactivated meanwhile) or FAILED. The wallet is recorded on the account as soon
/// as custody creates it, so a retry after a crash reuses it; the outcome, its event and its
/// audit record commit with the job's completion, so each happens once.
pub struct ProvisionAccount {
    pub store: Arc<dyn Store>,
    pub custody: Arc<dyn Custody>,
    pub ledger: Arc<dyn Ledger>,
    pub job_max_attempts: u32,
}

enum Step {
    /// Retry later (a temporary failure with attempts left).
    Retry(String),
    /// Provisioning failed for good.
    Fail(String),
}

fn step_error(job: &Job, what: &str, temporary: bool, reason: String) -> Step {
    match (temporary, job.attempts < job.max_attempts) {
        (true, true) => Step::Retry(format!("{what}: {reason}")),
        (true, false) => Step::Fail(format!("RETRY_EXHAUSTED: {what}: {reason}")),
        (false, _) => Step::Fail(format!("{what}: {reason}")),
    }
}

impl ProvisionAccount {
    /// The account this job provisions, when it still waits for it.
    async fn pending(
        &self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        account_ref: &AccountRef,
        generation: u32,
        lock: bool,
    ) -> Result<Option<Account>, JobError> {
        let account = if lock {
            tx.accounts().get_for_update(tenant, account_ref).await?
        } else {
            tx.accounts().get(tenant, account_ref).await?
        };
        Ok(account.filter(|a| a.status == AccountStatus::Pending && a.generation == generation))
    }

    /// Creates and records the wallet, or returns the one recorded by an earlier attempt.
    async fn wallet(&self, job: &Job, account: &Account, generation: u32) -> Result<Result<Address, Step>, JobError> {
        if let Some(recorded) = account.wallet_address {
            return Ok(Ok(ledger_address(recorded)));
        }
        let label = format!("{}/{}", account.tenant_id, account.account_ref);
        let wallet = match self.custody.create_wallet(&label).await {
            Ok(wallet) => wallet,
            Err(e) => return Ok(Err(step_error(job, "custody", !e.is_refusal(), e.to_string()))),
        };
        let mut tx = self.store.write().await?;
        let Some(mut pending) =
            self.pending(tx.as_mut(), account.tenant_id, &account.account_ref, generation, true).await?
        else {
            return Ok(Err(Step::Fail("the account is no longer waiting for provisioning".into())));
        };
        if let Some(recorded) = pending.wallet_address {
            // Another run recorded one first (a lease taken over): use that, drop ours.
            return Ok(Ok(ledger_address(recorded)));
        }
        pending.wallet_address = Some(domain_address(wallet));
        tx.accounts().update(&pending).await?;
        tx.commit().await?;
        Ok(Ok(wallet))
    }
}

/// What a provisioning job works on, read from its payload.
struct Target {
    tenant: TenantId,
    account_ref: AccountRef,
    generation: u32,
    correlation_id: Option<String>,
    idempotency_key: Option<String>,
}

impl Target {
    fn of(job: &Job) -> Result<Target, JobError> {
        let text = |name: &str| job.payload.get(name).and_then(|v| v.as_str()).map(str::to_owned);
        Ok(Target {
            tenant: job.tenant_id.ok_or_else(|| JobError::Permanent("account.provision without a tenant".into()))?,
            // Written by the service when it accepted the account: a reference the rules of that
            // day took, read back as stored (a later rule must not strand its provisioning).
            account_ref: text("accountRef")
                .filter(|s| !s.is_empty())
                .map(AccountRef::from_stored)
                .ok_or_else(|| JobError::Permanent("payload has no accountRef".into()))?,
            generation: job
                .payload
                .get("generation")
                .and_then(|v| v.as_u64())
                .and_then(|g| u32::try_from(g).ok())
                .unwrap_or(1),
            correlation_id: text("correlationId"),
            idempotency_key: text("idempotencyKey"),
        })
    }
}

impl ProvisionAccount {
    /// Records the outcome in `tx`: ACTIVE (or INACTIVE, if the customer was deactivated
    /// meanwhile) with `account.provisioned`, or FAILED with the reason and
    /// `account.provisioning_failed`, and the audit record. Nothing when the account no longer
    /// waits for this registration's provisioning.
    async fn conclude(
        &self,
        tx: &mut dyn Tx,
        target: &Target,
        failure: Option<String>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let Some(waiting) = self.pending(tx, target.tenant, &target.account_ref, target.generation, false).await?
        else {
            return Ok(());
        };
        // Customer before account, the cascade's lock order: a deactivation racing with this
        // completion either sees the account ACTIVE (and deactivates it) or is seen here.
        let customer = tx.customers().get_for_update(target.tenant, &waiting.customer_ref).await?;
        let Some(mut account) = self.pending(tx, target.tenant, &target.account_ref, target.generation, true).await?
        else {
            return Ok(());
        };
        let (event_type, audit_outcome) = match &failure {
            None => {
                account.status =
                    AccountStatus::provisioned_for(customer.map(|c| c.status).unwrap_or(CustomerStatus::Inactive));
                account.provisioned_at = Some(now);
                (EventType::AccountProvisioned, AuditOutcome::Success)
            }
            Some(reason) => {
                account.status = AccountStatus::Failed;
                account.failure_reason = Some(reason.clone());
                (EventType::AccountProvisioningFailed, AuditOutcome::Failure)
            }
        };
        account.updated_at = now;
        tx.accounts().update(&account).await?;
        let view = serde_json::to_value(AccountOut::from(&account)).map_err(|e| JobError::Permanent(e.to_string()))?;
        publish_account_event(
            tx,
            event_type,
            &account,
            view.clone(),
            target.correlation_id.clone(),
            target.idempotency_key.clone(),
            self.job_max_attempts,
            now,
        )
        .await
        .map_err(JobError::retry)?;
        crate::audit::record_worker(
            &mut *tx,
            target.tenant,
            &PROVISIONED,
            account.account_ref.to_string(),
            audit_outcome,
            serde_json::json!({ "after": view }),
            now,
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl JobHandler for ProvisionAccount {
    fn kind(&self) -> &'static str {
        kinds::ACCOUNT_PROVISION
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let target = Target::of(job)?;
        let account = {
            let mut tx = self.store.read().await?;
            self.pending(tx.as_mut(), target.tenant, &target.account_ref, target.generation, false).await?
        };
        let Some(account) = account else {
            // Provisioned or failed by an earlier run, or superseded by a new registration.
            return ctx.finish(self.store.write().await?).await;
        };
        let outcome = match self.wallet(job, &account, target.generation).await? {
            Err(step) => Err(step),
            Ok(wallet) => match self.ledger.register_wallet(wallet).await {
                Ok(()) => Ok(wallet),
                Err(e) => Err(step_error(job, "ledger", e.is_temporary(), ledger_reason(&e))),
            },
        };
        let failure = match outcome {
            Err(Step::Retry(reason)) => return Err(JobError::Retry(reason)),
            Err(Step::Fail(reason)) => Some(reason),
            Ok(_) => None,
        };
        let mut tx = self.store.write().await?;
        self.conclude(tx.as_mut(), &target, failure, ctx.clock().now()).await?;
        ctx.finish(tx).await
    }

    /// A provisioning whose job died (its final transaction failed on every attempt, or a
    /// worker was killed during its last one) leaves the account FAILED with the reason and
    /// its event, so the reference can be registered again.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok(target) = Target::of(job) else { return Ok(()) };
        self.conclude(tx, &target, Some(format!("RETRY_EXHAUSTED: {reason}")), now).await
    }
}

fn ledger_reason(error: &LedgerError) -> String {
    error.to_string()
}
