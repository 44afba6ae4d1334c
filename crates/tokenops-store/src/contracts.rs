//! Token contracts (one per asset per organisation): `ContractStore` of the domain's `Contract`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::asset::AssetId;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::{Contract, ContractFilter};
use tokenops_domain::paging::{Page, PageRequest};

use crate::StoreResult;
use crate::encode::asset_text;
use crate::keyset::KeyValue;
use crate::rows::{self, Encode};
use crate::sorting::CREATED_ORDER;
use crate::{TableRows, TableWrites, conditions};

#[async_trait]
pub trait ContractStore: Send + TableRows<Contract> + TableWrites {
    /// `StoreError::Conflict` when the organisation has a contract for the asset.
    async fn insert(&mut self, contract: &Contract) -> StoreResult<()> {
        self.insert_row(&rows::CONTRACTS, contract.values()?, "contract id or asset").await
    }
    async fn get(&mut self, tenant: TenantId, asset_id: AssetId) -> StoreResult<Option<Contract>> {
        self.row_by_key(tenant, &rows::CONTRACTS, KeyValue::Text(asset_text(asset_id).to_owned()), false).await
    }
    /// As `get`, holding the row until the transaction ends (PostgreSQL `FOR UPDATE`).
    async fn get_for_update(&mut self, tenant: TenantId, asset_id: AssetId) -> StoreResult<Option<Contract>> {
        self.row_by_key(tenant, &rows::CONTRACTS, KeyValue::Text(asset_text(asset_id).to_owned()), true).await
    }
    /// Replaces every mutable field (name, symbol, decimals, status, address, adopt_address,
    /// failure_reason, updated_at) of the organisation's contract with `contract.id`.
    async fn update(&mut self, contract: &Contract) -> StoreResult<()> {
        let set = ["name", "symbol", "decimals", "status", "address", "adopt_address", "failure_reason", "updated_at"];
        self.update_row(&rows::CONTRACTS_BY_ID, contract.values()?, &set).await.map(drop)
    }
    /// Oldest first (then id).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &ContractFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Contract>> {
        self.page_rows(tenant, &rows::CONTRACTS, conditions::contracts(filter), CREATED_ORDER, page).await
    }
    /// Every organisation's contracts on the token at `address`, oldest first: not
    /// tenant-scoped, because a token must never serve two organisations.
    async fn on_address(&mut self, address: Address) -> StoreResult<Vec<Contract>>;
}
