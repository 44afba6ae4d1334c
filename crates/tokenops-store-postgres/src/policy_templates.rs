//! The organisations' own policy templates on PostgreSQL: `PolicyTemplateStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;
use tokenops_store::rows::{self, TEMPLATE_COLUMNS};
use tokenops_store::{PolicyTemplateStore, StoreResult};

fn decode_template(row: &PgRow) -> StoreResult<TenantTemplate> {
    rows::tenant_template(&codec::Cols(row))
}

impl PostgresTx {
    async fn fetch_template(&mut self, tenant: TenantId, key: &str, lock: &str) -> StoreResult<Option<TenantTemplate>> {
        let sql = format!(
            "SELECT {TEMPLATE_COLUMNS} FROM policy_templates WHERE tenant_id = $1 AND template_key = $2 {lock}"
        );
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(key.to_owned()),
            decode_template,
        )
        .await
    }
}

#[async_trait]
impl PolicyTemplateStore for PostgresTx {
    async fn insert(&mut self, t: &TenantTemplate) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO policy_templates ({TEMPLATE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT DO NOTHING"
        );
        self.insert_new(
            sqlx::query(sqlx::AssertSqlSafe(sql))
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

    async fn get(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplate>> {
        self.fetch_template(tenant, key, "").await
    }

    async fn get_for_update(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplate>> {
        self.fetch_template(tenant, key, "FOR UPDATE").await
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
            decode_template,
        )
        .await
    }
}
