//! Reading the audit log. Records are written by `write::Write` with every change.

use crate::error::{AppResult, Error};
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::audit::AuditRecord;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::{AuditFilter, Store};
use uuid::Uuid;

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
