//! Approval requests and their tasks: `ApprovalRequestRecord`, `ApprovalTaskRecord`, their list
//! filters and `ApprovalStore`.

use async_trait::async_trait;
use tokenops_domain::approval::{ApprovalRequestStatus, ApprovalTaskState};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

/// Who raised a request: a policy's decision on an operation, or a caller by hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ApprovalSource {
    Policy,
    Manual,
}

impl ApprovalSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalSource::Policy => "POLICY",
            ApprovalSource::Manual => "MANUAL",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "POLICY" => Some(ApprovalSource::Policy),
            "MANUAL" => Some(ApprovalSource::Manual),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequestRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub status: ApprovalRequestStatus,
    pub source: ApprovalSource,
    /// A policy action, or the free text of a manual request.
    pub action: String,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// The token subject that raised it (for a policy: the operation's submitter).
    pub initiator: String,
    pub title: Option<String>,
    pub description: Option<String>,
    pub expires_at: Timestamp,
    pub resolved_at: Option<Timestamp>,
    /// Who resolved it: the deciding approver, the canceller; `None` when it expired.
    pub acted_by: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalTaskRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub request_id: Uuid,
    pub step: u32,
    /// Approver expressions as written (`#groupKey`, `user:<uuid>`).
    pub approvers: Vec<String>,
    pub state: ApprovalTaskState,
    pub acted_by: Option<String>,
    pub acted_at: Option<Timestamp>,
    pub comment: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct ApprovalRequestFilter {
    pub status: Option<ApprovalRequestStatus>,
    pub acted_by: Option<String>,
    /// Half-open `[resolved_from, resolved_to)`; either excludes unresolved requests.
    pub resolved_from: Option<Timestamp>,
    pub resolved_to: Option<Timestamp>,
    pub action: Option<String>,
    pub resource_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct ApprovalTaskFilter {
    pub state: ApprovalTaskState,
    pub request_id: Option<Uuid>,
    /// Tasks whose approvers include this expression, exactly as written.
    pub approver: Option<String>,
}

#[async_trait]
pub trait ApprovalStore: Send {
    async fn insert_request(&mut self, request: &ApprovalRequestRecord) -> StoreResult<()>;
    /// Replaces status, resolved_at, acted_by and updated_at.
    async fn update_request(&mut self, request: &ApprovalRequestRecord) -> StoreResult<()>;
    async fn get_request(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<ApprovalRequestRecord>>;
    /// As `get_request`, locking the row for the rest of the transaction: every change of a
    /// request or its tasks takes this lock first, so they apply one after the other.
    async fn get_request_for_update(
        &mut self,
        tenant: TenantId,
        id: Uuid,
    ) -> StoreResult<Option<ApprovalRequestRecord>>;
    /// Unresolved requests first (newest first), then by resolved_at descending; id breaks ties.
    async fn list_requests(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalRequestFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalRequestRecord>>;
    /// PENDING requests of any organisation whose deadline is at or before `now`, oldest
    /// deadline first: the expiry sweep.
    async fn pending_past_expiry(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<ApprovalRequestRecord>>;

    async fn insert_task(&mut self, task: &ApprovalTaskRecord) -> StoreResult<()>;
    /// Replaces approvers, state, acted_by, acted_at, comment and updated_at.
    async fn update_task(&mut self, task: &ApprovalTaskRecord) -> StoreResult<()>;
    async fn get_task(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<ApprovalTaskRecord>>;
    /// A request's tasks by step, then creation; locked for the rest of the transaction when
    /// `for_update`.
    async fn tasks_of(
        &mut self,
        tenant: TenantId,
        request_id: Uuid,
        for_update: bool,
    ) -> StoreResult<Vec<ApprovalTaskRecord>>;
    /// Newest first by created_at, id breaking ties.
    async fn list_tasks(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalTaskRecord>>;
}
