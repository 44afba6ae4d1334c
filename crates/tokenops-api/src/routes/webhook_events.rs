//! `/api/webhook-events`: the event history, newest first by occurredAt (paging style D).
//! Deliveries join these records when webhook registrations exist; until then every event
//! lists none.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::event::{Event, EventFilter, EventType, ResourceRef};
use tokenops_domain::paging::KeysetPosition;
use tokenops_domain::webhook::DeliveryStatus;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, CursorRequest, PageD, STRICT_SIZE};
use crate::extract::{PathId, QueryParams, TenantScope};

const ENDPOINT: &str = "GET /api/webhook-events";

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(list_webhook_events)).routes(routes!(get_webhook_event))
}

/// A page of events (style D).
pub type WebhookEventPage = PageD<WebhookEventOut>;

/// An event with its deliveries.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookEventOut {
    pub id: uuid::Uuid,
    #[serde(rename = "type")]
    pub event_type: String,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC.
    pub occurred_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    #[schema(value_type = Object)]
    pub resource: ResourceRef,
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
    #[schema(value_type = Vec<Object>)]
    pub deliveries: Vec<serde_json::Value>,
}

impl From<&Event> for WebhookEventOut {
    fn from(e: &Event) -> Self {
        Self {
            id: e.id,
            event_type: e.event_type.clone(),
            occurred_at: e.occurred_at.to_spaced_utc(),
            correlation_id: e.correlation_id.clone(),
            idempotency_key: e.idempotency_key.clone(),
            resource: e.resource.clone(),
            data: e.data.clone(),
            deliveries: Vec::new(),
        }
    }
}

fn filter(params: &QueryParams) -> Result<EventFilter, Error> {
    let names: Vec<&str> = EventType::ALL.iter().map(|t| t.as_str()).collect();
    let event_type = params.choice("type", EventType::parse, &names)?.map(|t| t.as_str().to_owned());
    let (from, to) = params.window("from", "to")?;
    let statuses: Vec<&str> = DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect();
    let delivery_status = params.choice("status", DeliveryStatus::parse, &statuses)?.map(|s| s.as_str().to_owned());
    let webhook_id = params
        .one("webhookId")?
        .map(|v| uuid::Uuid::parse_str(v).map_err(|_| Error::invalid_field("webhookId", "must be a UUID")))
        .transpose()?;
    Ok(EventFilter { event_type, from, to, delivery_status, webhook_id })
}

/// List events, newest first (paging style D).
#[utoipa::path(
    get, path = "/api/webhook-events", tag = "webhook-events", operation_id = "webhookEvents.list",
    params(
        ("type" = Option<String>, Query), ("from" = Option<String>, Query, description = "ISO 8601, inclusive"),
        ("to" = Option<String>, Query, description = "ISO 8601, exclusive"),
        ("limit" = Option<u32>, Query, description = "1 to 100, default 20"),
        ("cursor" = Option<String>, Query, description = "nextCursor of the previous page, with the same filters"),
    ),
    responses(
        (status = 200, description = "Style D page of events, newest first: items, nextCursor (null on the last page), limit", body = WebhookEventPage),
        (status = 400, description = "limit outside 1 to 100, foreign cursor, cursor with different filters, from not before to", body = crate::openapi::ErrorBody),
    )
)]
async fn list_webhook_events(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    params: QueryParams,
) -> ApiResult<Response> {
    let filter = filter(&params)?;
    let filters = paging::filters_fingerprint(&[
        ("type", filter.event_type.clone()),
        ("from", filter.from.map(|t| t.as_micros().to_string())),
        ("to", filter.to.map(|t| t.as_micros().to_string())),
        ("status", filter.delivery_status.clone()),
        ("webhookId", filter.webhook_id.map(|id| id.to_string())),
    ]);
    let request = CursorRequest::parse(&params, STRICT_SIZE, &state.cursors, ENDPOINT, scope.tenant, &filters)?;
    let events = state.app.events.list(scope.tenant, &filter, request.window()).await?;
    let body = request.envelope(
        events,
        |e: &Event| KeysetPosition { at_micros: e.occurred_at.as_micros(), id: e.id },
        |e: &Event| WebhookEventOut::from(e),
        &state.cursors,
    );
    Ok(axum::Json(body).into_response())
}

/// Read one event with all its deliveries.
#[utoipa::path(
    get, path = "/api/webhook-events/{eventId}", tag = "webhook-events", operation_id = "webhookEvents.get",
    params(("eventId" = uuid::Uuid, Path)),
    responses(
        (status = 200, description = "The event with its deliveries", body = WebhookEventOut),
        (status = 400, description = "eventId is not a UUID", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such event", body = crate::openapi::ErrorBody),
    )
)]
async fn get_webhook_event(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
) -> ApiResult<Response> {
    let event = state.app.events.get(scope.tenant, id).await?;
    Ok(axum::Json(WebhookEventOut::from(&event)).into_response())
}
