//! Policies and their versions: `Policy`, `PolicyVersion`, `PolicyFilter` and
//! `PolicyStore`. A version is written once and never changed.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::{Policy, PolicyAction, PolicyFilter, PolicyVersion, RuleType};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{TableRows, TableWrites, conditions, rows};

#[async_trait]
pub trait PolicyStore: Send + TableRows<Policy> + TableRows<PolicyVersion> + TableWrites {
    /// The policy with its first version.
    async fn insert(&mut self, policy: &Policy, first: &PolicyVersion) -> StoreResult<()> {
        self.insert_row(&rows::POLICIES, policy.values()?, "policy id").await?;
        self.insert_version(first).await
    }
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Policy>> {
        self.row_by_key(tenant, &rows::POLICIES, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Policy>> {
        self.row_by_key(tenant, &rows::POLICIES, KeyValue::Id(id), true).await
    }
    /// Replaces status, version, name, description and updated_at.
    async fn update(&mut self, policy: &Policy) -> StoreResult<()> {
        let set = ["status", "version", "updated_at", "name", "description"];
        self.update_row(&rows::POLICIES, policy.values()?, &set).await.map(drop)
    }
    /// Newest first (created_at, then id, descending), each with its current version.
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: PolicyFilter,
        page: PageRequest,
    ) -> StoreResult<Page<(Policy, PolicyVersion)>>;
    /// The non-archived policies holding the (ruleType, action, templateKey) slot, locked for
    /// the rest of the transaction in id order (so two activations lock alike and never
    /// deadlock).
    async fn lock_slot(
        &mut self,
        tenant: TenantId,
        rule_type: RuleType,
        action: PolicyAction,
        template_key: &str,
    ) -> StoreResult<Vec<Policy>> {
        let slot = conditions::policy_slot(rule_type, action, template_key);
        self.rows_where(tenant, &rows::POLICIES, slot, "id ASC", true).await
    }
    /// `StoreError::Conflict` when the policy has a version with that number.
    async fn insert_version(&mut self, version: &PolicyVersion) -> StoreResult<()> {
        self.insert_row(&rows::POLICY_VERSIONS, version.values()?, "policy version").await
    }
    /// The highest version number of the policy (0 when it has none).
    async fn latest_version_number(&mut self, tenant: TenantId, policy_id: Uuid) -> StoreResult<u32>;
    async fn get_version(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        version_number: u32,
    ) -> StoreResult<Option<PolicyVersion>>;
    /// Newest first (by version number).
    async fn list_versions(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<PolicyVersion>> {
        let versions = conditions::policy_versions(policy_id);
        self.page_rows(tenant, &rows::POLICY_VERSIONS, versions, "version_number DESC", page).await
    }
    /// The ACTIVE policies of the organisation governing `action`, each with its current
    /// version, in one statement (what the settlement pipeline evaluates), oldest first.
    async fn active_for_action(
        &mut self,
        tenant: TenantId,
        action: PolicyAction,
    ) -> StoreResult<Vec<(Policy, PolicyVersion)>>;
}
