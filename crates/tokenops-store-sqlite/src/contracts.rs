//! Token contracts on SQLite: `ContractStore`, mapping rows to and from the domain's `Contract`.

use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Params, params};
use tokenops_domain::chain::Address;
use tokenops_domain::contract::Contract;
use tokenops_store::rows::{self, CONTRACT_COLUMNS};
use tokenops_store::{ContractStore, StoreResult};

/// A contract's values in `CONTRACT_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn contract_values(contract: &Contract) -> impl Params + '_ {
    (
        codec::id_text(contract.id),
        codec::id_text(contract.tenant_id.as_uuid()),
        asset_text(contract.asset_id),
        &contract.name,
        &contract.symbol,
        i64::from(contract.decimals),
        contract.status.as_str(),
        contract.address.map(|a| a.to_string()),
        contract.adopt_address.map(|a| a.to_string()),
        contract.failure_reason.as_deref(),
        contract.created_at.as_micros(),
        contract.updated_at.as_micros(),
    )
}

#[async_trait]
impl ContractStore for SqliteTx {
    async fn insert(&mut self, contract: &Contract) -> StoreResult<()> {
        self.insert_row(&rows::CONTRACTS, contract_values(contract))
    }

    async fn on_address(&mut self, address: Address) -> StoreResult<Vec<Contract>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE address = ?1 ORDER BY created_at, id");
        self.fetch_all(&sql, params![address.to_string()], codec::decoded)
    }

    async fn update(&mut self, contract: &Contract) -> StoreResult<()> {
        self.execute(
            "UPDATE contracts SET name = ?4, symbol = ?5, decimals = ?6, status = ?7, address = ?8, adopt_address = ?9,
                                  failure_reason = ?10, updated_at = ?12
             WHERE tenant_id = ?2 AND id = ?1",
            contract_values(contract),
        )?;
        Ok(())
    }
}
