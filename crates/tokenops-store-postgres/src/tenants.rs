//! Organisations (tenants) on PostgreSQL: `TenantStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_store::rows::TENANT_COLUMNS;
use tokenops_store::{StoreResult, TenantRecord, TenantStore};

#[async_trait]
impl TenantStore for PostgresTx {
    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = $1")))
                .bind(id.as_uuid()),
            codec::decoded,
        )
        .await
    }
}
