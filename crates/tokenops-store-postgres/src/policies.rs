//! Policies and their versions on PostgreSQL: `PolicyStore`. Activation locks the slot's
//! candidate rows (the store's `lock_slot`, `FOR UPDATE` in id order), so two activations of one slot
//! apply one after the other.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::{Policy, PolicyAction, PolicyFilter, PolicyVersion};
use tokenops_store::rows::{self, CURRENT_POLICY_VERSION, POLICY_VERSION_COLUMNS, policy_with_version_columns};
use tokenops_store::{PolicyStore, StoreError, StoreResult};
use uuid::Uuid;

fn decode_joined(row: &PgRow) -> StoreResult<(Policy, PolicyVersion)> {
    rows::policy_with_version(&codec::Cols(row))
}

#[async_trait]
impl PolicyStore for PostgresTx {
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: PolicyFilter,
        page: PageRequest,
    ) -> StoreResult<Page<(Policy, PolicyVersion)>> {
        let status = filter.status.map(|s| s.as_str().to_owned());
        let rule_type = filter.rule_type.map(|r| r.as_str().to_owned());
        let condition =
            "p.tenant_id = $1 AND ($2::text IS NULL OR p.status = $2) AND ($3::text IS NULL OR p.rule_type = $3)";
        let sql = format!(
            "SELECT {} FROM policies p {CURRENT_POLICY_VERSION} WHERE {condition}
             ORDER BY p.created_at DESC, p.id DESC LIMIT $4 OFFSET $5",
            policy_with_version_columns()
        );
        self.page_where(
            format!("SELECT COUNT(*) FROM policies p WHERE {condition}"),
            sql,
            |q| q.bind(tenant.as_uuid()).bind(status.clone()).bind(rule_type.clone()),
            page,
            decode_joined,
        )
        .await
    }

    async fn latest_version_number(&mut self, tenant: TenantId, policy_id: Uuid) -> StoreResult<u32> {
        let latest: i32 = self
            .scalar(
                sqlx::query_scalar(
                    "SELECT COALESCE(MAX(version_number), 0) FROM policy_versions WHERE tenant_id = $1 AND policy_id = $2",
                )
                .bind(tenant.as_uuid())
                .bind(policy_id),
            )
            .await?;
        u32::try_from(latest).map_err(|_| StoreError::Corrupt(format!("version number {latest}")))
    }

    async fn get_version(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        version_number: u32,
    ) -> StoreResult<Option<PolicyVersion>> {
        let sql = format!(
            "SELECT {POLICY_VERSION_COLUMNS} FROM policy_versions WHERE tenant_id = $1 AND policy_id = $2 AND version_number = $3"
        );
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant.as_uuid())
                .bind(policy_id)
                .bind(codec::saturating_int4(version_number)),
            codec::decoded,
        )
        .await
    }

    async fn active_for_action(
        &mut self,
        tenant: TenantId,
        action: PolicyAction,
    ) -> StoreResult<Vec<(Policy, PolicyVersion)>> {
        let sql = format!(
            "SELECT {} FROM policies p {CURRENT_POLICY_VERSION}
             WHERE p.tenant_id = $1 AND p.action = $2 AND p.status = 'ACTIVE'
             ORDER BY p.created_at ASC, p.id ASC",
            policy_with_version_columns()
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(action.as_str()),
            decode_joined,
        )
        .await
    }
}
