//! The approval area's entities as the store keeps them: an `ApprovalRequest` (raised by a
//! policy or by hand, `ApprovalSource`), its `ApprovalTask`s, and their list filters.

use crate::wire::wire_enum;
use uuid::Uuid;

use super::{ApprovalRequestStatus, ApprovalTaskState};
use crate::{TenantId, Timestamp};

wire_enum! {
    /// Who raised a request: a policy's decision on an operation, or a caller by hand.
    ApprovalSource {
        Policy => "POLICY",
        Manual => "MANUAL",
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
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
pub struct ApprovalTask {
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
