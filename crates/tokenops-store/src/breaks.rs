//! Breaks: `BreakRecord`, `BreakFilter` and `BreakStore`.

use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::BreakReason;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub transaction_id: Option<Uuid>,
    pub account_ref: AccountRef,
    pub asset_id: String,
    pub reason: BreakReason,
    pub detail: String,
    pub detected_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct BreakFilter {
    pub reason: Option<BreakReason>,
    pub account_ref: Option<AccountRef>,
    /// Inclusive.
    pub from: Option<Timestamp>,
    /// Exclusive.
    pub to: Option<Timestamp>,
}

#[async_trait]
pub trait BreakStore: Send {
    async fn insert(&mut self, record: &BreakRecord) -> StoreResult<()>;
    /// Newest first (detected_at, then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &BreakFilter,
        page: PageRequest,
    ) -> StoreResult<Page<BreakRecord>>;
}
