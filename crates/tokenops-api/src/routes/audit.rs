//! `/api/audit/events`: search the audit log (paging style B, default sort occurredAt,desc) and
//! read one record.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::audit::{AuditFilter, AuditRecord, AuditSource};
use tokenops_domain::paging::{SortDirection, SortKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, AUDIT_SIZE, PageB, Style};
use crate::extract::{PathId, QueryParams, TenantScope};

pub const QUERY_MAX_LEN: usize = 128;

/// Sortable properties (API name → column).
const SORTABLE: &[(&str, &str)] = &[
    ("occurredAt", "occurred_at"),
    ("createdAt", "created_at"),
    ("action", "action"),
    ("category", "category"),
    ("source", "source"),
    ("actorId", "actor_id"),
    ("resourceType", "resource_type"),
    ("resourceId", "resource_id"),
    ("outcome", "outcome"),
];

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(list_audit_events)).routes(routes!(get_audit_event))
}

/// A page of audit records (style B).
pub type AuditEventPage = PageB<AuditEventOut>;

/// One audit record.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEventOut {
    pub id: uuid::Uuid,
    pub occurred_at: String,
    pub created_at: String,
    /// Dotted verb, for example `customer.create`.
    pub action: String,
    pub category: String,
    /// API, WORKER or SYSTEM.
    pub source: String,
    pub actor_id: Option<String>,
    pub resource_type: String,
    pub resource_id: Option<String>,
    /// SUCCESS or FAILURE.
    pub outcome: String,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub http_status: Option<u16>,
    /// What changed, or why the attempt failed; null when the operation records nothing more.
    #[schema(value_type = Option<Object>, required = true)]
    pub detail: serde_json::Value,
}

impl From<&AuditRecord> for AuditEventOut {
    fn from(r: &AuditRecord) -> Self {
        Self {
            id: r.id,
            occurred_at: r.occurred_at.to_iso8601(),
            created_at: r.created_at.to_iso8601(),
            action: r.action.clone(),
            category: r.category.clone(),
            source: r.source.as_str().to_owned(),
            actor_id: r.actor_id.clone(),
            resource_type: r.resource_type.clone(),
            resource_id: r.resource_id.clone(),
            outcome: r.outcome.as_str().to_owned(),
            request_id: r.request_id.clone(),
            idempotency_key: r.idempotency_key.clone(),
            http_status: r.http_status,
            detail: r.detail.clone(),
        }
    }
}

fn filter(params: &QueryParams) -> Result<AuditFilter, Error> {
    let (occurred_from, occurred_to) = params.window("occurredFrom", "occurredTo")?;
    let query = params.one("query")?.map(str::to_owned);
    if query.as_ref().is_some_and(|q| q.chars().count() > QUERY_MAX_LEN) {
        return Err(Error::invalid_field("query", format!("must be at most {QUERY_MAX_LEN} characters")));
    }
    let text = |name: &str| params.one(name).map(|v| v.map(str::to_owned));
    let source =
        params.choice("source", AuditSource::parse, &["API", "WORKER", "SYSTEM"])?.map(|s| s.as_str().to_owned());
    Ok(AuditFilter {
        occurred_from,
        occurred_to,
        actor_ids: params.all("actorIds"),
        request_id: text("requestId")?,
        action: text("action")?,
        source,
        resource_type: text("resourceType")?,
        resource_id: text("resourceId")?,
        query,
    })
}

/// Search the audit log (paging style B).
#[utoipa::path(
    get, path = "/api/audit/events", tag = "audit", operation_id = "audit.events.list",
    params(
        ("occurredFrom" = Option<String>, Query, description = "ISO 8601, inclusive"),
        ("occurredTo" = Option<String>, Query, description = "ISO 8601, exclusive"),
        ("actorIds" = Option<Vec<String>>, Query, description = "Repeatable or comma-separated"),
        ("requestId" = Option<String>, Query), ("action" = Option<String>, Query), ("source" = Option<String>, Query),
        ("resourceType" = Option<String>, Query), ("resourceId" = Option<String>, Query),
        ("query" = Option<String>, Query, description = "Case-insensitive prefix on identifier fields, at most 128 characters"),
        ("sort" = Option<Vec<String>>, Query, description = "property or property,asc|desc; repeatable; default occurredAt,desc"),
        ("page" = Option<u64>, Query), ("size" = Option<u32>, Query, description = "Default 20; above 100 is reduced to 100"),
    ),
    responses(
        (status = 200, description = "Style B page of audit records. The spec does not show the record's body: this service's fields are AuditEventOut's", body = AuditEventPage),
        (status = 400, description = "Inverted range, unknown sort property, query too long, unparseable date", body = crate::openapi::ErrorBody),
    )
)]
async fn list_audit_events(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    params: QueryParams,
) -> ApiResult<Response> {
    let filter = filter(&params)?;
    let sort =
        paging::sort_keys(&params, SORTABLE, &[SortKey { column: "occurred_at", direction: SortDirection::Desc }])?;
    let page = paging::page_request(&params, AUDIT_SIZE)?;
    let records = state.app.audit.list(scope.tenant, &filter, &sort, page).await?;
    let view = records.map(|r| AuditEventOut::from(&r));
    Ok(paging::respond(Style::B, &view, page))
}

/// Read one audit record.
#[utoipa::path(
    get, path = "/api/audit/events/{eventId}", tag = "audit", operation_id = "audit.events.get",
    params(("eventId" = uuid::Uuid, Path)),
    responses(
        (status = 200, description = "The audit record", body = AuditEventOut),
        (status = 400, description = "eventId is not a UUID", body = crate::openapi::ErrorBody),
        (status = 404, description = "Not in the organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn get_audit_event(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
) -> ApiResult<Response> {
    let record = state.app.audit.get(scope.tenant, id).await?;
    Ok(axum::Json(AuditEventOut::from(&record)).into_response())
}
