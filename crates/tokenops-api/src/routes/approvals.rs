//! Approvals under `/api/approvals`: tasks (list, style B, newest first, one state per call,
//! PENDING by default; read; approve, reject, reassign) and requests (list, style B, unresolved
//! first then resolvedAt descending; read with tasks; raise by hand; cancel while PENDING).

use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::approvals::{self, ApprovalRequestOut, ApprovalTaskOut, Raise, StepApprover};
use tokenops_app::error::FieldError;
use tokenops_domain::approval::{ApprovalRequestFilter, ApprovalSource, ApprovalTaskFilter};
use tokenops_domain::approval::{ApprovalRequestStatus, ApprovalTaskState, ApproverExpr, TaskDecision};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{required, validation_failed};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageB, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

const ACTION_MAX: usize = 100;
const RESOURCE_TYPE_MAX: usize = 64;
const RESOURCE_ID_MAX: usize = 200;
const TITLE_MAX: usize = 200;
const DESCRIPTION_MAX: usize = 2000;
const COMMENT_MAX: usize = 1000;
const APPROVERS_MAX: usize = 20;
const STEP_MAX: i64 = 9;
// The documented bounds of a raised request's fields.
const _: () = assert!(
    ACTION_MAX == 100
        && RESOURCE_TYPE_MAX == 64
        && RESOURCE_ID_MAX == 200
        && TITLE_MAX == 200
        && DESCRIPTION_MAX == 2000
        && APPROVERS_MAX == 20
);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    super::optional_bodies(
        OpenApiRouter::new()
            .routes(routes!(list_tasks))
            .routes(routes!(get_task))
            .routes(routes!(approve_task))
            .routes(routes!(reject_task))
            .routes(routes!(reassign_task))
            .routes(routes!(list_requests, raise_request))
            .routes(routes!(get_request))
            .routes(routes!(cancel_request)),
    )
}

/// A page of approval tasks (style B).
pub type ApprovalTaskPage = PageB<ApprovalTaskOut>;
/// A page of approval requests (style B), without their tasks.
pub type ApprovalRequestPage = PageB<ApprovalRequestOut>;

/// List approval tasks (paging style B, newest first).
#[utoipa::path(
    get, path = "/api/approvals/tasks", tag = "approvals", operation_id = "approvals.tasks.list",
    params(
        ("status" = Option<ApprovalTaskState>, Query, description = "One task state per call: PENDING (default), APPROVED, REJECTED, CANCELLED or EXPIRED"),
        ("state" = Option<ApprovalTaskState>, Query, description = "The same filter under the task field's name; give status or state, not both"),
        ("requestId" = Option<Uuid>, Query, description = "Only the tasks of this request"),
        ("approver" = Option<String>, Query, description = "Only tasks whose approvers include this expression (#groupKey or user:<uuid>), as written"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style B page of tasks, newest first by createdAt. The spec does not show page size bounds here: this service takes 1 to 100, default 20, and refuses others with 400", body = ApprovalTaskPage),
        (status = 400, description = "Unknown task state, status (or state) given twice or both given, requestId not a UUID, malformed approver expression, invalid paging", body = crate::openapi::ErrorBody),
    )
)]
async fn list_tasks(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    // The spec's table names the parameter status, its error row a task's "state" (the field's
    // own name): either is taken, not both.
    if params.has("status") && params.has("state") {
        return Err(Error::invalid_field("state", "give status or state, not both").into());
    }
    let name = if params.has("state") { "state" } else { "status" };
    let state_filter =
        params.one_of(name, &ApprovalTaskState::ALL, ApprovalTaskState::as_str)?.unwrap_or(ApprovalTaskState::Pending);
    let request_id = params.uuid("requestId")?;
    let approver = params
        .one("approver")?
        .map(|v| ApproverExpr::parse(v).map(|e| e.to_string()).map_err(|e| Error::invalid_field("approver", e)))
        .transpose()?;
    let filter = ApprovalTaskFilter { state: state_filter, request_id, approver };
    paging::list(&params, STRICT_SIZE, Style::B, |page| {
        call.state.app.approvals.list_tasks(call.scope.tenant, &filter, page)
    })
    .await
}

/// Read one approval task.
#[utoipa::path(
    get, path = "/api/approvals/tasks/{taskId}", tag = "approvals", operation_id = "approvals.tasks.get",
    params(path_params::TaskId),
    responses(
        (status = 200, description = "The task", body = ApprovalTaskOut),
        crate::openapi::NotAUuid<path_params::TaskId>,
        crate::openapi::NoSuchTask,
    )
)]
async fn get_task(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.approvals.get_task(tenant, id).await).await
}

/// A decision's body: an object, which may be empty, or no body at all.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DecisionIn {
    /// Optional, at most 1000 characters; kept on the task.
    pub comment: Option<String>,
}

fn comment(value: Option<String>) -> Result<Option<String>, Error> {
    let value = value.map(|c| c.trim().to_owned()).filter(|c| !c.is_empty());
    if value.as_ref().is_some_and(|c| c.chars().count() > COMMENT_MAX) {
        return Err(Error::invalid_field("comment", format!("must be at most {COMMENT_MAX} characters")));
    }
    Ok(value)
}

async fn decide(
    call: OptionalKeyWrite<PathId>,
    body: JsonBody<DecisionIn>,
    decision: TaskDecision,
) -> ApiResult<Response> {
    let action = match decision {
        TaskDecision::Approve => &approvals::APPROVE,
        TaskDecision::Reject => &approvals::REJECT,
    };
    let (id, comment) = (call.path.0, comment(body.value.comment)?);
    call.run(action, &body.document, async |app, w| Reply::ok(&app.approvals.decide(w, id, decision, comment).await?))
        .await
}

/// A decision's route: the same path shape, body and answers for both decisions; the 403 and
/// 409 rows say what each refuses.
macro_rules! decision_route {
    (
        $(#[doc = $doc:tt])*
        $name:ident, $path:tt, $operation:tt, $decision:expr,
        forbidden = $forbidden:tt, conflict = $conflict:tt $(,)?
    ) => {
        $(#[doc = $doc])*
        #[utoipa::path(
            post, path = $path, tag = "approvals", operation_id = $operation,
            params(
                path_params::TaskId,
                crate::openapi::OptionalIdempotencyKey,
            ),
            request_body(content = Option<DecisionIn>, description = "Optional: an object (may be empty), or no body"),
            responses(
                (status = 200, description = "The request after the decision, with its tasks", body = ApprovalRequestOut),
                (status = 400, description = "taskId not a UUID, body not an object, comment too long", body = crate::openapi::ErrorBody),
                (status = 403, description = $forbidden, body = crate::openapi::ErrorBody),
                crate::openapi::NoSuchTask,
                (status = 409, description = $conflict, body = crate::openapi::ErrorBody),
                (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the key was reused with a different body, or by another caller (a decision's answer is its caller's: another user's same key is not replayed to them)", body = crate::openapi::ErrorBody),
            )
        )]
        async fn $name(call: OptionalKeyWrite<PathId>, body: Option<JsonBody<DecisionIn>>) -> ApiResult<Response> {
            decide(call, JsonBody::or_default(body), $decision).await
        }
    };
}

decision_route! {
    /// Approve a task. The last approval of the last step grants the request (approval.granted).
    approve_task, "/api/approvals/tasks/{taskId}/approve", "approvals.tasks.approve", TaskDecision::Approve,
    forbidden = "Missing approval:decide; or separation of duties (SEPARATION_OF_DUTIES): the caller is the request's initiator, or not among the users the task's approvers name now (a group's ACTIVE members, or the named user). Machine clients are never approvers",
    conflict = "The task was acted on already (also when another approver acted at the same instant), an earlier step is still pending, or the request is not PENDING; or the key is in flight",
}

decision_route! {
    /// Reject a task: the request is REJECTED (approval.rejected) and its other pending tasks
    /// CANCELLED.
    reject_task, "/api/approvals/tasks/{taskId}/reject", "approvals.tasks.reject", TaskDecision::Reject,
    forbidden = "Missing approval:decide; or separation of duties: the initiator, or a caller the task's approvers do not name",
    conflict = "The task was acted on already, an earlier step is still pending, or the request is not PENDING; or the key is in flight",
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReassignIn {
    /// The task's new approver expression: `#groupKey` or `user:<uuid>`; it replaces the
    /// task's approvers.
    #[schema(required = true, value_type = String, example = "#treasury")]
    pub approver: Option<String>,
    /// Optional, at most 1000 characters; recorded in the audit log.
    pub comment: Option<String>,
}

/// Give a PENDING task a new approver expression.
#[utoipa::path(
    post, path = "/api/approvals/tasks/{taskId}/reassign", tag = "approvals", operation_id = "approvals.tasks.reassign",
    params(path_params::TaskId, crate::openapi::OptionalIdempotencyKey),
    request_body = ReassignIn,
    responses(
        (status = 200, description = "The task with its new approvers", body = ApprovalTaskOut),
        (status = 400, description = "approver missing or malformed, names no ACTIVE group or user of the organisation, or names no ACTIVE user but the initiator", body = crate::openapi::ErrorBody),
        (status = 403, description = "Missing approval:decide (any holder may reassign, the initiator included: the spec names no other refusal)", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchTask,
        (status = 409, description = "The request is not PENDING, the task was acted on, or the new expression names the same users as the task's approvers now; or the key is in flight", body = crate::openapi::ErrorBody),
        (status = 422, description = "IDEMPOTENCY_KEY_REUSED: the key was reused with a different body, or by another caller", body = crate::openapi::ErrorBody),
    )
)]
async fn reassign_task(call: OptionalKeyWrite<PathId>, body: JsonBody<ReassignIn>) -> ApiResult<Response> {
    let id = call.path.0;
    let text = required("approver", body.value.approver)?;
    let approver = ApproverExpr::parse(text.trim()).map_err(|e| Error::invalid_field("approver", e))?;
    let comment = comment(body.value.comment)?;
    call.run(&approvals::REASSIGN, &body.document, async |app, w| {
        Reply::ok(&app.approvals.reassign(w, id, approver, comment).await?)
    })
    .await
}

fn request_filter(params: &QueryParams) -> Result<ApprovalRequestFilter, Error> {
    let (resolved_from, resolved_to) = params.window_not_inverted("resolvedFrom", "resolvedTo")?;
    let text = |name: &str| params.one(name).map(|v| v.map(str::to_owned));
    Ok(ApprovalRequestFilter {
        status: params.one_of("status", &ApprovalRequestStatus::ALL, ApprovalRequestStatus::as_str)?,
        acted_by: text("actedBy")?,
        resolved_from,
        resolved_to,
        action: text("action")?,
        resource_id: text("resourceId")?,
    })
}

/// List approval requests (paging style B).
#[utoipa::path(
    get, path = "/api/approvals/requests", tag = "approvals", operation_id = "approvals.requests.list",
    params(
        ("status" = Option<ApprovalRequestStatus>, Query, description = "PENDING, APPROVED, REJECTED, CANCELLED or EXPIRED"),
        ("actedBy" = Option<String>, Query, description = "Token subject that resolved the request"),
        ("resolvedFrom" = Option<String>, Query, format = DateTime, description = "ISO 8601, inclusive; excludes unresolved requests"),
        ("resolvedTo" = Option<String>, Query, format = DateTime, description = "ISO 8601, exclusive; excludes unresolved requests"),
        ("action" = Option<String>, Query, description = "Exact action"),
        ("resourceId" = Option<String>, Query, description = "Exact resource id"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style B page of requests (without tasks), resolvedAt descending; the spec does not place unresolved requests: they come first, newest first", body = ApprovalRequestPage),
        (status = 400, description = "Unknown status, unparseable instant, resolvedFrom after resolvedTo (an inverted range; equal bounds select nothing), a filter given twice, invalid paging", body = crate::openapi::ErrorBody),
    )
)]
async fn list_requests(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = request_filter(&params)?;
    paging::list(&params, STRICT_SIZE, Style::B, |page| {
        call.state.app.approvals.list_requests(call.scope.tenant, &filter, page)
    })
    .await
}

/// Read one approval request with its tasks.
#[utoipa::path(
    get, path = "/api/approvals/requests/{requestId}", tag = "approvals", operation_id = "approvals.requests.get",
    params(path_params::RequestId),
    responses(
        (status = 200, description = "The request with its tasks", body = ApprovalRequestOut),
        crate::openapi::NotAUuid<path_params::RequestId>,
        crate::openapi::NoSuchRequest,
    )
)]
async fn get_request(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.approvals.get_request(tenant, id).await).await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StepApproverIn {
    /// 0 to 9. Steps open in ascending order: every task of the earlier steps must be APPROVED.
    #[schema(required = true, value_type = u32, minimum = 0, maximum = 9)]
    pub step: Option<i64>,
    /// `#groupKey` (an ACTIVE group; its ACTIVE members when acting) or `user:<uuid>` (an
    /// ACTIVE user of the organisation).
    #[schema(required = true, value_type = String, example = "#checkers")]
    pub approver: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequestIn {
    /// What is to be approved: 1 to 100 characters of the caller's choosing (policy-raised
    /// requests carry the policy action).
    #[schema(
        required = true,
        value_type = String,
        example = "LARGE_PAYMENT_RELEASE",
        pattern = r"\S",
        max_length = 100
    )]
    pub action: Option<String>,
    /// At most 64 characters.
    #[schema(max_length = 64)]
    pub resource_type: Option<String>,
    /// At most 200 characters.
    #[schema(max_length = 200)]
    pub resource_id: Option<String>,
    /// At most 200 characters.
    #[schema(max_length = 200)]
    pub title: Option<String>,
    /// At most 2000 characters.
    #[schema(max_length = 2000)]
    pub description: Option<String>,
    /// 1 to 20 (step, approver) pairs, each a task of its own; a pair may not repeat.
    #[schema(required = true, value_type = Vec<StepApproverIn>, min_items = 1, max_items = 20)]
    pub approvers: Option<Vec<StepApproverIn>>,
}

/// Collects every violation of a body, to answer them all at once.
#[derive(Default)]
struct Violations(Vec<FieldError>);

impl Violations {
    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError { field: field.into(), message: message.into() });
    }

    fn text(&mut self, field: &str, value: Option<String>, max: usize, required: bool) -> Option<String> {
        let value = value.map(|v| v.trim().to_owned()).filter(|v| !v.is_empty());
        match value {
            None if required => self.add(field, "is required"),
            Some(v) if v.chars().count() > max => self.add(field, format!("must be at most {max} characters")),
            other => return other,
        }
        None
    }
}

fn validate(body: ApprovalRequestIn) -> Result<Raise, Error> {
    let mut v = Violations::default();
    let action = v.text("action", body.action, ACTION_MAX, true);
    let resource_type = v.text("resourceType", body.resource_type, RESOURCE_TYPE_MAX, false);
    let resource_id = v.text("resourceId", body.resource_id, RESOURCE_ID_MAX, false);
    let title = v.text("title", body.title, TITLE_MAX, false);
    let description = v.text("description", body.description, DESCRIPTION_MAX, false);
    let mut approvers = Vec::new();
    match body.approvers {
        None => v.add("approvers", "is required"),
        Some(list) if list.is_empty() || list.len() > APPROVERS_MAX => {
            v.add("approvers", format!("must hold 1 to {APPROVERS_MAX} approvers"))
        }
        Some(list) => {
            for (i, a) in list.into_iter().enumerate() {
                let step = match a.step {
                    None => {
                        v.add(format!("approvers[{i}].step"), "is required");
                        None
                    }
                    Some(s) if !(0..=STEP_MAX).contains(&s) => {
                        v.add(format!("approvers[{i}].step"), format!("must be between 0 and {STEP_MAX}"));
                        None
                    }
                    Some(s) => u32::try_from(s).ok(),
                };
                let approver = match a.approver.map(|t| ApproverExpr::parse(t.trim())) {
                    None => {
                        v.add(format!("approvers[{i}].approver"), "is required");
                        None
                    }
                    Some(Err(e)) => {
                        v.add(format!("approvers[{i}].approver"), e.to_string());
                        None
                    }
                    Some(Ok(e)) => Some(e),
                };
                if let (Some(step), Some(approver)) = (step, approver) {
                    let pair = StepApprover { step, approver };
                    if approvers.contains(&pair) {
                        v.add(format!("approvers[{i}]"), "repeats an earlier (step, approver) pair");
                    } else {
                        approvers.push(pair);
                    }
                }
            }
        }
    }
    if !v.0.is_empty() {
        return Err(validation_failed(v.0));
    }
    Ok(Raise {
        source: ApprovalSource::Manual,
        action: action.unwrap_or_default(),
        resource_type,
        resource_id,
        initiator: String::new(),
        title,
        description,
        approvers,
        reviewers: Vec::new(),
    })
}

/// Raise an approval request by hand; the caller is its initiator.
#[utoipa::path(
    post, path = "/api/approvals/requests", tag = "approvals", operation_id = "approvals.requests.create",
    params(crate::openapi::OptionalIdempotencyKey),
    request_body = ApprovalRequestIn,
    responses(
        (status = 201, description = "Raised: PENDING, source MANUAL, one PENDING task per (step, approver), expiring after the configured lifetime (TOKENOPS_APPROVAL_LIFETIME_MS, default 72 h); approval.requested is published", body = ApprovalRequestOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED with details (every field's problem): missing or too long fields, malformed or repeated approvers, an expression naming no ACTIVE group or user of the organisation, or naming nobody but the caller", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn raise_request(call: OptionalKeyWrite, body: JsonBody<ApprovalRequestIn>) -> ApiResult<Response> {
    let raise = validate(body.value)?;
    call.run(&approvals::RAISE, &body.document, async |app, w| {
        let r = app.approvals.raise_manual(w, raise).await?;
        Reply::created(&r, format!("/api/approvals/requests/{}", r.id))
    })
    .await
}

/// Cancel a PENDING request; its pending tasks are CANCELLED.
#[utoipa::path(
    post, path = "/api/approvals/requests/{requestId}/cancel", tag = "approvals", operation_id = "approvals.requests.cancel",
    params(path_params::RequestId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 200, description = "The request, CANCELLED, with its tasks. The spec does not say who may cancel: the initiator, or any other holder of approval:request. No event is published (the spec names none for cancellation)", body = ApprovalRequestOut),
        crate::openapi::NotAUuid<path_params::RequestId>,
        crate::openapi::NoSuchRequest,
        (status = 409, description = "The request is not PENDING, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn cancel_request(call: OptionalKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    call.run(&approvals::CANCEL, &serde_json::Value::Null, async |app, w| {
        Reply::ok(&app.approvals.cancel(w, id).await?)
    })
    .await
}
