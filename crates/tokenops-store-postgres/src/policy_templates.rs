//! The organisations' own policy templates on PostgreSQL: `PolicyTemplateStore`.

use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;
use tokenops_store::rows::{self, TEMPLATE_COLUMNS};
use tokenops_store::{PolicyTemplateStore, StoreResult};

#[async_trait]
impl PolicyTemplateStore for PostgresTx {
    async fn insert(&mut self, t: &TenantTemplate) -> StoreResult<()> {
        self.insert_new(
            query::insert(&rows::TEMPLATES)
                .bind(t.tenant_id.as_uuid())
                .bind(&t.key)
                .bind(codec::saturating_int4(t.template_version))
                .bind(&t.name)
                .bind(&t.description)
                .bind(t.action.as_str())
                .bind(t.status.as_str())
                .bind(&t.default_content)
                .bind(&t.created_by)
                .bind(t.created_at.as_micros())
                .bind(t.updated_at.as_micros()),
            "template key",
        )
        .await
    }

    async fn update(&mut self, t: &TenantTemplate) -> StoreResult<()> {
        self.execute(
            sqlx::query(
                "UPDATE policy_templates SET template_version = $1, name = $2, description = $3, status = $4,
                     default_content = $5, updated_at = $6
                 WHERE tenant_id = $7 AND template_key = $8",
            )
            .bind(codec::saturating_int4(t.template_version))
            .bind(&t.name)
            .bind(&t.description)
            .bind(t.status.as_str())
            .bind(&t.default_content)
            .bind(t.updated_at.as_micros())
            .bind(t.tenant_id.as_uuid())
            .bind(&t.key),
        )
        .await?;
        Ok(())
    }

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
