//! Organisations (tenants) on SQLite: `TenantStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_store::{StoreResult, TenantRecord, TenantStore};

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
            codec::decoded,
        )
    }
}
