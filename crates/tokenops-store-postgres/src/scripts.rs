//! Scripts and their versions on PostgreSQL: `ScriptStore`.

use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::script::{Script, ScriptVersion};
use tokenops_store::rows::{self, SCRIPT_COLUMNS, SCRIPT_VERSION_COLUMNS};
use tokenops_store::{ScriptStore, StoreError, StoreResult};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Script> {
    rows::script(&codec::Cols(row))
}

/// Binds a script's values in `SCRIPT_COLUMNS` order (the imports as the JSON text the table
/// keeps, the resolved dependencies as JSON): the insert binds them all, the update the columns
/// it may change, each by its place in that list.
fn bind_script<'q>(query: PgQuery<'q>, s: &'q Script) -> StoreResult<PgQuery<'q>> {
    let dependencies = serde_json::to_value(&s.dependencies).map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok(query
        .bind(s.id)
        .bind(s.tenant_id.as_uuid())
        .bind(&s.name)
        .bind(&s.description)
        .bind(s.status.as_str())
        .bind(codec::saturating_int4(s.version))
        .bind(&s.source)
        .bind(&s.parameters)
        .bind(serde_json::Value::from(s.imports.to_vec()).to_string())
        .bind(dependencies)
        .bind(s.root_script_id)
        .bind(s.cloned_from)
        .bind(&s.created_by)
        .bind(s.created_at.as_micros())
        .bind(s.updated_at.as_micros())
        .bind(s.published_at.map(|t| t.as_micros())))
}

#[async_trait]
impl ScriptStore for PostgresTx {
    async fn insert(&mut self, s: &Script) -> StoreResult<()> {
        let done = self.execute(bind_script(query::insert(&rows::SCRIPTS), s)?).await?;
        if done == 0 {
            return Err(StoreError::Conflict(format!("a script named {:?} exists", s.name)));
        }
        Ok(())
    }

    async fn by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<Script>> {
        let sql =
            format!("SELECT {SCRIPT_COLUMNS} FROM scripts WHERE tenant_id = $1 AND name = $2 AND status <> 'DELETED'");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(name), decode).await
    }

    async fn update(&mut self, s: &Script) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE scripts SET name = $3, description = $4, status = $5, version = $6, source = $7, parameters = $8,
                    imports = $9, dependencies = $10, updated_at = $15, published_at = $16
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_script(query, s)?).await?;
        Ok(())
    }

    async fn insert_version(&mut self, v: &ScriptVersion) -> StoreResult<()> {
        self.insert_new(
            query::insert(&rows::SCRIPT_VERSIONS)
                .bind(v.tenant_id.as_uuid())
                .bind(v.script_id)
                .bind(codec::saturating_int4(v.version))
                .bind(&v.source)
                .bind(&v.parameters)
                .bind(serde_json::Value::from(v.imports.clone()).to_string())
                .bind(&v.created_by)
                .bind(v.created_at.as_micros()),
            "script version",
        )
        .await
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
