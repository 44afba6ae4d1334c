//! Policies and their versions: `PolicyRecord`, `PolicyVersionRecord`, `PolicyFilter` and
//! `PolicyStore`. A version is written once and never changed.

use async_trait::async_trait;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::{PolicyAction, PolicyStatus, RuleType};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub status: PolicyStatus,
    pub rule_type: RuleType,
    pub action: PolicyAction,
    pub template_key: String,
    /// The current version's number.
    pub version: u32,
    pub name: Option<String>,
    pub description: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyVersionRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub policy_id: Uuid,
    /// From 1, unique per policy.
    pub version_number: u32,
    /// The content document as sent (JSON text), validated before it was stored.
    pub content: String,
    pub change_summary: Option<String>,
    pub created_by: String,
    pub created_at: Timestamp,
}

/// A policy list's filters; `None` matches all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyFilter {
    pub status: Option<PolicyStatus>,
    pub rule_type: Option<RuleType>,
}

#[async_trait]
pub trait PolicyStore: Send {
    /// The policy with its first version.
    async fn insert(&mut self, policy: &PolicyRecord, first: &PolicyVersionRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<PolicyRecord>>;
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<PolicyRecord>>;
    /// Replaces status, version and updated_at.
    async fn update(&mut self, policy: &PolicyRecord) -> StoreResult<()>;
    /// Newest first (created_at, then id, descending), each with its current version.
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: PolicyFilter,
        page: PageRequest,
    ) -> StoreResult<Page<(PolicyRecord, PolicyVersionRecord)>>;
    /// The non-archived policies holding the (ruleType, action, templateKey) slot, locked for
    /// the rest of the transaction in id order (so two activations lock alike and never
    /// deadlock).
    async fn lock_slot(
        &mut self,
        tenant: TenantId,
        rule_type: RuleType,
        action: PolicyAction,
        template_key: &str,
    ) -> StoreResult<Vec<PolicyRecord>>;
    /// `StoreError::Conflict` when the policy has a version with that number.
    async fn insert_version(&mut self, version: &PolicyVersionRecord) -> StoreResult<()>;
    /// The highest version number of the policy (0 when it has none).
    async fn latest_version_number(&mut self, tenant: TenantId, policy_id: Uuid) -> StoreResult<u32>;
    async fn get_version(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        version_number: u32,
    ) -> StoreResult<Option<PolicyVersionRecord>>;
    /// Newest first (by version number).
    async fn list_versions(
        &mut self,
        tenant: TenantId,
        policy_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<PolicyVersionRecord>>;
    /// The ACTIVE policies of the organisation governing `action`, each with its current
    /// version, in one statement (what the settlement pipeline evaluates), oldest first.
    async fn active_for_action(
        &mut self,
        tenant: TenantId,
        action: PolicyAction,
    ) -> StoreResult<Vec<(PolicyRecord, PolicyVersionRecord)>>;
}
