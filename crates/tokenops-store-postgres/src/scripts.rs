//! Scripts and their versions on PostgreSQL: `ScriptStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::script::{Script, ScriptVersion};
use tokenops_store::rows::{self, SCRIPT_COLUMNS, SCRIPT_VERSION_COLUMNS};
use tokenops_store::{ScriptStore, StoreResult};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Script> {
    rows::script(&codec::Cols(row))
}

#[async_trait]
impl ScriptStore for PostgresTx {
    async fn take_scripts_turn(&mut self, tenant: TenantId) -> StoreResult<()> {
        self.take_turn("scripts", tenant).await
    }

    async fn by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<Script>> {
        let sql =
            format!("SELECT {SCRIPT_COLUMNS} FROM scripts WHERE tenant_id = $1 AND name = $2 AND status <> 'DELETED'");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(name), decode).await
    }

    async fn version(&mut self, tenant: TenantId, script_id: Uuid, version: u32) -> StoreResult<Option<ScriptVersion>> {
        let sql = format!(
            "SELECT {SCRIPT_VERSION_COLUMNS} FROM script_versions WHERE tenant_id = $1 AND script_id = $2 AND version = $3"
        );
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant.as_uuid())
                .bind(script_id)
                .bind(codec::saturating_int4(version)),
            codec::decoded,
        )
        .await
    }

    async fn importers(&mut self, tenant: TenantId, name: &str) -> StoreResult<Vec<Script>> {
        let sql = format!(
            "SELECT {SCRIPT_COLUMNS} FROM scripts
             WHERE tenant_id = $1 AND status <> 'DELETED' AND imports::jsonb ? $2
             ORDER BY created_at, id"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(name), decode).await
    }
}
