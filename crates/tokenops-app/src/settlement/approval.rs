//! Operations the policies hold for people: AWAITING_APPROVAL with a POLICY approval request
//! raised in the same commit (`hold_row`), and what the request's resolution does to them
//! (`PolicyResolution`, the approvals service's `ResolutionEffect`).

use async_trait::async_trait;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::Timestamp;
use tokenops_domain::approval::{ApprovalRequest, ApprovalRequestStatus, ApprovalSource, ApproverExpr};
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::EventType;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::operation::{FailureCode, Operation, OperationState};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::permission::Permission;
use tokenops_domain::policy::PolicyAction;
use tokenops_store::{Tx, UserFilter};
use uuid::Uuid;

use super::evaluate::APPROVERS_UNRESOLVABLE;
use super::{POLICY_RESOURCE_TYPE, Pipeline};
use crate::approvals::{EventContext, Raise, ResolutionEffect, StepApprover, raise_resolved, unresolvable};
use crate::error::{AppResult, Error};
use crate::identity::access::role_grants;
use crate::jobs::{JobError, kinds};

/// What the engine asked for an operation: approvers by step, and whether a policy matched no
/// rule and wants a manual review; `reasons` describe the rules for the request.
pub(super) struct Approval {
    pub action: PolicyAction,
    pub steps: BTreeMap<u32, BTreeSet<ApproverExpr>>,
    pub manual_review: bool,
    pub reasons: String,
}

impl Pipeline {
    /// Holds the operation (its row as read for update, still SUBMITTED) for approval: it
    /// becomes AWAITING_APPROVAL (`transaction.awaiting_approval`) and a POLICY request with
    /// one task per (step, approver) is raised (`approval.requested`), all in `tx`. A manual
    /// review adds one step-0 task whose approver set is every ACTIVE user of the organisation
    /// holding `policy:update` but the submitter: any one of them decides it. When an approver names nobody but the submitter (or nobody at all),
    /// no request could ever be granted: the operation fails VALIDATION_REJECTED
    /// `APPROVERS_UNRESOLVABLE` instead of waiting for its expiry.
    pub(super) async fn hold_row(
        &self,
        tx: &mut dyn Tx,
        row: Option<Operation>,
        approval: Approval,
        now: Timestamp,
    ) -> Result<(), JobError> {
        let Some(operation) = row.filter(|o| o.state == OperationState::Submitted) else {
            return Ok(());
        };
        let tenant = operation.tenant_id;
        let resolved = resolve_approvers(tx, tenant, &operation.submitted_by, &approval.steps, approval.manual_review)
            .await
            .map_err(JobError::retry)?;
        if !resolved.problems.is_empty() {
            let reason = format!("{APPROVERS_UNRESOLVABLE}: {}", resolved.problems.join("; "));
            let from = OperationState::Submitted;
            return self.fail_row(tx, Some(operation), from, FailureCode::ValidationRejected, reason, None, now).await;
        }
        let change = |o: &mut Operation| o.state = OperationState::AwaitingApproval;
        let Some(operation) = self.advance_row(tx, Some(operation), OperationState::Submitted, change, now).await?
        else {
            return Ok(());
        };
        self.publish(tx, EventType::TransactionAwaitingApproval, &operation, now).await?;
        self.audit(tx, &operation, AuditOutcome::Success, now).await?;
        let ctx = EventContext {
            tenant,
            now,
            correlation_id: operation.correlation_id.clone(),
            idempotency_key: operation.idempotency_key.clone(),
        };
        let request = Raise {
            source: ApprovalSource::Policy,
            action: approval.action.as_str().to_owned(),
            resource_type: Some(POLICY_RESOURCE_TYPE.to_owned()),
            resource_id: Some(operation.id.to_string()),
            initiator: operation.submitted_by.clone(),
            title: Some(format!("{} {} of {}", operation.tx_type.as_str(), operation.id, operation.asset_id)),
            description: Some(approval.reasons),
            approvers: resolved.approvers,
            reviewers: resolved.reviewers.into_iter().map(ApproverExpr::User).collect(),
        };
        let (request, tasks) = raise_resolved(tx, &self.approvals, &ctx, request).await.map_err(JobError::retry)?;
        // The request's own record, as a manual one gets (`approval.request.create`), so that the
        // audit log finds every request by its id, whoever raised it.
        let after = crate::approvals::ApprovalRequestOut::new(&request, Some(&tasks));
        crate::audit::record_worker(
            tx,
            tenant,
            &crate::approvals::RAISE,
            request.id.to_string(),
            AuditOutcome::Success,
            serde_json::json!({ "after": after }),
            now,
        )
        .await?;
        Ok(())
    }

    /// What a POLICY request's resolution does to the operation it guards (still
    /// AWAITING_APPROVAL, else nothing): APPROVED → PENDING_SETTLEMENT and a settle job (the
    /// path an approved evaluation takes); REJECTED → FAILED APPROVAL_REJECTED
    /// (`transaction.rejected`); CANCELLED → CANCELLED (`transaction.cancelled`); EXPIRED →
    /// FAILED POLICY_EXPIRED (`transaction.failed`). A LOCK only holds funds once CONFIRMED, so a
    /// refused one leaves no lock.
    async fn resolve_held(&self, tx: &mut dyn Tx, request: &ApprovalRequest, now: Timestamp) -> Result<(), JobError> {
        let Some(id) = request
            .resource_id
            .as_deref()
            .filter(|_| request.resource_type.as_deref() == Some(POLICY_RESOURCE_TYPE))
            .and_then(|id| Uuid::parse_str(id).ok())
        else {
            return Ok(());
        };
        let tenant = request.tenant_id;
        let row = tx.operations().get_for_update(tenant, id).await?;
        let from = OperationState::AwaitingApproval;
        let by = request.acted_by.as_deref().unwrap_or("an approver");
        match request.status {
            ApprovalRequestStatus::Pending => Ok(()),
            ApprovalRequestStatus::Approved => {
                let change = |o: &mut Operation| o.state = OperationState::PendingSettlement;
                if let Some(o) = self.advance_row(tx, row, from, change, now).await? {
                    tx.jobs().enqueue(&self.job(kinds::OPERATION_SETTLE, tenant, o.id, now), now).await?;
                }
                Ok(())
            }
            ApprovalRequestStatus::Rejected => {
                let reason = format!("approval request {} rejected by {by}", request.id);
                self.fail_row(tx, row, from, FailureCode::ApprovalRejected, reason, None, now).await
            }
            ApprovalRequestStatus::Expired => {
                let reason = format!("approval request {} expired", request.id);
                self.fail_row(tx, row, from, FailureCode::PolicyExpired, reason, None, now).await
            }
            ApprovalRequestStatus::Cancelled => {
                let change = |o: &mut Operation| o.state = OperationState::Cancelled;
                if let Some(o) = self.advance_row(tx, row, from, change, now).await? {
                    self.publish(tx, EventType::TransactionCancelled, &o, now).await?;
                    self.audit(tx, &o, AuditOutcome::Failure, now).await?;
                }
                Ok(())
            }
        }
    }
}

/// Who would decide an operation a policy holds, as they resolve now.
pub(crate) struct ResolvedApprovers {
    /// One per (step, expression) the decision names.
    pub approvers: Vec<StepApprover>,
    /// The reviewers of a manual review.
    pub reviewers: BTreeSet<Uuid>,
    /// Why no request could ever be granted (an approver naming nobody but the submitter, or
    /// nobody; a review nobody else may do); empty when one can.
    pub problems: Vec<String>,
}

/// The approvers and reviewers of a decision for an operation `submitter` submitted. The
/// pipeline holds the operation on them, and the policy simulation foretells the same.
pub(crate) async fn resolve_approvers(
    tx: &mut dyn Tx,
    tenant: TenantId,
    submitter: &str,
    steps: &BTreeMap<u32, BTreeSet<ApproverExpr>>,
    manual_review: bool,
) -> AppResult<ResolvedApprovers> {
    let approvers: Vec<StepApprover> = steps
        .iter()
        .flat_map(|(step, exprs)| exprs.iter().map(|e| StepApprover { step: *step, approver: e.clone() }))
        .collect();
    let reviewers = if manual_review { reviewers(tx, tenant, submitter).await? } else { BTreeSet::new() };
    let mut problems: Vec<String> = if approvers.is_empty() {
        Vec::new()
    } else {
        unresolvable(tx, tenant, submitter, &approvers).await?.into_iter().map(|p| p.message).collect()
    };
    if manual_review && reviewers.is_empty() {
        problems.push("no ACTIVE user other than the submitter holds policy:update to review it".to_owned());
    }
    Ok(ResolvedApprovers { approvers, reviewers, problems })
}

/// Who reviews an operation a policy matched no rule of (`REQUIRE_MANUAL_REVIEW`): the
/// organisation's ACTIVE users whose role grants `policy:update`, but the submitter.
async fn reviewers(tx: &mut dyn Tx, tenant: TenantId, submitter: &str) -> AppResult<BTreeSet<Uuid>> {
    let submitter = Uuid::parse_str(submitter).ok();
    let filter = UserFilter { status: Some(UserStatus::Active), ..UserFilter::default() };
    let mut grants = HashMap::new();
    let mut found = BTreeSet::new();
    let mut page = PageRequest { page: 0, size: 100 };
    loop {
        let users = tx.users().list(tenant, &filter, &[], page).await?;
        let last = users.items.len() < page.size as usize;
        for user in users.items.iter().filter(|u| Some(u.id) != submitter) {
            let held = match grants.entry(user.role_id) {
                Entry::Occupied(found) => *found.get(),
                Entry::Vacant(slot) => *slot.insert(role_grants(tx, tenant, user.role_id).await?),
            };
            if held.contains(Permission::PolicyUpdate) {
                found.insert(user.id);
            }
        }
        if last {
            return Ok(found);
        }
        page.page += 1;
    }
}

/// The settlement pipeline as the approvals service's resolution effect.
pub struct PolicyResolution(pub Arc<Pipeline>);

#[async_trait]
impl ResolutionEffect for PolicyResolution {
    async fn resolved(&self, tx: &mut dyn Tx, request: &ApprovalRequest, now: Timestamp) -> AppResult<()> {
        self.0.resolve_held(tx, request, now).await.map_err(|e| Error::internal(e.to_string()))
    }
}
