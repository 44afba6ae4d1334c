//! Organisations (tenants) on PostgreSQL: `TenantStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_store::{StoreResult, TenantRecord, TenantStore};

#[async_trait]
impl TenantStore for PostgresTx {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()> {
        self.insert_new(
            sqlx::query(
                "INSERT INTO tenants (id, name, owner_user_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
            )
            .bind(tenant.id.as_uuid())
            .bind(&tenant.name)
            .bind(tenant.owner_user_id)
            .bind(tenant.created_at.as_micros())
            .bind(tenant.updated_at.as_micros()),
            "organisation id",
        )
        .await
    }

    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        self.fetch_optional(
            sqlx::query("SELECT id, name, owner_user_id, created_at, updated_at FROM tenants WHERE id = $1")
                .bind(id.as_uuid()),
            codec::decoded,
        )
        .await
    }
}
