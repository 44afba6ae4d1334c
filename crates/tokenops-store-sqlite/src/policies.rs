//! Policies and their versions on SQLite: `PolicyStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::{Policy, PolicyAction, PolicyFilter, PolicyStatus, PolicyVersion, RuleType};
use tokenops_store::rows::{self, CURRENT_POLICY_VERSION, POLICY_VERSION_COLUMNS, policy_with_version_columns};
use tokenops_store::{PolicyStore, StoreResult};
use uuid::Uuid;

fn decode_joined(row: &Row<'_>) -> StoreResult<(Policy, PolicyVersion)> {
    rows::policy_with_version(&codec::Cols(row))
}

#[async_trait]
impl PolicyStore for SqliteTx {
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: PolicyFilter,
        page: PageRequest,
    ) -> StoreResult<Page<(Policy, PolicyVersion)>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let status = filter.status.map(PolicyStatus::as_str);
        let rule_type = filter.rule_type.map(RuleType::as_str);
        let condition = "p.tenant_id = ?1 AND (?2 IS NULL OR p.status = ?2) AND (?3 IS NULL OR p.rule_type = ?3)";
        self.page_where(
            &format!("SELECT COUNT(*) FROM policies p WHERE {condition}"),
            &format!(
                "SELECT {} FROM policies p {CURRENT_POLICY_VERSION} WHERE {condition}
                 ORDER BY p.created_at DESC, p.id DESC LIMIT ?4 OFFSET ?5",
                policy_with_version_columns()
            ),
            &[&tenant_text, &status, &rule_type],
            page,
            decode_joined,
        )
    }

    async fn latest_version_number(&mut self, tenant: TenantId, policy_id: Uuid) -> StoreResult<u32> {
        let latest: i64 = self.scalar(
            "SELECT COALESCE(MAX(version_number), 0) FROM policy_versions WHERE tenant_id = ?1 AND policy_id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(policy_id)],
        )?;
        u32::try_from(latest).map_err(|_| tokenops_store::StoreError::Corrupt(format!("version number {latest}")))
    }

    async fn get_version(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        version_number: u32,
    ) -> StoreResult<Option<PolicyVersion>> {
        self.fetch_optional(
            &format!(
                "SELECT {POLICY_VERSION_COLUMNS} FROM policy_versions
                 WHERE tenant_id = ?1 AND policy_id = ?2 AND version_number = ?3"
            ),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(policy_id), i64::from(version_number)],
            codec::decoded,
        )
    }

    async fn active_for_action(
        &mut self,
        tenant: TenantId,
        action: PolicyAction,
    ) -> StoreResult<Vec<(Policy, PolicyVersion)>> {
        self.fetch_all(
            &format!(
                "SELECT {} FROM policies p {CURRENT_POLICY_VERSION}
                 WHERE p.tenant_id = ?1 AND p.action = ?2 AND p.status = 'ACTIVE'
                 ORDER BY p.created_at ASC, p.id ASC",
                policy_with_version_columns()
            ),
            params![codec::id_text(tenant.as_uuid()), action.as_str()],
            decode_joined,
        )
    }
}
