//! The audit trail: `AuditFilter` and `AuditStore`.

use async_trait::async_trait;
use tokenops_domain::audit::AuditRecord;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub occurred_from: Option<Timestamp>,
    pub occurred_to: Option<Timestamp>,
    pub actor_ids: Vec<String>,
    pub request_id: Option<String>,
    pub action: Option<String>,
    pub source: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// Case-insensitive prefix match on the identifier fields.
    pub query: Option<String>,
}

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
