//! The audit log: reading it, and the record a background job writes with its effect. Request
//! writes get theirs from `write::Write`.

use crate::error::{AppResult, Error};
use std::sync::Arc;
use tokenops_domain::audit::{AuditFilter, AuditOutcome, AuditRecord, AuditSource};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::Store;
use uuid::Uuid;

/// The audit record of something a job did (source WORKER, no actor), under the same audit
/// actions as request writes use.
pub fn worker_record(
    tenant: TenantId,
    action: &crate::write::AuditAction,
    resource_id: String,
    outcome: AuditOutcome,
    detail: serde_json::Value,
    now: Timestamp,
) -> AuditRecord {
    AuditRecord {
        id: new_id(),
        tenant_id: Some(tenant),
        occurred_at: now,
        created_at: now,
        action: action.name.to_owned(),
        category: action.category.to_owned(),
        source: AuditSource::Worker,
        actor_id: None,
        resource_type: action.resource_type.to_owned(),
        resource_id: Some(resource_id),
        outcome,
        request_id: None,
        idempotency_key: None,
        http_status: None,
        detail,
    }
}

pub struct AuditLog {
    store: Arc<dyn Store>,
}

impl AuditLog {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<AuditRecord>> {
        let mut tx = self.store.read().await?;
        Ok(tx.audit().list(tenant, filter, sort, page).await?)
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<AuditRecord> {
        let mut tx = self.store.read().await?;
        tx.audit().get(tenant, id).await?.ok_or_else(|| Error::not_found(format!("Audit event {id} not found")))
    }
}
