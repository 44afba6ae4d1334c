//! Token contracts: one per asset (ISO 4217 currency) per organisation. Registering one records
//! it PENDING and queues `contract.deploy`, which deploys the token on the ledger (or adopts a
//! given address, checking it is our token with the currency's decimals) and makes it ACTIVE,
//! or FAILED with a reason. Only an ACTIVE contract lets accounts and operations use the asset;
//! the bank switches it between ACTIVE and INACTIVE.

use async_trait::async_trait;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use tokenops_domain::asset::AssetId;
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::{Contract, ContractFilter, ContractStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_ledger::{Ledger, LedgerError, TokenSpec};
use tokenops_store::{Job, Store, StoreError, Tx};

use crate::chain::{domain_address, ledger_address};
use crate::error::{AppResult, Code, Error};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::write::{AuditAction, AuditResource, Write};

const CONTRACT: AuditResource = AuditResource { category: "CONTRACTS", resource_type: "contract" };
pub const REGISTER: AuditAction = CONTRACT.action("contract.create");
pub const UPDATE: AuditAction = CONTRACT.action("contract.update");
pub const DEPLOYED: AuditAction = CONTRACT.action("contract.deploy");

/// A token contract as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractOut {
    /// ISO 4217 code.
    #[schema(example = "USD")]
    pub asset_id: String,
    pub name: String,
    pub symbol: String,
    /// The currency's minor unit; amounts of the asset have at most this many decimals.
    pub decimals: u8,
    pub status: ContractStatus,
    /// The token's address on the ledger; absent until deployed or adopted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub contract_address: Option<String>,
    /// Why deployment failed (FAILED only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&Contract> for ContractOut {
    fn from(c: &Contract) -> Self {
        Self {
            asset_id: c.asset_id.to_string(),
            name: c.name.clone(),
            symbol: c.symbol.clone(),
            decimals: c.decimals,
            status: c.status,
            contract_address: c.address.map(|a| a.to_string()),
            failure_reason: c.failure_reason.clone(),
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// A validated registration.
#[derive(Debug, Clone)]
pub struct NewContract {
    pub asset: AssetId,
    /// The token's name; defaults to the currency's name.
    pub name: Option<String>,
    /// An existing token to adopt instead of deploying one.
    pub adopt: Option<Address>,
}

/// A validated change; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct ContractChange {
    /// ACTIVE or INACTIVE.
    pub status: Option<ContractStatus>,
    pub name: Option<String>,
}

pub fn contract_not_found(asset: &str) -> Error {
    Error::not_found(format!("No contract for asset {asset}")).with_code(Code::ContractNotFound)
}

/// The asset's contract, read in `tx`, if it is ACTIVE: accounts, balances and operations need
/// one. `None` when the asset has none (or none ACTIVE), which each caller answers in its own
/// terms; an `Err` is only ever the store failing, so that no caller can mistake a database
/// outage for the caller's mistake (and store it under the request's Idempotency-Key).
#[must_use = "`None` means the asset has no ACTIVE contract: answer it"]
pub async fn active_contract(tx: &mut dyn Tx, tenant: TenantId, asset: AssetId) -> AppResult<Option<Contract>> {
    Ok(tx.contracts().get(tenant, asset).await?.filter(|c| c.status == ContractStatus::Active))
}

/// An EVM address as a request gives it: `0x` and 40 hex digits, any case, blanks around it
/// ignored.
pub fn parse_address(text: &str) -> Option<Address> {
    Address::parse(text.trim()).ok()
}

/// The asset a path names, compared as the stores compare codes (ignoring the case of its
/// letters, nothing else): `None` for a code no contract can have.
fn named_asset(text: &str) -> Option<AssetId> {
    AssetId::parse(text).ok().filter(|a| a.code().eq_ignore_ascii_case(text))
}

pub struct Contracts {
    store: Arc<dyn Store>,
}

impl Contracts {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Registers the asset's contract (PENDING) and queues its deployment. An asset whose
    /// contract FAILED may be registered again; any other existing one is a 409.
    pub async fn register(&self, w: &mut Write, new: NewContract) -> AppResult<Contract> {
        let tenant = w.tenant()?;
        let code = new.asset.code();
        let existing = w.tx().contracts().get_for_update(tenant, new.asset).await?;
        let now = w.now();
        let mut contract = Contract {
            id: new_id(),
            tenant_id: tenant,
            asset_id: new.asset,
            name: new.name.unwrap_or_else(|| new.asset.name()),
            symbol: code.to_owned(),
            decimals: new.asset.minor_unit(),
            status: ContractStatus::Pending,
            address: None,
            adopt_address: new.adopt,
            failure_reason: None,
            created_at: now,
            updated_at: now,
        };
        match existing {
            Some(old) if old.status != ContractStatus::Failed => return Err(already_exists(&old)),
            Some(old) => {
                contract.id = old.id;
                contract.created_at = old.created_at;
                w.tx().contracts().update(&contract).await?;
            }
            None => match w.tx().contracts().insert(&contract).await {
                Ok(()) => {}
                Err(StoreError::Conflict(_)) => {
                    let raced = w.tx().contracts().get(tenant, new.asset).await?;
                    return Err(raced.map(|c| already_exists(&c)).unwrap_or_else(|| {
                        Error::conflict(format!("A contract for {code} was registered concurrently"))
                    }));
                }
                Err(e) => return Err(e.into()),
            },
        }
        w.enqueue(kinds::CONTRACT_DEPLOY, serde_json::json!({ "assetId": code, "contractId": contract.id })).await?;
        w.set_resource_id(code);
        w.set_audit_detail(serde_json::json!({ "after": ContractOut::from(&contract) }));
        Ok(contract)
    }

    /// Switches a contract between ACTIVE and INACTIVE, or renames it. A PENDING or FAILED
    /// contract cannot be switched (422).
    pub async fn update(&self, w: &mut Write, asset: &str, change: ContractChange) -> AppResult<Contract> {
        let tenant = w.tenant()?;
        let found = match named_asset(asset) {
            Some(asset_id) => w.tx().contracts().get_for_update(tenant, asset_id).await?,
            None => None,
        };
        let mut contract = found.ok_or_else(|| contract_not_found(asset))?;
        w.set_resource_id(contract.asset_id.to_string());
        let before = ContractOut::from(&contract);
        if let Some(target) = change.status
            && target != contract.status
        {
            if !matches!(contract.status, ContractStatus::Active | ContractStatus::Inactive) {
                return Err(Error::unprocessable(format!(
                    "The contract for {} is {}: only an ACTIVE or INACTIVE contract changes status",
                    contract.asset_id,
                    contract.status.as_str()
                ))
                .with_code(Code::TransitionNotAllowed));
            }
            contract.status = target;
        }
        if let Some(name) = change.name {
            contract.name = name;
        }
        if contract.status == before.status && contract.name == before.name {
            // Asking for what it already is changes nothing.
            w.set_audit_detail(serde_json::json!({ "after": before, "changed": false }));
            return Ok(contract);
        }
        contract.updated_at = w.now();
        w.tx().contracts().update(&contract).await?;
        w.set_audit_detail(serde_json::json!({ "before": before, "after": ContractOut::from(&contract) }));
        Ok(contract)
    }

    pub async fn get(&self, tenant: TenantId, asset: &str) -> AppResult<Contract> {
        let Some(asset_id) = named_asset(asset) else {
            return Err(contract_not_found(asset));
        };
        let mut tx = self.store.read().await?;
        tx.contracts().get(tenant, asset_id).await?.ok_or_else(|| contract_not_found(asset))
    }

    /// The contract of `asset` once its registration has settled (no longer PENDING: ACTIVE,
    /// or FAILED with a reason), or as it stands when `within` runs out. A registration answers
    /// with it, so that an integrator can use the asset as soon as the answer arrives; the
    /// deployment itself stays a durable job, run by whichever node's workers take it, which is
    /// why this reads the store rather than waiting on the job.
    pub async fn settled(&self, tenant: TenantId, asset: AssetId, within: Duration) -> AppResult<Contract> {
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(5);
        loop {
            let contract = self
                .store
                .read()
                .await?
                .contracts()
                .get(tenant, asset)
                .await?
                .ok_or_else(|| contract_not_found(asset.code()))?;
            let now = tokio::time::Instant::now();
            if contract.status != ContractStatus::Pending || now >= deadline {
                return Ok(contract);
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// Oldest first.
    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &ContractFilter,
        page: PageRequest,
    ) -> AppResult<Page<Contract>> {
        let mut tx = self.store.read().await?;
        Ok(tx.contracts().list(tenant, filter, page).await?)
    }
}

fn already_exists(existing: &Contract) -> Error {
    Error::conflict(format!("A contract for {} already exists", existing.asset_id))
        .with_code(Code::ContractExists)
        .with_extra("assetId", existing.asset_id.code())
        .with_extra("existingStatus", existing.status.as_str())
}

/// `contract.deploy`: deploys (or adopts) the token of a PENDING contract. A final ledger
/// refusal, or temporary failures on the last attempt, make the contract FAILED with the
/// reason. A crash between the deployment and its commit deploys again on the retry: the
/// first token is left unused on the ledger, and nothing the API shows changes twice.
pub struct DeployContract {
    pub store: Arc<dyn Store>,
    pub ledger: Arc<dyn Ledger>,
}

/// The job's target: the organisation, the asset, and the registration it deploys for.
struct Target {
    tenant: TenantId,
    asset: AssetId,
    contract_id: Option<String>,
}

impl Target {
    fn of(job: &Job) -> Result<Target, JobError> {
        let tenant = job.tenant_id.ok_or_else(|| JobError::Permanent("contract.deploy without a tenant".into()))?;
        let asset = job
            .payload
            .get("assetId")
            .and_then(|v| v.as_str())
            .ok_or_else(|| JobError::Permanent("payload has no assetId".into()))?;
        let asset = AssetId::parse(asset).map_err(|e| JobError::Permanent(format!("payload assetId: {e}")))?;
        let contract_id = job.payload.get("contractId").and_then(|v| v.as_str()).map(str::to_owned);
        Ok(Target { tenant, asset, contract_id })
    }

    /// The contract, when it still waits for this job.
    fn waiting(&self, contract: Option<Contract>) -> Option<Contract> {
        contract.filter(|c| {
            c.status == ContractStatus::Pending && self.contract_id.as_deref().is_none_or(|id| id == c.id.to_string())
        })
    }
}

impl DeployContract {
    /// Deploys the token, or checks that the one to adopt is ours to use: the token contract
    /// of this installation's issuer (so it can mint and burn), for this currency, with its
    /// decimals, and used by no other contract.
    async fn deploy(&self, tx_store: &Arc<dyn Store>, contract: &Contract) -> Result<Address, LedgerError> {
        let Some(requested) = contract.adopt_address else {
            let spec =
                TokenSpec { name: contract.name.clone(), symbol: contract.symbol.clone(), decimals: contract.decimals };
            return self.ledger.deploy_token(&spec).await.map(domain_address);
        };
        let token = self.ledger.adopt_token(ledger_address(requested)).await?;
        let refuse =
            |why: String| Err(LedgerError::final_(format!("the token at {requested} cannot be adopted: {why}")));
        if token.issuer != self.ledger.issuer() {
            return refuse(format!("its issuer {:#x} is not this service's issuer", token.issuer));
        }
        if token.decimals != contract.decimals {
            return refuse(format!(
                "it has {} decimals; {} needs {}",
                token.decimals, contract.asset_id, contract.decimals
            ));
        }
        if token.symbol != contract.symbol {
            return refuse(format!("it is the token of {}, not {}", token.symbol, contract.symbol));
        }
        let users = {
            let mut tx = tx_store.read().await.map_err(|e| LedgerError::temporary(e.to_string()))?;
            tx.contracts().on_address(requested).await.map_err(|e| LedgerError::temporary(e.to_string()))?
        };
        if users.iter().any(|c| c.id != contract.id) {
            return refuse("another contract uses it".into());
        }
        Ok(requested)
    }

    /// Records the outcome on the contract, with its audit record, in `tx`.
    async fn conclude(
        &self,
        tx: &mut dyn Tx,
        target: &Target,
        outcome: Result<Address, String>,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let Some(mut contract) = target.waiting(tx.contracts().get_for_update(target.tenant, target.asset).await?)
        else {
            return Ok(());
        };
        // The address may have been taken by another contract meanwhile (the unique index is
        // the last word; this read keeps PostgreSQL's transaction usable in the common case).
        let outcome = match outcome {
            Ok(address) if tx.contracts().on_address(address).await?.iter().any(|c| c.id != contract.id) => {
                Err(format!("the token at {address} cannot be adopted: another contract uses it"))
            }
            other => other,
        };
        let audit_outcome = match outcome {
            Ok(address) => {
                contract.status = ContractStatus::Active;
                contract.address = Some(address);
                AuditOutcome::Success
            }
            Err(reason) => {
                contract.status = ContractStatus::Failed;
                contract.failure_reason = Some(reason);
                AuditOutcome::Failure
            }
        };
        contract.updated_at = now;
        tx.contracts().update(&contract).await?;
        crate::audit::record_worker(
            &mut *tx,
            target.tenant,
            &DEPLOYED,
            contract.asset_id.to_string(),
            audit_outcome,
            serde_json::json!({ "after": ContractOut::from(&contract) }),
            now,
        )
        .await?;
        Ok(())
    }
}

#[async_trait]
impl JobHandler for DeployContract {
    fn kind(&self) -> &'static str {
        kinds::CONTRACT_DEPLOY
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let target = Target::of(job)?;
        let pending = {
            let mut tx = self.store.read().await?;
            target.waiting(tx.contracts().get(target.tenant, target.asset).await?)
        };
        let Some(contract) = pending else {
            return ctx.finish(self.store.write().await?).await;
        };
        let outcome = match self.deploy(&self.store, &contract).await {
            Ok(address) => Ok(address),
            Err(e) if e.is_temporary() && job.attempts < job.max_attempts => {
                return Err(JobError::retry(e));
            }
            Err(e) if e.is_temporary() => Err(format!("RETRY_EXHAUSTED: {e}")),
            Err(e) => Err(e.to_string()),
        };
        let mut tx = self.store.write().await?;
        self.conclude(tx.as_mut(), &target, outcome, ctx.clock().now()).await?;
        ctx.finish(tx).await
    }

    /// A deployment whose job died (for example its final transaction failed on every attempt)
    /// leaves the contract FAILED, so the asset can be registered again.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let Ok(target) = Target::of(job) else { return Ok(()) };
        self.conclude(tx, &target, Err(format!("RETRY_EXHAUSTED: {reason}")), now).await
    }
}
