//! The organisations' own policy templates on SQLite: `PolicyTemplateStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;
use tokenops_store::rows::{self, TEMPLATE_COLUMNS};
use tokenops_store::{PolicyTemplateStore, StoreResult};

#[async_trait]
impl PolicyTemplateStore for SqliteTx {
    async fn insert(&mut self, t: &TenantTemplate) -> StoreResult<()> {
        self.insert_row(
            &rows::TEMPLATES,
            params![
                codec::id_text(t.tenant_id.as_uuid()),
                &t.key,
                i64::from(t.template_version),
                &t.name,
                &t.description,
                t.action.as_str(),
                t.status.as_str(),
                &t.default_content,
                &t.created_by,
                t.created_at.as_micros(),
                t.updated_at.as_micros(),
            ],
        )
    }

    async fn update(&mut self, t: &TenantTemplate) -> StoreResult<()> {
        self.execute(
            "UPDATE policy_templates SET template_version = ?1, name = ?2, description = ?3, status = ?4,
                 default_content = ?5, updated_at = ?6
             WHERE tenant_id = ?7 AND template_key = ?8",
            params![
                i64::from(t.template_version),
                &t.name,
                &t.description,
                t.status.as_str(),
                &t.default_content,
                t.updated_at.as_micros(),
                codec::id_text(t.tenant_id.as_uuid()),
                &t.key,
            ],
        )?;
        Ok(())
    }

    async fn list(&mut self, tenant: TenantId, include_deprecated: bool) -> StoreResult<Vec<TenantTemplate>> {
        self.fetch_all(
            &format!(
                "SELECT {TEMPLATE_COLUMNS} FROM policy_templates WHERE tenant_id = ?1 AND (?2 OR status = 'ACTIVE')
                 ORDER BY template_key ASC"
            ),
            params![codec::id_text(tenant.as_uuid()), include_deprecated],
            codec::decoded,
        )
    }
}
