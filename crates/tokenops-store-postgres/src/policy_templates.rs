//! The organisations' own policy templates on PostgreSQL: `PolicyTemplateStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;
use tokenops_store::rows::TEMPLATE_COLUMNS;
use tokenops_store::{PolicyTemplateStore, StoreResult};

#[async_trait]
impl PolicyTemplateStore for PostgresTx {
    async fn list(&mut self, tenant: TenantId, include_deprecated: bool) -> StoreResult<Vec<TenantTemplate>> {
        let sql = format!(
            "SELECT {TEMPLATE_COLUMNS} FROM policy_templates WHERE tenant_id = $1 AND ($2 OR status = 'ACTIVE')
             ORDER BY template_key ASC"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(include_deprecated),
            codec::decoded,
        )
        .await
    }
}
