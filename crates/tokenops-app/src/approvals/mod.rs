//! Approval requests and tasks: raising a request (by hand, or by the policy step through
//! [`raise`]), deciding and reassigning its tasks, cancelling it, and expiring it at its deadline
//! (`expiry`). The rules (approver expressions, the step rule, separation of duties, what a
//! request's pending tasks become) are `tokenops_domain::approval`'s; this module loads, locks
//! and records.
//!
//! One task per (step, approver expression): every expression of a step must approve before the
//! next step opens; one rejection rejects the request. A request of source POLICY hands its
//! resolution to the [`ResolutionEffect`] in the same transaction: that is where the settlement
//! pipeline plugs in (the guarded operation moves on, is cancelled or fails).

mod decide;
mod expiry;
mod raise;

pub use expiry::ExpireApprovals;
pub(crate) use raise::unresolvable;
pub use raise::{Raise, StepApprover, raise, raise_resolved};

use async_trait::async_trait;
use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::approval::ApprovalRequestStatus;
use tokenops_domain::approval::{
    ApprovalRequest, ApprovalRequestFilter, ApprovalSource, ApprovalTask, ApprovalTaskFilter,
};
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Store, Tx};
use uuid::Uuid;

use crate::error::{AppResult, Code, Error};
use crate::write::{AuditAction, AuditResource};

const APPROVAL_REQUEST: AuditResource = AuditResource { category: "APPROVAL", resource_type: "approval_request" };
pub const RAISE: AuditAction = APPROVAL_REQUEST.action("approval.request.create");
pub const CANCEL: AuditAction = APPROVAL_REQUEST.action("approval.request.cancel");
pub const EXPIRE: AuditAction = APPROVAL_REQUEST.action("approval.request.expire");
const APPROVAL_TASK: AuditResource = AuditResource { category: "APPROVAL", resource_type: "approval_task" };
pub const APPROVE: AuditAction = APPROVAL_TASK.action("approval.task.approve").per_caller();
pub const REJECT: AuditAction = APPROVAL_TASK.action("approval.task.reject").per_caller();
pub const REASSIGN: AuditAction = APPROVAL_TASK.action("approval.task.reassign").per_caller();

/// Tunables: a request's lifetime (`TOKENOPS_APPROVAL_LIFETIME_MS`) and the attempts of the jobs
/// it enqueues.
#[derive(Debug, Clone, Copy)]
pub struct ApprovalSettings {
    pub lifetime_ms: i64,
    pub job_max_attempts: u32,
}

/// What happens to the operation a POLICY request guards once the request is resolved
/// (APPROVED, REJECTED, CANCELLED or EXPIRED: the record's status), in the resolving
/// transaction. The settlement pipeline implements it (supplement §6: approved → settle,
/// cancelled → operation CANCELLED, rejected → APPROVAL_REJECTED, expired → POLICY_EXPIRED).
#[async_trait]
pub trait ResolutionEffect: Send + Sync {
    async fn resolved(&self, tx: &mut dyn Tx, request: &ApprovalRequest, now: Timestamp) -> AppResult<()>;
}

/// What events a change publishes carry besides the request: the organisation, the time, and
/// the causing request's correlation id and Idempotency-Key (none for the expiry job).
#[derive(Debug, Clone)]
pub struct EventContext {
    pub tenant: TenantId,
    pub now: Timestamp,
    pub correlation_id: Option<String>,
    pub idempotency_key: Option<String>,
}

/// An approval task as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalTaskOut {
    pub id: Uuid,
    pub request_id: Uuid,
    /// Steps open in ascending order: a step opens once every task of the earlier steps is
    /// APPROVED.
    pub step: u32,
    /// Who may act: approver expressions (`#groupKey`: the group's ACTIVE members when acting;
    /// `user:<uuid>`).
    pub approvers: Vec<String>,
    /// PENDING, APPROVED, REJECTED, CANCELLED or EXPIRED.
    #[schema(example = "PENDING")]
    pub state: &'static str,
    /// The approver's token subject once acted on.
    pub acted_by: Option<String>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub acted_at: Option<Timestamp>,
    pub comment: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

impl From<&ApprovalTask> for ApprovalTaskOut {
    fn from(t: &ApprovalTask) -> Self {
        Self {
            id: t.id,
            request_id: t.request_id,
            step: t.step,
            approvers: t.approvers.clone(),
            state: t.state.as_str(),
            acted_by: t.acted_by.clone(),
            acted_at: t.acted_at,
            comment: t.comment.clone(),
            created_at: t.created_at,
        }
    }
}

/// An approval request as the API returns it (and as approval events carry it).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestOut {
    pub id: Uuid,
    /// PENDING, APPROVED, REJECTED, CANCELLED or EXPIRED.
    #[schema(example = "PENDING")]
    pub status: &'static str,
    /// A policy action (MINT, TRANSFER, …) for POLICY requests; the caller's text for MANUAL ones.
    pub action: String,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// The token subject that raised it (for POLICY: the operation's submitter). Never an
    /// eligible approver.
    pub initiator: String,
    /// POLICY or MANUAL.
    #[schema(example = "MANUAL")]
    pub source: &'static str,
    pub title: Option<String>,
    pub description: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    /// When a PENDING request expires (EXPIRED, its pending tasks EXPIRED).
    #[schema(value_type = String, format = DateTime)]
    pub expires_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub resolved_at: Option<Timestamp>,
    /// Who resolved it: the approver whose decision did, or who cancelled it; null while
    /// PENDING and when it expired.
    pub acted_by: Option<String>,
    /// The request's tasks by step; given on reads by id, on writes and in events, not in lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<ApprovalTaskOut>>,
}

impl ApprovalRequestOut {
    pub fn new(r: &ApprovalRequest, tasks: Option<&[ApprovalTask]>) -> Self {
        Self {
            id: r.id,
            status: r.status.as_str(),
            action: r.action.clone(),
            resource_type: r.resource_type.clone(),
            resource_id: r.resource_id.clone(),
            initiator: r.initiator.clone(),
            source: r.source.as_str(),
            title: r.title.clone(),
            description: r.description.clone(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            resolved_at: r.resolved_at,
            acted_by: r.acted_by.clone(),
            tasks: tasks.map(|ts| ts.iter().map(ApprovalTaskOut::from).collect()),
        }
    }
}

pub(crate) fn request_not_found(id: Uuid) -> Error {
    Error::not_found(format!("Approval request {id} not found")).with_code(Code::ApprovalRequestNotFound)
}

pub(crate) fn task_not_found(id: Uuid) -> Error {
    Error::not_found(format!("Approval task {id} not found")).with_code(Code::ApprovalTaskNotFound)
}

/// Publishes an approval event whose data is the request with its tasks (supplement §7).
pub(crate) async fn publish(
    tx: &mut dyn Tx,
    ctx: &EventContext,
    event_type: EventType,
    request: &ApprovalRequest,
    tasks: &[ApprovalTask],
    max_attempts: u32,
) -> AppResult<()> {
    let data = serde_json::to_value(ApprovalRequestOut::new(request, Some(tasks)))
        .map_err(|e| Error::internal(e.to_string()))?;
    let event = Event {
        id: new_id(),
        tenant_id: ctx.tenant,
        event_type: event_type.as_str().to_owned(),
        occurred_at: ctx.now,
        correlation_id: ctx.correlation_id.clone(),
        idempotency_key: ctx.idempotency_key.clone(),
        resource: ResourceRef::new("approval_request", request.id.to_string()),
        data,
        dispatched_at: None,
    };
    crate::events::publish(tx, &event, max_attempts, ctx.now).await
}

/// Closes `request` with `status` (not PENDING) at `now`: its still-PENDING tasks take what the
/// domain says they become, and a POLICY request's operation moves on through `effect`.
pub(crate) async fn close(
    tx: &mut dyn Tx,
    effect: &dyn ResolutionEffect,
    request: &mut ApprovalRequest,
    tasks: &mut [ApprovalTask],
    status: ApprovalRequestStatus,
    acted_by: Option<String>,
    now: Timestamp,
) -> AppResult<()> {
    request.status = status;
    request.resolved_at = Some(now);
    request.acted_by = acted_by;
    request.updated_at = now;
    tx.approvals().update_request(request).await?;
    if let Some(state) = status.pending_tasks_become() {
        for task in tasks.iter_mut().filter(|t| t.state == tokenops_domain::approval::ApprovalTaskState::Pending) {
            task.state = state;
            task.updated_at = now;
            tx.approvals().update_task(task).await?;
        }
    }
    if request.source == ApprovalSource::Policy {
        effect.resolved(tx, request, now).await?;
    }
    Ok(())
}

pub struct Approvals {
    store: Arc<dyn Store>,
    settings: ApprovalSettings,
    effect: Arc<dyn ResolutionEffect>,
}

impl Approvals {
    pub fn new(store: Arc<dyn Store>, settings: ApprovalSettings, effect: Arc<dyn ResolutionEffect>) -> Self {
        Self { store, settings, effect }
    }

    pub fn settings(&self) -> ApprovalSettings {
        self.settings
    }

    pub async fn list_requests(
        &self,
        tenant: TenantId,
        filter: &ApprovalRequestFilter,
        page: PageRequest,
    ) -> AppResult<Page<ApprovalRequestOut>> {
        let mut tx = self.store.read().await?;
        let found = tx.approvals().list_requests(tenant, filter, page).await?;
        Ok(found.map(|r| ApprovalRequestOut::new(&r, None)))
    }

    /// The request with its tasks.
    pub async fn get_request(&self, tenant: TenantId, id: Uuid) -> AppResult<ApprovalRequestOut> {
        let mut tx = self.store.read().await?;
        let request = tx.approvals().get_request(tenant, id).await?.ok_or_else(|| request_not_found(id))?;
        let tasks = tx.approvals().tasks_of(tenant, id, false).await?;
        Ok(ApprovalRequestOut::new(&request, Some(&tasks)))
    }

    pub async fn list_tasks(
        &self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> AppResult<Page<ApprovalTaskOut>> {
        let mut tx = self.store.read().await?;
        let found = tx.approvals().list_tasks(tenant, filter, page).await?;
        Ok(found.map(|t| ApprovalTaskOut::from(&t)))
    }

    pub async fn get_task(&self, tenant: TenantId, id: Uuid) -> AppResult<ApprovalTaskOut> {
        let mut tx = self.store.read().await?;
        let task = tx.approvals().get_task(tenant, id).await?.ok_or_else(|| task_not_found(id))?;
        Ok(ApprovalTaskOut::from(&task))
    }
}
