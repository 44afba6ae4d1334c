//! The policy area's entities as the store keeps them: a `Policy` with its immutable
//! `PolicyVersion`s, an organisation's own `TenantTemplate`, and the policy list's `PolicyFilter`.

use uuid::Uuid;

use super::{PolicyAction, PolicyStatus, RuleType, TemplateStatus};
use crate::{TenantId, Timestamp};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
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
pub struct PolicyVersion {
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantTemplate {
    pub tenant_id: TenantId,
    /// Unique in the organisation, compared exactly.
    pub key: String,
    /// 1 when created; each change adds one.
    pub template_version: u32,
    pub name: String,
    pub description: String,
    pub action: PolicyAction,
    pub status: TemplateStatus,
    /// The suggested rule document as sent (JSON text); never validated against the catalogue.
    pub default_content: String,
    pub created_by: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}
