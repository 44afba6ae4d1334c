//! An organisation's own (TENANT) policy templates: `TenantTemplateRecord` and
//! `PolicyTemplateStore`. SYSTEM templates ship in code (`tokenops_domain::policy::templates`).

use async_trait::async_trait;
use tokenops_domain::policy::{PolicyAction, TemplateStatus};
use tokenops_domain::{TenantId, Timestamp};

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantTemplateRecord {
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

#[async_trait]
pub trait PolicyTemplateStore: Send {
    /// `StoreError::Conflict` when the organisation has a template with that key.
    async fn insert(&mut self, template: &TenantTemplateRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplateRecord>>;
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplateRecord>>;
    /// Replaces version, name, description, status, default content and updated_at.
    async fn update(&mut self, template: &TenantTemplateRecord) -> StoreResult<()>;
    /// Every template of the organisation by key (an organisation keeps a handful), deprecated
    /// ones only when asked.
    async fn list(&mut self, tenant: TenantId, include_deprecated: bool) -> StoreResult<Vec<TenantTemplateRecord>>;
}
