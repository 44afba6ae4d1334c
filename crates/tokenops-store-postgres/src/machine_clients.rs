//! Machine clients on PostgreSQL: `MachineClientStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_store::rows::MACHINE_CLIENT_COLUMNS;
use tokenops_store::{MachineClientRecord, MachineClientStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl MachineClientStore for PostgresTx {
    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {MACHINE_CLIENT_COLUMNS} FROM machine_clients WHERE id = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id), codec::decoded).await
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        self.fetch_one(sqlx::query("SELECT COUNT(*) AS total FROM machine_clients WHERE tenant_id IS NULL"), |row| {
            Ok(codec::count(codec::get(row, "total")?))
        })
        .await
    }
}
