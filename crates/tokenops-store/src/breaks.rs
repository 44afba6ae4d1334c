//! Breaks: `BreakStore` of the domain's `Break`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::operation::{Break, BreakFilter};
use tokenops_domain::paging::{Page, PageRequest};

use crate::StoreResult;
use crate::rows::Encode;
use crate::{TableRows, TableWrites, conditions, rows};

#[async_trait]
pub trait BreakStore: Send + TableRows<Break> + TableWrites {
    async fn insert(&mut self, record: &Break) -> StoreResult<()> {
        self.insert_row(&rows::BREAKS, record.values()?, "break id").await
    }
    /// Newest first (detected_at, then id, descending).
    async fn list(&mut self, tenant: TenantId, filter: &BreakFilter, page: PageRequest) -> StoreResult<Page<Break>> {
        self.page_rows(tenant, &rows::BREAKS, conditions::breaks(filter), "detected_at DESC, id DESC", page).await
    }
}
