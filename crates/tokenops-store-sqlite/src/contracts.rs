//! Token contracts on SQLite: `ContractStore`, mapping rows to and from the domain's `Contract`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::chain::Address;
use tokenops_domain::contract::Contract;
use tokenops_store::rows::CONTRACT_COLUMNS;
use tokenops_store::{ContractStore, StoreResult};

#[async_trait]
impl ContractStore for SqliteTx {
    async fn on_address(&mut self, address: Address) -> StoreResult<Vec<Contract>> {
        let sql = format!("SELECT {CONTRACT_COLUMNS} FROM contracts WHERE address = ?1 ORDER BY created_at, id");
        self.fetch_all(&sql, params![address.to_string()], codec::decoded)
    }
}
