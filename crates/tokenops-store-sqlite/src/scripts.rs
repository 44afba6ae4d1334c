//! Scripts and their versions on SQLite: `ScriptStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::script::{Script, ScriptVersion};
use tokenops_store::rows::{self, SCRIPT_COLUMNS, SCRIPT_VERSION_COLUMNS};
use tokenops_store::{ScriptStore, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Script> {
    rows::script(&codec::Cols(row))
}

#[async_trait]
impl ScriptStore for SqliteTx {
    async fn take_scripts_turn(&mut self, _tenant: TenantId) -> StoreResult<()> {
        // Write transactions take turns on SQLite already: each holds the one writer.
        Ok(())
    }

    async fn by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<Script>> {
        self.fetch_optional(
            &format!("SELECT {SCRIPT_COLUMNS} FROM scripts WHERE tenant_id = ?1 AND name = ?2 AND status <> 'DELETED'"),
            params![codec::id_text(tenant.as_uuid()), name],
            decode,
        )
    }

    async fn version(&mut self, tenant: TenantId, script_id: Uuid, version: u32) -> StoreResult<Option<ScriptVersion>> {
        self.fetch_optional(
            &format!(
                "SELECT {SCRIPT_VERSION_COLUMNS} FROM script_versions WHERE tenant_id = ?1 AND script_id = ?2 AND version = ?3"
            ),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(script_id), i64::from(version)],
            codec::decoded,
        )
    }

    async fn importers(&mut self, tenant: TenantId, name: &str) -> StoreResult<Vec<Script>> {
        self.fetch_all(
            &format!(
                "SELECT {SCRIPT_COLUMNS} FROM scripts
                 WHERE tenant_id = ?1 AND status <> 'DELETED' AND EXISTS (SELECT 1 FROM json_each(imports) WHERE value = ?2)
                 ORDER BY created_at, id"
            ),
            params![codec::id_text(tenant.as_uuid()), name],
            decode,
        )
    }
}
