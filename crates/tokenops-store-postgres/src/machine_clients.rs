//! Machine clients on PostgreSQL: `MachineClientStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::TenantId;
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

    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let done = self
            .execute(
                sqlx::query("UPDATE machine_clients SET active = $1 WHERE tenant_id = $2 AND id = $3")
                    .bind(active)
                    .bind(tenant.as_uuid())
                    .bind(id),
            )
            .await?;
        Ok(done == 1)
    }
}
