//! Token contracts on PostgreSQL: `ContractStore`, mapping rows to and from the domain's `Contract`.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count (see `codec::conflict`). No update can violate a unique index (the asset of a
//! contract never changes).

use crate::codec::asset_text;
use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::Contract;
use tokenops_store::rows::{self, CONTRACT_COLUMNS};
use tokenops_store::{ContractStore, StoreResult};

/// Binds a contract's values in `CONTRACT_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn bind_contract<'q>(query: PgQuery<'q>, contract: &'q Contract) -> PgQuery<'q> {
    query
        .bind(contract.id)
        .bind(contract.tenant_id.as_uuid())
        .bind(asset_text(contract.asset_id))
        .bind(&contract.name)
        .bind(&contract.symbol)
        .bind(i16::from(contract.decimals))
        .bind(contract.status.as_str())
        .bind(contract.address.map(|a| a.to_string()))
        .bind(contract.adopt_address.map(|a| a.to_string()))
        .bind(contract.failure_reason.as_deref())
        .bind(contract.created_at.as_micros())
        .bind(contract.updated_at.as_micros())
}

#[async_trait]
impl ContractStore for PostgresTx {
    async fn insert(&mut self, contract: &Contract) -> StoreResult<()> {
        self.insert_new(bind_contract(query::insert(&rows::CONTRACTS), contract), "contract id or asset").await
    }

    async fn on_address(&mut self, address: Address) -> StoreResult<Vec<Contract>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE address = $1 ORDER BY created_at, id");
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(address.to_string()), codec::decoded).await
    }

    async fn update(&mut self, contract: &Contract) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE contracts SET name = $4, symbol = $5, decimals = $6, status = $7, address = $8, adopt_address = $9,
                                  failure_reason = $10, updated_at = $12
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_contract(query, contract)).await?;
        Ok(())
    }
}
