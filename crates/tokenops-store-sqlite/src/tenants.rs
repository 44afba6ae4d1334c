//! Organisations (tenants) on SQLite: `TenantStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_store::rows::TENANT_COLUMNS;
use tokenops_store::{StoreResult, TenantRecord, TenantStore};

#[async_trait]
impl TenantStore for SqliteTx {
    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        self.fetch_optional(
            &format!("SELECT {TENANT_COLUMNS} FROM tenants WHERE id = ?1"),
            params![codec::id_text(id.as_uuid())],
            codec::decoded,
        )
    }
}
