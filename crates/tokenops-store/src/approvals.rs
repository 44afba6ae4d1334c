//! Approval requests and their tasks: `ApprovalRequest`, `ApprovalTask`, their list
//! filters and `ApprovalStore`.

use async_trait::async_trait;
use tokenops_domain::approval::{ApprovalRequest, ApprovalRequestFilter, ApprovalTask, ApprovalTaskFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::{self, Encode};
use crate::{TableRows, TableWrites, conditions};

#[async_trait]
pub trait ApprovalStore: Send + TableRows<ApprovalRequest> + TableRows<ApprovalTask> + TableWrites {
    async fn insert_request(&mut self, request: &ApprovalRequest) -> StoreResult<()> {
        self.insert_row(&rows::APPROVAL_REQUESTS, request.values()?, "approval request id").await
    }
    /// Replaces status, resolved_at, acted_by and updated_at.
    async fn update_request(&mut self, request: &ApprovalRequest) -> StoreResult<()> {
        let set = ["status", "resolved_at", "acted_by", "updated_at"];
        self.update_row(&rows::APPROVAL_REQUESTS, request.values()?, &set).await.map(drop)
    }
    async fn get_request(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<ApprovalRequest>> {
        self.row_by_key(tenant, &rows::APPROVAL_REQUESTS, KeyValue::Id(id), false).await
    }
    /// As `get_request`, locking the row for the rest of the transaction: every change of a
    /// request or its tasks takes this lock first, so they apply one after the other.
    async fn get_request_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<ApprovalRequest>> {
        self.row_by_key(tenant, &rows::APPROVAL_REQUESTS, KeyValue::Id(id), true).await
    }
    /// Unresolved requests first (newest first), then by resolved_at descending; id breaks ties.
    async fn list_requests(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalRequestFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalRequest>> {
        let order = "(resolved_at IS NULL) DESC, resolved_at DESC, created_at DESC, id DESC";
        self.page_rows(tenant, &rows::APPROVAL_REQUESTS, conditions::approval_requests(filter), order, page).await
    }
    /// PENDING requests of any organisation whose deadline is at or before `now`, oldest
    /// deadline first: the expiry sweep.
    async fn pending_past_expiry(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<ApprovalRequest>>;
    /// How many requests of all organisations are PENDING, and when the oldest was created.
    async fn pending_summary(&mut self) -> StoreResult<(u64, Option<Timestamp>)>;
    /// The organisation's requests about any of `resource_ids` of `resource_type` (the ids
    /// compared exactly), in no particular order.
    async fn requests_for_resources(
        &mut self,
        tenant: TenantId,
        resource_type: &str,
        resource_ids: &[String],
    ) -> StoreResult<Vec<ApprovalRequest>>;

    async fn insert_task(&mut self, task: &ApprovalTask) -> StoreResult<()> {
        self.insert_row(&rows::APPROVAL_TASKS, task.values()?, "approval task id").await
    }
    /// Replaces approvers, state, acted_by, acted_at, comment and updated_at.
    async fn update_task(&mut self, task: &ApprovalTask) -> StoreResult<()> {
        let set = ["approvers", "state", "acted_by", "acted_at", "comment", "updated_at"];
        self.update_row(&rows::APPROVAL_TASKS, task.values()?, &set).await.map(drop)
    }
    async fn get_task(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<ApprovalTask>> {
        self.row_by_key(tenant, &rows::APPROVAL_TASKS, KeyValue::Id(id), false).await
    }
    /// A request's tasks by step, then creation; locked for the rest of the transaction when
    /// `for_update`.
    async fn tasks_of(
        &mut self,
        tenant: TenantId,
        request_id: Uuid,
        for_update: bool,
    ) -> StoreResult<Vec<ApprovalTask>> {
        let order = "step ASC, created_at ASC, id ASC";
        self.rows_where(tenant, &rows::APPROVAL_TASKS, conditions::tasks_of_request(request_id), order, for_update)
            .await
    }
    /// Newest first by created_at, id breaking ties.
    async fn list_tasks(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalTask>>;
}
