//! `/api/webhook-events`: the event history, newest first by occurredAt (paging style D), each
//! event with all its deliveries; and replay, strict for one event, lenient for a filter.

use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::webhooks::{self, DeliveryOut, FilteredReplay};
use tokenops_domain::event::{Event, EventFilter, EventType, ResourceRef};
use tokenops_domain::paging::KeysetPosition;
use tokenops_domain::webhook::Delivery;
use tokenops_domain::webhook::DeliveryStatus;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, CursorRequest, PageD, STRICT_SIZE};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{Reply, RequiredKeyWrite};
use serde::Deserialize;

const ENDPOINT: &str = "GET /api/webhook-events";
/// What a filtered replay's cursors are bound to (with the organisation and the filters).
const REPLAY_ENDPOINT: &str = "POST /api/webhook-events/redeliver";

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    super::optional_bodies(
        OpenApiRouter::new()
            .routes(routes!(list_webhook_events))
            .routes(routes!(get_webhook_event))
            .routes(routes!(redeliver_event))
            .routes(routes!(redeliver_filtered)),
    )
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
    /// Every delivery of the event, by registration and generation; `[]` when none.
    pub deliveries: Vec<DeliveryOut>,
}

impl WebhookEventOut {
    fn new(e: &Event, deliveries: &[Delivery]) -> Self {
        Self {
            id: e.id,
            event_type: e.event_type.clone(),
            occurred_at: e.occurred_at.to_spaced_utc(),
            correlation_id: e.correlation_id.clone(),
            idempotency_key: e.idempotency_key.clone(),
            resource: e.resource.clone(),
            data: e.data.clone(),
            deliveries: deliveries.iter().filter(|d| d.event_id == e.id).map(DeliveryOut::from).collect(),
        }
    }
}

/// The history filters, from the query (list) or a filtered replay's body.
fn filter(params: &QueryParams) -> Result<EventFilter, Error> {
    let event_type = params.one_of("type", &EventType::ALL, EventType::as_str)?.map(|t| t.as_str().to_owned());
    let (from, to) = params.window("from", "to")?;
    let delivery_status =
        params.one_of("status", &DeliveryStatus::ALL, DeliveryStatus::as_str)?.map(|s| s.as_str().to_owned());
    let webhook_id = params.uuid("webhookId")?;
    Ok(EventFilter { event_type, from, to, delivery_status, webhook_id })
}

/// The fingerprint a cursor of these filters is bound to (the list's and the filtered replay's).
fn filters_fingerprint(filter: &EventFilter) -> String {
    paging::filters_fingerprint(&[
        ("type", filter.event_type.clone()),
        ("from", filter.from.map(|t| t.as_micros().to_string())),
        ("to", filter.to.map(|t| t.as_micros().to_string())),
        ("status", filter.delivery_status.clone()),
        ("webhookId", filter.webhook_id.map(|id| id.to_string())),
    ])
}

/// List events, newest first (paging style D).
#[utoipa::path(
    get, path = "/api/webhook-events", tag = "webhook-events", operation_id = "webhookEvents.list",
    params(
        ("type" = Option<EventType>, Query, description = "An event type of the spec's Events table, or webhook.failing or webhook.suspended (beyond the spec)"),
        crate::openapi::TimeWindowQuery,
        ("status" = Option<DeliveryStatus>, Query, description = "Events with a delivery whose latest generation (per registration) has this status"),
        ("webhookId" = Option<uuid::Uuid>, Query, description = "Events with a delivery to this registration"),
        crate::openapi::CursorQuery,
    ),
    responses(
        (status = 200, description = "Style D page of events, newest first: items, nextCursor (null on the last page), limit", body = WebhookEventPage),
        (status = 400, description = "limit outside 1 to 100, foreign cursor, cursor with different filters, from not before to", body = crate::openapi::ErrorBody),
    )
)]
async fn list_webhook_events(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = filter(&params)?;
    let filters = filters_fingerprint(&filter);
    let request =
        CursorRequest::parse(&params, STRICT_SIZE, &call.state.cursors, ENDPOINT, call.scope.tenant, &filters)?;
    let events = call.state.app.events.list(call.scope.tenant, &filter, request.window()).await?;
    let ids: Vec<uuid::Uuid> = events.iter().map(|e| e.id).collect();
    let deliveries = call.state.app.webhooks.deliveries_of(call.scope.tenant, &ids).await?;
    let body = request.envelope(
        events,
        |e: &Event| KeysetPosition { at_micros: e.occurred_at.as_micros(), id: e.id },
        |e: &Event| WebhookEventOut::new(e, &deliveries),
        &call.state.cursors,
    );
    Ok(axum::Json(body).into_response())
}

/// Read one event with all its deliveries.
#[utoipa::path(
    get, path = "/api/webhook-events/{eventId}", tag = "webhook-events", operation_id = "webhookEvents.get",
    params(path_params::EventId),
    responses(
        (status = 200, description = "The event with its deliveries", body = WebhookEventOut),
        crate::openapi::NotAUuid<path_params::EventId>,
        (status = 404, description = "No such event", body = crate::openapi::ErrorBody),
    )
)]
async fn get_webhook_event(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| {
        let event = app.events.get(tenant, id).await?;
        let deliveries = app.webhooks.deliveries_of(tenant, &[id]).await?;
        Ok(WebhookEventOut::new(&event, &deliveries))
    })
    .await
}

/// A strict replay's body: optionally one registration.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedeliverIn {
    /// Replay only to this registration; otherwise to every registration that received the event.
    pub webhook_id: Option<uuid::Uuid>,
}

/// A filtered replay's body: the history filters, at least one.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct RedeliverFilterIn {
    #[serde(rename = "type")]
    #[schema(value_type = Option<EventType>)]
    pub event_type: Option<String>,
    /// ISO 8601, inclusive.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub from: Option<String>,
    /// ISO 8601, exclusive.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub to: Option<String>,
    /// The status of the latest delivery generation, e.g. PARKED.
    #[schema(value_type = Option<DeliveryStatus>)]
    pub status: Option<String>,
    pub webhook_id: Option<uuid::Uuid>,
    /// Beyond the spec: a truncated call's nextCursor, to continue after the last event it
    /// examined; only with the same filters, in the same organisation.
    pub cursor: Option<String>,
}

/// Replay one event (strict).
///
/// A new delivery at the next generation, PENDING with 0 attempts, to every registration that
/// received the event (or only `webhookId`); the earlier deliveries never change. Anything not
/// replayable fails the whole call. Each replay spends one of the organisation's 1,000
/// replays per hour (shared with the filtered call). A SUSPENDED destination's replay waits
/// for its resumption.
#[utoipa::path(
    post, path = "/api/webhook-events/{eventId}/redeliver", tag = "webhook-events", operation_id = "webhookEvents.redeliver",
    params(path_params::EventId, crate::openapi::RequiredIdempotencyKey),
    request_body(content = Option<RedeliverIn>, description = "Optional; an empty body replays to every destination"),
    responses(
        (status = 202, description = "Queued: the new deliveries (skipped is empty, truncated false); Location is the event with its deliveries", body = FilteredReplay, headers(("Location" = String))),
        (status = 400, description = "eventId or webhookId not a UUID, Idempotency-Key missing", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such event (EVENT_NOT_FOUND), no delivery to the named destination (DELIVERY_NOT_FOUND), or the destination was deleted (WEBHOOK_NOT_FOUND)", body = crate::openapi::ErrorBody),
        (status = 409, description = "DELIVERY_STILL_QUEUED: the latest delivery (or a replay of it) is still queued; WEBHOOK_INACTIVE; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
        crate::openapi::ReplayBudgetExhausted,
    )
)]
async fn redeliver_event(call: RequiredKeyWrite<PathId>, body: Option<JsonBody<RedeliverIn>>) -> ApiResult<Response> {
    let id = call.path.0;
    let body = JsonBody::or_default(body);
    let only = body.value.webhook_id;
    call.run(&webhooks::REDELIVER, &body.document, async |app, w| {
        let out = app.webhooks.redeliver(w, id, only).await?;
        Reply::accepted(&out, format!("/api/webhook-events/{id}"))
    })
    .await
}

/// Replay the deliveries the history filters select (lenient).
///
/// For each matching event, newest first, the latest delivery generation to each registration
/// (status and webhookId apply to it) is replayed when settled; what cannot be is listed in
/// skipped with its reason. At most 500 events are queued and 2,000 deliveries examined per
/// call; truncated tells that more remain: call again with nextCursor as `cursor` (and the same
/// filters) while truncated is true, to continue after the last event examined; a call without
/// a cursor starts from the newest event again. For example status PARKED with from and to
/// replays the deliveries that ran out of attempts in that window.
#[utoipa::path(
    post, path = "/api/webhook-events/redeliver", tag = "webhook-events", operation_id = "webhookEvents.redeliverFiltered",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = RedeliverFilterIn,
    responses(
        (status = 202, description = "queued (the new deliveries), skipped (eventId, webhookId, reason), truncated, and nextCursor (beyond the spec: a string when truncated, else null); Location is the event history", body = FilteredReplay, headers(("Location" = String))),
        (status = 400, description = "No filter, an invalid one (from not before to, unknown type or status), a cursor issued for other filters or elsewhere (INVALID_CURSOR), Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
        crate::openapi::ReplayBudgetExhausted,
    )
)]
async fn redeliver_filtered(call: RequiredKeyWrite, body: JsonBody<RedeliverFilterIn>) -> ApiResult<Response> {
    let value = body.value;
    let mut pairs: Vec<(String, String)> = Vec::new();
    let mut push = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            pairs.push((name.to_owned(), value));
        }
    };
    push("type", value.event_type);
    push("from", value.from);
    push("to", value.to);
    push("status", value.status);
    push("webhookId", value.webhook_id.map(|id| id.to_string()));
    if pairs.is_empty() {
        return Err(Error::bad_request("Give at least one filter: type, from, to, status or webhookId").into());
    }
    let filter = filter(&QueryParams(pairs))?;
    let codec = &call.state.cursors;
    let binding = paging::cursor_binding(REPLAY_ENDPOINT, call.scope.tenant, &filters_fingerprint(&filter));
    let after = value.cursor.as_deref().map(|c| codec.decode(&binding, c)).transpose()?;
    call.run(&webhooks::REDELIVER_FILTERED, &body.document, async |app, w| {
        let (mut out, next) = app.webhooks.redeliver_filtered(w, filter, after).await?;
        out.next_cursor = next.map(|position| codec.encode(&binding, position));
        Reply::accepted(&out, "/api/webhook-events".to_owned())
    })
    .await
}
