//! Organisations (tenants) on SQLite: `TenantStore`.

use crate::codec::{int, text};
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_store::{StoreResult, TenantRecord, TenantStore};

fn decode_tenant(row: &Row<'_>) -> StoreResult<TenantRecord> {
    Ok(TenantRecord {
        id: codec::tenant(&text(row, "id")?)?,
        name: text(row, "name")?,
        owner_user_id: codec::uuid(&text(row, "owner_user_id")?)?,
        created_at: codec::ts(int(row, "created_at")?),
        updated_at: codec::ts(int(row, "updated_at")?),
    })
}

#[async_trait]
impl TenantStore for SqliteTx {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO tenants (id, name, owner_user_id, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                codec::id_text(tenant.id.as_uuid()),
                &tenant.name,
                codec::id_text(tenant.owner_user_id),
                tenant.created_at.as_micros(),
                tenant.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        self.fetch_optional(
            "SELECT id, name, owner_user_id, created_at, updated_at FROM tenants WHERE id = ?1",
            params![codec::id_text(id.as_uuid())],
            decode_tenant,
        )
    }
}
