//! Machine clients on SQLite: `MachineClientStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_store::rows::MACHINE_CLIENT_COLUMNS;
use tokenops_store::{MachineClientRecord, MachineClientStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl MachineClientStore for SqliteTx {
    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {MACHINE_CLIENT_COLUMNS} FROM machine_clients WHERE id = ?1");
        self.fetch_optional(&sql, params![codec::id_text(id)], codec::decoded)
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let count: i64 = self.scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id IS NULL", [])?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}
