//! `/api/automations`: automations of published scripts (paging style A, sizes clamped to 1 to
//! 100, default sort createdAt,desc), one automation, creation, status changes, runs on demand
//! and the history of runs. Writes need an Idempotency-Key.

use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::automations::{self, AutomationOut, ExecutionOut, NewAutomation};
use tokenops_domain::automation::{
    AutomationFilter, AutomationStatus, ExecutionFilter, ExecutionStatus, Trigger, TriggerType,
};
use tokenops_domain::paging::{SortDirection, SortKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::fields::{optional_text, required};
use super::scripts::{OverrideIn, overrides};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, CLAMPED_SIZE, PageA, Style};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{Reply, RequiredKeyWrite};

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    super::optional_bodies(
        OpenApiRouter::new()
            .routes(routes!(list_automations, create_automation))
            .routes(routes!(get_automation))
            .routes(routes!(set_automation_status))
            .routes(routes!(execute_automation))
            .routes(routes!(automation_history)),
    )
}

/// A page of automations (style A).
pub type AutomationPage = PageA<AutomationOut>;
/// A page of runs (style A).
pub type ExecutionPage = PageA<ExecutionOut>;

const SORTABLE: &[(&str, &str)] =
    &[("createdAt", "created_at"), ("updatedAt", "updated_at"), ("status", "status"), ("triggerType", "trigger_type")];
const HISTORY_SORTABLE: &[(&str, &str)] = &[("createdAt", "created_at"), ("status", "status")];
const NEWEST_FIRST: &[SortKey] = &[SortKey { column: "created_at", direction: SortDirection::Desc }];

/// A new automation.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AutomationIn {
    /// Optional, 1 to 100 characters, not blank.
    #[schema(pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// A PUBLISHED script of the organisation.
    #[schema(required = true, value_type = Uuid)]
    pub script_id: Option<Uuid>,
    /// ON_DEMAND (default), SCHEDULED or EVENT.
    #[schema(value_type = Option<TriggerType>)]
    pub trigger_type: Option<String>,
    /// SCHEDULED: five fields, `minute hour day-of-month month day-of-week` (`*`, ranges,
    /// steps, lists, names such as MON or JAN), read in `timeZone`.
    pub cron: Option<String>,
    /// SCHEDULED: an IANA time zone, for example `Europe/Paris`; required, never assumed.
    pub time_zone: Option<String>,
    /// EVENT: an event type of the webhook table; the run gets the event as `event`.
    pub event_type: Option<String>,
    /// Values of the script's parameters for every run (`{key, value, type}`); parameters
    /// without a default must be given.
    #[serde(default)]
    pub parameters: Vec<OverrideIn>,
}

/// A status change.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct StatusIn {
    /// ACTIVE, INACTIVE, DISABLED or DELETED.
    #[schema(required = true, value_type = AutomationStatus)]
    pub status: Option<String>,
}

/// A run on demand.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct ExecutionIn {
    /// Values for this run over the automation's own (`{key, value, type}`).
    #[serde(default)]
    pub overrides: Vec<OverrideIn>,
}

fn trigger(value: &AutomationIn) -> Result<Trigger, Error> {
    let kind = match value.trigger_type.as_deref() {
        None => TriggerType::OnDemand,
        Some(text) => TriggerType::parse(text).ok_or_else(|| {
            Error::invalid_field("triggerType", format!("{text:?} is not one of ON_DEMAND, SCHEDULED, EVENT"))
        })?,
    };
    let required_for_kind = |field: &str, v: &Option<String>| {
        v.clone()
            .filter(|s| !s.trim().is_empty())
            .ok_or_else(|| Error::invalid_field(field, format!("is required for {}", kind.as_str())))
    };
    let unexpected = |field: &str, v: &Option<String>| match v {
        Some(_) => Err(Error::invalid_field(field, format!("does not apply to {}", kind.as_str()))),
        None => Ok(()),
    };
    Ok(match kind {
        TriggerType::OnDemand => {
            unexpected("cron", &value.cron)?;
            unexpected("timeZone", &value.time_zone)?;
            unexpected("eventType", &value.event_type)?;
            Trigger::OnDemand
        }
        TriggerType::Scheduled => {
            unexpected("eventType", &value.event_type)?;
            Trigger::Scheduled {
                cron: required_for_kind("cron", &value.cron)?,
                time_zone: required_for_kind("timeZone", &value.time_zone)?,
            }
        }
        TriggerType::Event => {
            unexpected("cron", &value.cron)?;
            unexpected("timeZone", &value.time_zone)?;
            Trigger::Event { event_type: required_for_kind("eventType", &value.event_type)? }
        }
    })
}

/// List the organisation's automations (paging style A).
#[utoipa::path(
    get, path = "/api/automations", tag = "automations", operation_id = "automations.list",
    params(
        ("status" = Option<String>, Query, description = "ACTIVE, INACTIVE, DISABLED or DELETED; another value gives an empty page; deleted automations are listed only when asked for"),
        ("scriptId" = Option<Uuid>, Query),
        ("triggerType" = Option<TriggerType>, Query, description = "ON_DEMAND, SCHEDULED or EVENT"),
        ("sort" = Option<Vec<String>>, Query, description = "createdAt, updatedAt, status or triggerType, with ,asc or ,desc; default createdAt,desc"),
        crate::openapi::ClampedPageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of automations", body = AutomationPage),
        (status = 400, description = "Invalid page, sort, scriptId or triggerType", body = crate::openapi::ErrorBody),
    )
)]
async fn list_automations(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let sort = paging::sort_keys(&params, SORTABLE, NEWEST_FIRST)?;
    let page = paging::page_request(&params, CLAMPED_SIZE)?;
    let script_id = params.uuid("scriptId")?;
    let trigger = params.one_of("triggerType", &TriggerType::ALL, TriggerType::as_str)?;
    // The spec: a status other than the four gives an empty page, not an error.
    let status = params.one("status")?;
    if let Some(text) = status
        && AutomationStatus::parse(text).is_none()
    {
        return Ok(paging::respond(Style::A, &paging::none_match::<AutomationOut>(), page));
    }
    let filter = AutomationFilter { status: status.and_then(AutomationStatus::parse), script_id, trigger };
    let found = call.state.app.automations.list(call.scope.tenant, &filter, &sort, page).await?;
    Ok(paging::respond(Style::A, &found, page))
}

/// Create an automation of a PUBLISHED script, acting as the caller.
#[utoipa::path(
    post, path = "/api/automations", tag = "automations", operation_id = "automations.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = AutomationIn,
    responses(
        (status = 201, description = "Created ACTIVE; its runs act as the caller (userId), with the caller's permissions at each run", body = AutomationOut, headers(("Location" = String))),
        (status = 400, description = "A field invalid (trigger, cron, time zone, event type, parameters that do not fit the script), Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchScript,
        (status = 409, description = "The script is not PUBLISHED, or the key in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_automation(call: RequiredKeyWrite, body: JsonBody<AutomationIn>) -> ApiResult<Response> {
    let value = body.value;
    let new = NewAutomation {
        trigger: trigger(&value)?,
        name: optional_text("name", value.name, 100)?,
        script_id: required("scriptId", value.script_id)?,
        parameters: overrides("parameters", value.parameters)?,
    };
    call.run(&automations::CREATE, &body.document, async |app, w| {
        let a = app.automations.create(w, new).await?;
        Reply::created(&a, format!("/api/automations/{}", a.automation_id))
    })
    .await
}

/// Read one automation.
#[utoipa::path(
    get, path = "/api/automations/{automationId}", tag = "automations", operation_id = "automations.get",
    params(path_params::AutomationId),
    responses(
        (status = 200, description = "The automation", body = AutomationOut),
        crate::openapi::NotAUuid<path_params::AutomationId>,
        crate::openapi::NoSuchAutomationOrDeleted,
    )
)]
async fn get_automation(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.automations.get(tenant, id).await).await
}

/// Change an automation's status.
#[utoipa::path(
    patch, path = "/api/automations/{automationId}/status", tag = "automations", operation_id = "automations.status.update",
    params(path_params::AutomationId, crate::openapi::RequiredIdempotencyKey),
    request_body = StatusIn,
    responses(
        (status = 200, description = "The automation after the change; a SCHEDULED one set ACTIVE plans its next run from now", body = AutomationOut),
        (status = 400, description = "Status missing or unknown, the current status, a move away from DELETED, ACTIVE for an automation whose script was deleted or is a DRAFT again, Idempotency-Key missing", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such automation", body = crate::openapi::ErrorBody),
        crate::openapi::KeyInFlight,
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn set_automation_status(call: RequiredKeyWrite<PathId>, body: JsonBody<StatusIn>) -> ApiResult<Response> {
    let id = call.path.0;
    let text = required("status", body.value.status)?;
    let status = AutomationStatus::parse(&text).ok_or_else(|| {
        Error::invalid_field("status", format!("{text:?} is not one of ACTIVE, INACTIVE, DISABLED, DELETED"))
    })?;
    call.run(&automations::UPDATE_STATUS, &body.document, async |app, w| {
        Reply::ok(&app.automations.set_status(w, id, status).await?)
    })
    .await
}

/// Run an ON_DEMAND automation now.
#[utoipa::path(
    post, path = "/api/automations/{automationId}/executions", tag = "automations", operation_id = "automations.execute",
    params(path_params::AutomationId, crate::openapi::RequiredIdempotencyKey),
    request_body = Option<ExecutionIn>,
    responses(
        (status = 202, description = "The run, QUEUED: a durable job runs it; follow it in the history", body = ExecutionOut, headers(("Location" = String))),
        (status = 400, description = "Idempotency-Key missing, an override's key blank or its value or type missing, automationId not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchAutomationOrDeleted,
        (status = 409, description = "The automation is not ACTIVE or not ON_DEMAND, its script is deleted or a DRAFT, or the key in flight", body = crate::openapi::ErrorBody),
        (status = 422, description = "An override does not fit the script's declared parameters (each reason in details), or the key reused with a different payload", body = crate::openapi::ErrorBody),
        (status = 500, description = "The run could not be requested: nothing was recorded and the key was released; retry with the same key", body = crate::openapi::ErrorBody),
    )
)]
async fn execute_automation(
    call: RequiredKeyWrite<PathId>,
    body: Option<JsonBody<ExecutionIn>>,
) -> ApiResult<Response> {
    let id = call.path.0;
    let body = JsonBody::or_default(body);
    let overrides = overrides("overrides", body.value.overrides)?;
    call.run(&automations::EXECUTE, &body.document, async |app, w| {
        let run = app.automations.execute(w, id, overrides).await?;
        Reply::accepted(&run, format!("/api/automations/{id}/history"))
    })
    .await
}

/// The automation's runs (paging style A).
#[utoipa::path(
    get, path = "/api/automations/{automationId}/history", tag = "automations", operation_id = "automations.history",
    params(
        path_params::AutomationId,
        ("status" = Option<String>, Query, description = "QUEUED, RUNNING, SUCCEEDED or FAILED; another value gives an empty page"),
        ("sort" = Option<Vec<String>>, Query, description = "createdAt or status, with ,asc or ,desc; default createdAt,desc"),
        crate::openapi::ClampedPageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of runs: trigger, parameters, timings, log lines, submitted operation ids, error", body = ExecutionPage),
        (status = 400, description = "automationId not a UUID, invalid page or sort", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchAutomationOrDeleted,
    )
)]
async fn automation_history(call: TenantCall<PathId>, params: QueryParams) -> ApiResult<Response> {
    let id = call.path.0;
    let sort = paging::sort_keys(&params, HISTORY_SORTABLE, NEWEST_FIRST)?;
    let page = paging::page_request(&params, CLAMPED_SIZE)?;
    let status = params.one("status")?;
    let known = status.map(ExecutionStatus::parse);
    if let Some(None) = known {
        // Still a 404 for an unknown automation.
        call.state.app.automations.get(call.scope.tenant, id).await?;
        return Ok(paging::respond(Style::A, &paging::none_match::<ExecutionOut>(), page));
    }
    let filter = ExecutionFilter { status: known.flatten() };
    let found = call.state.app.automations.history(call.scope.tenant, id, &filter, &sort, page).await?;
    Ok(paging::respond(Style::A, &found, page))
}
