//! An organisation's own (TENANT) policy templates: `TenantTemplate` and
//! `PolicyTemplateStore`. SYSTEM templates ship in code (`tokenops_domain::policy::templates`).

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::policy::TenantTemplate;

use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{StoreResult, TableRows, TableWrites, rows};

#[async_trait]
pub trait PolicyTemplateStore: Send + TableRows<TenantTemplate> + TableWrites {
    /// `StoreError::Conflict` when the organisation has a template with that key.
    async fn insert(&mut self, template: &TenantTemplate) -> StoreResult<()> {
        self.insert_row(&rows::TEMPLATES, template.values()?, "template key").await
    }
    async fn get(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplate>> {
        self.row_by_key(tenant, &rows::TEMPLATES, KeyValue::Text(key.to_owned()), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<TenantTemplate>> {
        self.row_by_key(tenant, &rows::TEMPLATES, KeyValue::Text(key.to_owned()), true).await
    }
    /// Replaces version, name, description, status, default content and updated_at.
    async fn update(&mut self, template: &TenantTemplate) -> StoreResult<()> {
        let set = ["template_version", "name", "description", "status", "default_content", "updated_at"];
        self.update_row(&rows::TEMPLATES, template.values()?, &set).await.map(drop)
    }
    /// Every template of the organisation by key (an organisation keeps a handful), deprecated
    /// ones only when asked.
    async fn list(&mut self, tenant: TenantId, include_deprecated: bool) -> StoreResult<Vec<TenantTemplate>>;
}
