//! The organisations' own policy templates on SQLite: `PolicyTemplateStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;
use tokenops_store::rows::TEMPLATE_COLUMNS;
use tokenops_store::{PolicyTemplateStore, StoreResult};

#[async_trait]
impl PolicyTemplateStore for SqliteTx {
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
