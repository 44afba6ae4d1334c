//! Token contracts (one per asset per organisation): `ContractRecord` and `ContractStore`.
//!
//! Assets are stored as their upper-case ISO 4217 code; addresses as `0x` and 40 lower-case hex
//! digits.

use async_trait::async_trait;
use tokenops_domain::account::ContractStatus;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContractRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Upper-case ISO 4217 code; unique per organisation.
    pub asset_id: String,
    pub name: String,
    pub symbol: String,
    /// The currency's minor unit: the token's `decimals`.
    pub decimals: u8,
    pub status: ContractStatus,
    /// The token's address: set once deployed or adopted (`None` while PENDING, and when a
    /// deployment FAILED).
    pub address: Option<String>,
    /// An existing token to adopt instead of deploying one (as requested).
    pub adopt_address: Option<String>,
    /// Why deployment failed (FAILED only).
    pub failure_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct ContractFilter {
    /// Matched case-insensitively.
    pub asset_id: Option<String>,
    pub status: Option<ContractStatus>,
}

#[async_trait]
pub trait ContractStore: Send {
    /// `StoreError::Conflict` when the organisation has a contract for the asset.
    async fn insert(&mut self, contract: &ContractRecord) -> StoreResult<()>;
    /// By asset code, compared case-insensitively.
    async fn get(&mut self, tenant: TenantId, asset_id: &str) -> StoreResult<Option<ContractRecord>>;
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(&mut self, tenant: TenantId, asset_id: &str) -> StoreResult<Option<ContractRecord>>;
    /// Replaces every mutable field (name, symbol, decimals, status, address, adopt_address,
    /// failure_reason, updated_at) of the organisation's contract with `contract.id`.
    async fn update(&mut self, contract: &ContractRecord) -> StoreResult<()>;
    /// Oldest first (then id).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &ContractFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ContractRecord>>;
    /// Every organisation's contracts on the token at `address` (lower-case `0x` hex), oldest
    /// first: not tenant-scoped, because a token must never serve two organisations.
    async fn on_address(&mut self, address: &str) -> StoreResult<Vec<ContractRecord>>;
}
