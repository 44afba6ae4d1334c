//! Acting on a request: approving or rejecting a task, reassigning it, cancelling the request.
//! Every change locks the request row first, then its tasks, so two approvers acting at the same
//! instant apply one after the other and the second finds the task acted on (409).

use tokenops_domain::Timestamp;
use tokenops_domain::approval::{
    self, ActError, ActorError, ApprovalRequestStatus, ApprovalTaskState, ApproverExpr, ReassignError, TaskDecision,
    TaskStep,
};
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask};
use tokenops_domain::event::EventType;
use uuid::Uuid;

use super::raise::{eligible_users, event_context, initiator_user, resolve};
use super::{ApprovalRequestOut, ApprovalTaskOut, Approvals, close, publish, request_not_found, task_not_found};
use crate::context::Caller;
use crate::error::{AppResult, Code, Error};
use crate::write::Write;

fn act_error(e: ActError) -> Error {
    match e {
        ActError::RequestNotPending => Error::of(Code::ApprovalNotPending),
        ActError::AlreadyActedOn => Error::of(Code::TaskAlreadyActedOn),
        ActError::EarlierStepPending => Error::of(Code::EarlierStepPending),
        ActError::NoSuchTask => Error::internal("an approval task vanished from its locked request"),
    }
}

fn actor_error(e: ActorError) -> Error {
    Error::forbidden(format!("Separation of duties: {e}")).with_code(Code::SeparationOfDuties)
}

/// The caller's standing on a task: the initiator is refused even when eligible; a caller who is
/// not a user (a machine client) is never an eligible approver.
fn check_actor(caller: &Caller, initiator: &str, eligible: bool) -> Result<(), Error> {
    if caller.subject == initiator {
        return Err(actor_error(ActorError::Initiator));
    }
    let Some(user) = caller.user_id() else { return Err(actor_error(ActorError::NotEligible)) };
    approval::check_actor(user, initiator_user(initiator).unwrap_or(Uuid::nil()), eligible).map_err(actor_error)
}

/// The task, its request (locked) and all the request's tasks (locked); `index` is the task's
/// place among them.
struct Locked {
    request: ApprovalRequest,
    tasks: Vec<ApprovalTask>,
    index: usize,
}

async fn lock_task(w: &mut Write, task_id: Uuid) -> AppResult<Locked> {
    let tenant = w.tenant()?;
    let task = w.tx().approvals().get_task(tenant, task_id).await?.ok_or_else(|| task_not_found(task_id))?;
    let request = w
        .tx()
        .approvals()
        .get_request_for_update(tenant, task.request_id)
        .await?
        .ok_or_else(|| request_not_found(task.request_id))?;
    refuse_past_deadline(&request, w.now())?;
    let tasks = w.tx().approvals().tasks_of(tenant, request.id, true).await?;
    let index = tasks
        .iter()
        .position(|t| t.id == task_id)
        .ok_or_else(|| Error::internal("an approval task is missing from its request"))?;
    Ok(Locked { request, tasks, index })
}

/// A PENDING request past its deadline has expired, though the expiry job (due at that
/// instant) may not have closed it yet: nothing acts on it any more, 409 as for any request no
/// longer PENDING.
fn refuse_past_deadline(request: &ApprovalRequest, now: Timestamp) -> AppResult<()> {
    if request.status == ApprovalRequestStatus::Pending && request.expires_at <= now {
        return Err(Error::conflict(format!(
            "The approval request expired at {}; it is no longer pending",
            request.expires_at.to_iso8601()
        ))
        .with_code(Code::ApprovalNotPending));
    }
    Ok(())
}

impl Approvals {
    /// Approves or rejects a task. 403 for the initiator or a caller the task's approvers do not
    /// name now; 409 when the request is not PENDING, the task was acted on, or an earlier step
    /// is still pending. The last approval grants the request (`approval.granted`); a rejection
    /// rejects it (`approval.rejected`) and cancels its other pending tasks.
    pub async fn decide(
        &self,
        w: &mut Write,
        task_id: Uuid,
        decision: TaskDecision,
        comment: Option<String>,
    ) -> AppResult<ApprovalRequestOut> {
        let tenant = w.tenant()?;
        let Locked { mut request, mut tasks, index } = lock_task(w, task_id).await?;
        let now = w.now();
        let eligible = match w.context().caller.user_id() {
            Some(user) => eligible_users(w.tx(), tenant, &tasks[index].approvers).await?.contains(&user),
            None => false,
        };
        check_actor(&w.context().caller, &request.initiator, eligible)?;
        let mut steps: Vec<TaskStep> = tasks.iter().map(|t| TaskStep { step: t.step, state: t.state }).collect();
        let status = approval::act(request.status, &mut steps, index, decision).map_err(act_error)?;
        let subject = w.context().caller.subject.clone();
        let task = &mut tasks[index];
        task.state = decision.task_state();
        task.acted_by = Some(subject.clone());
        task.acted_at = Some(now);
        task.comment = comment;
        task.updated_at = now;
        w.tx().approvals().update_task(task).await?;
        let event = match status {
            ApprovalRequestStatus::Approved => Some(EventType::ApprovalGranted),
            ApprovalRequestStatus::Rejected => Some(EventType::ApprovalRejected),
            _ => None,
        };
        if let Some(event) = event {
            close(w.tx(), &*self.effect, &mut request, &mut tasks, status, Some(subject), now).await?;
            let ctx = event_context(w)?;
            publish(w.tx(), &ctx, event, &request, &tasks, self.settings.job_max_attempts).await?;
        }
        w.set_resource_id(task_id.to_string());
        w.set_audit_detail(serde_json::json!({
            "requestId": request.id,
            "step": tasks[index].step,
            "state": tasks[index].state.as_str(),
            "requestStatus": request.status.as_str(),
        }));
        Ok(ApprovalRequestOut::new(&request, Some(&tasks)))
    }

    /// Gives a PENDING task a new approver expression. 409 when the request is not PENDING or the
    /// task was acted on; 400 when the expression does not resolve or names only the initiator;
    /// 409 when it names exactly the users the task's approvers name now. Anyone with the
    /// permission may reassign, the initiator included (the spec's table has no 403 for it):
    /// separation of duties holds where it decides, at approve and reject, and the initiator is
    /// never among a task's approvers.
    pub async fn reassign(
        &self,
        w: &mut Write,
        task_id: Uuid,
        approver: ApproverExpr,
        comment: Option<String>,
    ) -> AppResult<ApprovalTaskOut> {
        let tenant = w.tenant()?;
        let Locked { request, mut tasks, index } = lock_task(w, task_id).await?;
        if request.status != ApprovalRequestStatus::Pending {
            return Err(Error::of(Code::ApprovalNotPending));
        }
        if tasks[index].state != ApprovalTaskState::Pending {
            return Err(Error::of(Code::TaskAlreadyActedOn));
        }
        let resolved = resolve(w.tx(), tenant, &approver)
            .await?
            .map_err(|why| Error::invalid_field("approver", format!("cannot be resolved: {why}")))?;
        let mut current = eligible_users(w.tx(), tenant, &tasks[index].approvers).await?;
        let initiator = initiator_user(&request.initiator).unwrap_or(Uuid::nil());
        current.remove(&initiator);
        approval::reassigned_approvers(&current, &resolved, initiator).map_err(|e| match e {
            ReassignError::OnlyInitiator => {
                Error::invalid_field("approver", format!("{approver} names no ACTIVE user other than the initiator"))
            }
            ReassignError::Unchanged => Error::of(Code::ApproversUnchanged),
        })?;
        let task = &mut tasks[index];
        let before = task.approvers.clone();
        task.approvers = vec![approver.to_string()];
        task.updated_at = w.now();
        w.tx().approvals().update_task(task).await?;
        w.set_resource_id(task_id.to_string());
        w.set_audit_detail(serde_json::json!({
            "requestId": request.id,
            "before": before,
            "after": task.approvers,
            "comment": comment,
        }));
        Ok(ApprovalTaskOut::from(&*task))
    }

    /// Cancels a PENDING request (409 otherwise); its pending tasks are CANCELLED. The route's
    /// guard (approval:request) decides who may: the initiator or any other holder of it.
    pub async fn cancel(&self, w: &mut Write, request_id: Uuid) -> AppResult<ApprovalRequestOut> {
        let tenant = w.tenant()?;
        let mut request = w
            .tx()
            .approvals()
            .get_request_for_update(tenant, request_id)
            .await?
            .ok_or_else(|| request_not_found(request_id))?;
        let now = w.now();
        if !request.status.may_cancel() {
            return Err(Error::of(Code::ApprovalNotPending));
        }
        refuse_past_deadline(&request, now)?;
        let mut tasks = w.tx().approvals().tasks_of(tenant, request_id, true).await?;
        let subject = w.context().caller.subject.clone();
        close(w.tx(), &*self.effect, &mut request, &mut tasks, ApprovalRequestStatus::Cancelled, Some(subject), now)
            .await?;
        let out = ApprovalRequestOut::new(&request, Some(&tasks));
        w.set_resource_id(request_id.to_string());
        w.set_audit_detail(serde_json::json!({ "status": request.status.as_str() }));
        Ok(out)
    }
}
