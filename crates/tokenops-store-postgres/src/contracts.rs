//! Token contracts on PostgreSQL: `ContractStore`'s reads of its own; the insert and update are
//! the store's, written once over `TableWrites`. No update can violate a unique index (the asset
//! of a contract never changes).

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::Contract;
use tokenops_store::rows::CONTRACT_COLUMNS;
use tokenops_store::{ContractStore, StoreResult};

#[async_trait]
impl ContractStore for PostgresTx {
    async fn on_address(&mut self, address: Address) -> StoreResult<Vec<Contract>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE address = $1 ORDER BY created_at, id");
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(address.to_string()), codec::decoded).await
    }
}
