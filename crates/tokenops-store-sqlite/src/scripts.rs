//! Scripts and their versions on SQLite: `ScriptStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Params, Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::script::{Script, ScriptVersion};
use tokenops_store::rows::{self, SCRIPT_COLUMNS, SCRIPT_VERSION_COLUMNS};
use tokenops_store::{ScriptStore, StoreError, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Script> {
    rows::script(&codec::Cols(row))
}

/// A script's values in `SCRIPT_COLUMNS` order (imports and resolved dependencies as the JSON
/// text the table keeps): the insert binds them all, the update the columns it may change, each
/// by its place in that list.
fn script_values(s: &Script) -> StoreResult<impl Params + '_> {
    let dependencies = serde_json::to_string(&s.dependencies).map_err(|e| StoreError::Backend(Box::new(e)))?;
    Ok((
        codec::id_text(s.id),
        codec::id_text(s.tenant_id.as_uuid()),
        &s.name,
        &s.description,
        s.status.as_str(),
        i64::from(s.version),
        &s.source,
        codec::json_text(&s.parameters),
        codec::names_text(&s.imports),
        dependencies,
        codec::id_text(s.root_script_id),
        s.cloned_from.map(codec::id_text),
        &s.created_by,
        s.created_at.as_micros(),
        s.updated_at.as_micros(),
        s.published_at.map(|t| t.as_micros()),
    ))
}

#[async_trait]
impl ScriptStore for SqliteTx {
    async fn insert(&mut self, s: &Script) -> StoreResult<()> {
        let inserted = self.insert_new_row(&rows::SCRIPTS, script_values(s)?)?;
        if !inserted {
            return Err(StoreError::Conflict(format!("a script named {:?} exists", s.name)));
        }
        Ok(())
    }

    async fn by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<Script>> {
        self.fetch_optional(
            &format!("SELECT {SCRIPT_COLUMNS} FROM scripts WHERE tenant_id = ?1 AND name = ?2 AND status <> 'DELETED'"),
            params![codec::id_text(tenant.as_uuid()), name],
            decode,
        )
    }

    async fn update(&mut self, s: &Script) -> StoreResult<()> {
        self.execute(
            "UPDATE scripts SET name = ?3, description = ?4, status = ?5, version = ?6, source = ?7, parameters = ?8,
                    imports = ?9, dependencies = ?10, updated_at = ?15, published_at = ?16
             WHERE tenant_id = ?2 AND id = ?1",
            script_values(s)?,
        )?;
        Ok(())
    }

    async fn insert_version(&mut self, v: &ScriptVersion) -> StoreResult<()> {
        let inserted = self.insert_new_row(
            &rows::SCRIPT_VERSIONS,
            params![
                codec::id_text(v.tenant_id.as_uuid()),
                codec::id_text(v.script_id),
                i64::from(v.version),
                &v.source,
                codec::json_text(&v.parameters),
                serde_json::Value::from(v.imports.clone()).to_string(),
                &v.created_by,
                v.created_at.as_micros(),
            ],
        )?;
        if !inserted {
            return Err(StoreError::Conflict(format!("script version {} exists", v.version)));
        }
        Ok(())
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
