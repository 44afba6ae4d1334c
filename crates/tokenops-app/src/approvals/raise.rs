//! Raising a request, and resolving approver expressions to the users they name now: a
//! `#groupKey` is an ACTIVE group's ACTIVE members, `user:<uuid>` an ACTIVE user of the
//! organisation.

use std::collections::BTreeSet;
use tokenops_domain::approval::{ApprovalRequest, ApprovalSource, ApprovalTask};
use tokenops_domain::approval::{ApprovalRequestStatus, ApprovalTaskState, ApproverExpr};
use tokenops_domain::event::EventType;
use tokenops_domain::identity::{GroupStatus, UserStatus};
use tokenops_domain::paging::PageRequest;
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{NewJob, Tx};
use uuid::Uuid;

use super::{ApprovalRequestOut, ApprovalSettings, Approvals, EventContext, publish};
use crate::error::{AppResult, Error, FieldError};
use crate::jobs::kinds;
use crate::write::Write;

/// One approver expression's sign-off at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepApprover {
    pub step: u32,
    pub approver: ApproverExpr,
}

/// What a new request is about and who must approve it.
#[derive(Debug, Clone)]
pub struct Raise {
    pub source: ApprovalSource,
    pub action: String,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// The token subject raising it; never one of its approvers.
    pub initiator: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// One task each. Field names in errors are `approvers[i].approver`.
    pub approvers: Vec<StepApprover>,
    /// A manual review: one step-0 task whose approver set is all of these, so that any one of
    /// them decides it (a policy's `defaults.unmatched` REQUIRE_MANUAL_REVIEW). Resolved by the
    /// caller already; a request needs an approver or a reviewer.
    pub reviewers: Vec<ApproverExpr>,
}

/// The ACTIVE users `expr` names now, or why it names nobody (a sentence for the caller).
pub(crate) async fn resolve(
    tx: &mut dyn Tx,
    tenant: TenantId,
    expr: &ApproverExpr,
) -> AppResult<Result<BTreeSet<Uuid>, String>> {
    match expr {
        ApproverExpr::Group(key) => {
            let Some(group) = tx.groups().find_by_key(tenant, key).await? else {
                return Ok(Err(format!("{expr}: the organisation has no approval group with key {key}")));
            };
            if group.status != GroupStatus::Active {
                return Ok(Err(format!("{expr}: approval group {key} is deactivated")));
            }
            let mut members = BTreeSet::new();
            let mut page = PageRequest { page: 0, size: 100 };
            loop {
                let found = tx.groups().list_members(tenant, group.id, page).await?;
                let last = found.items.len() < page.size as usize;
                members.extend(found.items.iter().filter(|u| u.status == UserStatus::Active).map(|u| u.id));
                if last {
                    break;
                }
                page.page += 1;
            }
            Ok(Ok(members))
        }
        ApproverExpr::User(id) => match tx.users().get(tenant, *id).await? {
            None => Ok(Err(format!("{expr}: the organisation has no such user"))),
            Some(user) if user.status != UserStatus::Active => Ok(Err(format!("{expr}: the user is not ACTIVE"))),
            Some(user) => Ok(Ok(BTreeSet::from([user.id]))),
        },
    }
}

/// The users of all `approvers` now; expressions that no longer resolve add nobody.
pub(crate) async fn eligible_users(
    tx: &mut dyn Tx,
    tenant: TenantId,
    approvers: &[String],
) -> AppResult<BTreeSet<Uuid>> {
    let mut users = BTreeSet::new();
    for text in approvers {
        if let Ok(expr) = ApproverExpr::parse(text)
            && let Ok(found) = resolve(tx, tenant, &expr).await?
        {
            users.extend(found);
        }
    }
    Ok(users)
}

/// The initiator as a user id, when it is one (a machine client's subject is not, and is never
/// among an expression's users).
pub(crate) fn initiator_user(initiator: &str) -> Option<Uuid> {
    Uuid::parse_str(initiator).ok()
}

/// The approvers that do not resolve to someone other than `initiator` now, one detail each
/// (field `approvers[i].approver`): a request naming any of them cannot be raised.
pub(crate) async fn unresolvable(
    tx: &mut dyn Tx,
    tenant: TenantId,
    initiator: &str,
    approvers: &[StepApprover],
) -> AppResult<Vec<FieldError>> {
    let initiator = initiator_user(initiator);
    let mut problems = Vec::new();
    for (i, step) in approvers.iter().enumerate() {
        let field = format!("approvers[{i}].approver");
        match resolve(tx, tenant, &step.approver).await? {
            Err(why) => problems.push(FieldError { field, message: why }),
            Ok(users) => {
                let others = users.iter().filter(|u| Some(**u) != initiator).count();
                if others == 0 {
                    let message = if users.is_empty() {
                        format!("{}: names no ACTIVE user", step.approver)
                    } else {
                        format!("{}: names only the initiator, who cannot approve their own request", step.approver)
                    };
                    problems.push(FieldError { field, message });
                }
            }
        }
    }
    Ok(problems)
}

/// Records a PENDING request with one task per (step, approver), publishes
/// `approval.requested` and schedules its expiry, all in `tx`: the caller's transaction, so
/// the policy step can raise a request with the operation's own change. Every expression must
/// resolve to someone other than the initiator (400, VALIDATION_FAILED, one detail per
/// expression that does not).
pub async fn raise(
    tx: &mut dyn Tx,
    settings: &ApprovalSettings,
    ctx: &EventContext,
    raise: Raise,
) -> AppResult<(ApprovalRequest, Vec<ApprovalTask>)> {
    if raise.approvers.is_empty() && raise.reviewers.is_empty() {
        return Err(Error::invalid_field("approvers", "must name at least one approver"));
    }
    let problems = unresolvable(tx, ctx.tenant, &raise.initiator, &raise.approvers).await?;
    if !problems.is_empty() {
        let summary = problems.iter().map(|p| p.message.as_str()).collect::<Vec<_>>().join("; ");
        return Err(Error::bad_request(format!("Approvers cannot be resolved: {summary}")).with_details(problems));
    }
    raise_resolved(tx, settings, ctx, raise).await
}

/// As [`raise`], for approvers the caller has resolved in this same transaction (the policy
/// step, which fails the operation when they cannot be). Resolving them twice could tell two
/// stories on PostgreSQL, whose statements each see the latest commits: a member suspended
/// between the two checks refused what the first had passed, and the operation was decided
/// again later (a race probe saw it in three rounds of fifteen). A change after the request is
/// raised is met as any later one is: by reassignment, cancellation or expiry.
pub async fn raise_resolved(
    tx: &mut dyn Tx,
    settings: &ApprovalSettings,
    ctx: &EventContext,
    raise: Raise,
) -> AppResult<(ApprovalRequest, Vec<ApprovalTask>)> {
    let now = ctx.now;
    let request = ApprovalRequest {
        id: new_id(),
        tenant_id: ctx.tenant,
        status: ApprovalRequestStatus::Pending,
        source: raise.source,
        action: raise.action,
        resource_type: raise.resource_type,
        resource_id: raise.resource_id,
        initiator: raise.initiator,
        title: raise.title,
        description: raise.description,
        expires_at: Timestamp::from_micros(now.as_micros().saturating_add(settings.lifetime_ms.saturating_mul(1_000))),
        resolved_at: None,
        acted_by: None,
        created_at: now,
        updated_at: now,
    };
    tx.approvals().insert_request(&request).await?;
    let mut approvers = raise.approvers;
    approvers.sort_by(|a, b| (a.step, &a.approver).cmp(&(b.step, &b.approver)));
    let mut sets: Vec<(u32, Vec<String>)> =
        approvers.into_iter().map(|a| (a.step, vec![a.approver.to_string()])).collect();
    if !raise.reviewers.is_empty() {
        sets.insert(0, (0, raise.reviewers.iter().map(ToString::to_string).collect()));
    }
    let mut tasks = Vec::with_capacity(sets.len());
    for (step, approvers) in sets {
        let task = ApprovalTask {
            id: new_id(),
            tenant_id: ctx.tenant,
            request_id: request.id,
            step,
            approvers,
            state: ApprovalTaskState::Pending,
            acted_by: None,
            acted_at: None,
            comment: None,
            created_at: now,
            updated_at: now,
        };
        tx.approvals().insert_task(&task).await?;
        tasks.push(task);
    }
    publish(tx, ctx, EventType::ApprovalRequested, &request, &tasks, settings.job_max_attempts).await?;
    let expire = NewJob {
        kind: kinds::APPROVALS_EXPIRE.to_owned(),
        tenant_id: Some(ctx.tenant),
        payload: crate::trace::stamp(serde_json::json!({ "requestId": request.id })),
        run_at: request.expires_at,
        max_attempts: settings.job_max_attempts,
        dedupe_key: None,
    };
    tx.jobs().enqueue(&expire, now).await?;
    Ok((request, tasks))
}

/// The write's event context: its organisation, time, correlation id and key.
pub(crate) fn event_context(w: &Write) -> AppResult<EventContext> {
    Ok(EventContext {
        tenant: w.tenant()?,
        now: w.now(),
        correlation_id: w.context().correlation_id.clone(),
        idempotency_key: w.idempotency_key().map(str::to_owned),
    })
}

impl Approvals {
    /// `POST /api/approvals/requests`: a MANUAL request with the caller as initiator.
    pub async fn raise_manual(&self, w: &mut Write, mut request: Raise) -> AppResult<ApprovalRequestOut> {
        let ctx = event_context(w)?;
        request.source = ApprovalSource::Manual;
        request.initiator = w.context().caller.subject.clone();
        let (request, tasks) = raise(w.tx(), &self.settings, &ctx, request).await?;
        let out = ApprovalRequestOut::new(&request, Some(&tasks));
        w.set_resource_id(request.id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": out }));
        Ok(out)
    }
}
