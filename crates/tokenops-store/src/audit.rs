//! The audit trail: `AuditStore`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::audit::{AuditFilter, AuditRecord};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use uuid::Uuid;

use crate::StoreResult;

#[async_trait]
pub trait AuditStore: Send {
    async fn record(&mut self, record: &AuditRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<AuditRecord>>;
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AuditFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<AuditRecord>>;
}
