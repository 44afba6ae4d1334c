//! Machine clients on PostgreSQL: `MachineClientStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_store::{MachineClientRecord, MachineClientStore, StoreResult};
use uuid::Uuid;

const CLIENT_COLUMNS: &str = "id, tenant_id, name, role_id, secret_hash, active, created_at";

fn decode_client(row: &PgRow) -> StoreResult<MachineClientRecord> {
    Ok(MachineClientRecord {
        id: codec::get(row, "id")?,
        tenant_id: codec::opt_tenant(codec::get(row, "tenant_id")?),
        name: codec::get(row, "name")?,
        role_id: codec::get(row, "role_id")?,
        secret_hash: codec::get(row, "secret_hash")?,
        active: codec::get(row, "active")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
    })
}

#[async_trait]
impl MachineClientStore for PostgresTx {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO machine_clients (id, tenant_id, name, role_id, secret_hash, active, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT DO NOTHING",
        )
        .bind(client.id)
        .bind(client.tenant_id.map(TenantId::as_uuid))
        .bind(&client.name)
        .bind(client.role_id)
        .bind(&client.secret_hash)
        .bind(client.active)
        .bind(client.created_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("machine client id"));
        }
        Ok(())
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_client).transpose()
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS total FROM machine_clients WHERE tenant_id IS NULL")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(codec::count(codec::get(&row, "total")?))
    }

    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>> {
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id = $1")
            .bind(tenant.as_uuid())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE tenant_id = $1
             ORDER BY created_at ASC, id ASC LIMIT $2 OFFSET $3"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_client).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }

    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE machine_clients SET active = $1 WHERE tenant_id = $2 AND id = $3")
            .bind(active)
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }
}
