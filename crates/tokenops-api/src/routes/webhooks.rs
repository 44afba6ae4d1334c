//! `/api/webhooks`: registrations (paging style D, newest first), their test delivery and secret
//! rotation; and `/.well-known/webhook-jwks.json`, the keys JWS_ES256 deliveries are signed with.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::webhooks::{self, EventOrigin, NewWebhook, TestOutcome, WebhookChange, WebhookOut};
use tokenops_domain::event::EventType;
use tokenops_domain::paging::KeysetPosition;
use tokenops_domain::webhook::{SignatureScheme, Webhook, WebhookFilter, WebhookStatus};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{all_fields, required};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{CursorRequest, PageD, STRICT_SIZE};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall, TenantScope};
use crate::openapi::path_params;
use crate::write::{self, Reply, RequiredKeyWrite, Written};

const ENDPOINT: &str = "GET /api/webhooks";

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_webhooks, create_webhook))
        .routes(routes!(get_webhook, update_webhook, delete_webhook))
        .routes(routes!(test_webhook))
        .routes(routes!(rotate_secret))
}

/// The public key set of JWS_ES256 deliveries (supplement §7), outside `/api`: receivers fetch
/// it without a token or API-Version.
pub fn well_known_router() -> Router<Arc<ApiState>> {
    Router::new().route("/.well-known/webhook-jwks.json", get(jwks))
}

/// The public keys that verify JWS_ES256 deliveries (a JWKS, RFC 7517), each named by the
/// `kid` in a delivery's JWS header. Receivers pin these keys, never one a token points to.
#[utoipa::path(
    get, path = "/.well-known/webhook-jwks.json", tag = "webhooks", operation_id = "webhooks.jwks",
    security(()),
    responses(
        (status = 200, description = "The delivery signing keys in use (Cache-Control: public, max-age=300); the spec implements no rotation for this scheme, so the set changes only where the operator turned rotation on", body = crate::openapi::Jwks),
        (status = 500, description = "System error occurred", body = crate::openapi::ErrorBody),
    )
)]
pub(crate) async fn jwks(State(state): State<Arc<ApiState>>) -> ApiResult<Response> {
    let document = state.app.webhooks.keys.jwks().await?;
    Ok(([(header::CACHE_CONTROL, "public, max-age=300")], axum::Json(document)).into_response())
}

/// A page of registrations (style D).
pub type WebhookPage = PageD<WebhookOut>;

/// A registration request.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookIn {
    /// An https URL whose host resolves only to public addresses.
    #[schema(required = true, value_type = String)]
    pub url: Option<String>,
    /// At least one event type: one of the spec's Events table, or one beyond it:
    /// `webhook.failing` (another registration of the organisation reached ten failed attempts
    /// in a row; once per run of failures) and `webhook.suspended` (twenty suspended it). Those
    /// two carry that registration as `data` and are never sent to it.
    #[schema(required = true, value_type = Vec<EventType>, min_items = 1)]
    pub event_types: Option<Vec<String>>,
    /// HMAC_SHA256 (default) or JWS_ES256; fixed for the registration.
    #[schema(value_type = Option<SignatureScheme>)]
    pub signature_scheme: Option<String>,
}

/// A change of a registration: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct WebhookPatch {
    /// ACTIVE or INACTIVE (SUSPENDED is the service's to set).
    #[schema(value_type = Option<SettableWebhookStatus>)]
    pub status: Option<String>,
    /// Replaces the whole set; `[]` subscribes to nothing. The types of the registration
    /// request, `webhook.failing` and `webhook.suspended` (beyond the spec) included.
    #[schema(value_type = Option<Vec<EventType>>)]
    pub event_types: Option<Vec<String>>,
}

/// The statuses a PATCH may set (SUSPENDED is the service's).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
enum SettableWebhookStatus {
    Active,
    Inactive,
}

fn scheme(value: Option<&str>) -> Result<SignatureScheme, Error> {
    match value {
        None => Ok(SignatureScheme::HmacSha256),
        Some(text) => SignatureScheme::parse(text).ok_or_else(|| {
            Error::invalid_field("signatureScheme", format!("unknown value {text:?}; allowed: HMAC_SHA256, JWS_ES256"))
        }),
    }
}

/// List the organisation's registrations, newest first (paging style D).
///
/// `from` and `to` (an addition to the spec's limit and cursor, whose error table lists their
/// 400) select the registrations created in that half-open window.
#[utoipa::path(
    get, path = "/api/webhooks", tag = "webhooks", operation_id = "webhooks.list",
    params(crate::openapi::CursorQuery, crate::openapi::TimeWindowQuery),
    responses(
        (status = 200, description = "Style D page of registrations, newest first (never a secret)", body = WebhookPage),
        (status = 400, description = "limit outside 1 to 100, a foreign cursor or one issued for other filters, from not before to, an unparseable date", body = crate::openapi::ErrorBody),
    )
)]
async fn list_webhooks(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let (from, to) = params.window("from", "to")?;
    let created = WebhookFilter { from, to };
    // Without a window the fingerprint is the one of no filters, so cursors issued before the
    // window existed (or by a node without it) keep working.
    let window: Vec<(&str, Option<String>)> = [("from", from), ("to", to)]
        .into_iter()
        .filter_map(|(name, at)| at.map(|t| (name, Some(t.as_micros().to_string()))))
        .collect();
    let filters = crate::extract::paging::filters_fingerprint(&window);
    let request =
        CursorRequest::parse(&params, STRICT_SIZE, &call.state.cursors, ENDPOINT, call.scope.tenant, &filters)?;
    let items = call.state.app.webhooks.list(call.scope.tenant, created, request.window()).await?;
    let now = call.state.app.clock.now();
    let body = request.envelope(
        items,
        |w: &Webhook| KeysetPosition { at_micros: w.created_at.as_micros(), id: w.id },
        |w: &Webhook| WebhookOut::new(w, now),
        &call.state.cursors,
    );
    Ok(axum::Json(body).into_response())
}

/// Register a destination.
///
/// The URL is normalised (scheme and host lowercased, default :443 dropped) and its host
/// resolved by the service: every address must be public (private, loopback, link-local,
/// carrier-grade NAT and the other special-purpose ranges are refused, unless the operator
/// exempts them with TOKENOPS_WEBHOOK_ALLOW_CIDRS). The registration starts ACTIVE and is
/// sent a `webhook.test` event at once (recorded in the history, delivered to it alone). The
/// 43-character secret of an HMAC_SHA256 registration is in this answer only; it is not kept
/// with the Idempotency-Key's record, and a replay of the key shows it again only while it is
/// still the current secret (no rotation since).
#[utoipa::path(
    post, path = "/api/webhooks", tag = "webhooks", operation_id = "webhooks.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = WebhookIn,
    responses(
        (status = 201, description = "Registered, ACTIVE; with the secret (HMAC_SHA256 only)", body = WebhookOut, headers(("Location" = String))),
        (status = 400, description = "url not https, not resolvable or not public; unknown signatureScheme; no eventTypes; unknown event types (each named in details); Idempotency-Key missing", body = crate::openapi::ErrorBody),
        (status = 409, description = "WEBHOOK_URL_TAKEN: the URL is registered in the organisation (existingWebhookId); or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_webhook(call: RequiredKeyWrite, body: JsonBody<WebhookIn>) -> ApiResult<Response> {
    let value = body.value;
    let (url, signature_scheme, event_types) = all_fields!(
        url = required("url", value.url)
            .and_then(|url| tokenops_webhooks::url::normalise(&url).map_err(|e| Error::invalid_field("url", e))),
        signature_scheme = scheme(value.signature_scheme.as_deref()),
        event_types = required("eventTypes", value.event_types).and_then(|types| match types.is_empty() {
            true => Err(Error::invalid_field("eventTypes", "needs at least one event type")),
            false => webhooks::event_types("eventTypes", &types),
        }),
    )?;
    // The address is resolved only once the body is otherwise sound.
    call.state.app.webhooks.check_url(&url).await?;
    let new = NewWebhook { url, signature_scheme, event_types };
    let request = call.request(&webhooks::CREATE, &body.document);
    let written = write::run_or_replay(&call.state, request, async |app, w| {
        let out = app.webhooks.create(w, new).await?;
        Ok(Reply::created(&out, format!("/api/webhooks/{}", out.id))?.with_secret("secret"))
    })
    .await?;
    replay_with_secret(&call.state, &call.scope, written, 201).await
}

/// A replayed creation or rotation answers its secret again while it is still the current one
/// (it is not stored with the response; see `Webhooks::secret_for_replay`).
async fn replay_with_secret(
    state: &ApiState,
    scope: &TenantScope,
    written: Written,
    success: u16,
) -> ApiResult<Response> {
    match written {
        Written::Replayed(stored) if stored.status == success => {
            let secret = state.app.webhooks.secret_for_replay(scope.tenant, &stored.body).await?;
            Ok(write::replayed_with(stored, "secret", secret))
        }
        other => Ok(other.into_response()),
    }
}

/// Read a registration (never its secret).
#[utoipa::path(
    get, path = "/api/webhooks/{webhookId}", tag = "webhooks", operation_id = "webhooks.get",
    params(path_params::WebhookId),
    responses(
        (status = 200, description = "The registration", body = WebhookOut),
        crate::openapi::NotAUuid<path_params::WebhookId>,
        crate::openapi::NoSuchRegistration,
    )
)]
async fn get_webhook(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.webhooks.get(tenant, id).await).await
}

/// Change a registration's status or event types.
///
/// status ACTIVE or INACTIVE; SUSPENDED is 400 (the service suspends). Setting ACTIVE clears a
/// suspension and resets the failure count; deliveries that waited go out. eventTypes replaces
/// the whole set (`[]` subscribes to nothing). A change applies to the events that happen after
/// it: one that happened before goes to the registration as it was then (delivered when ACTIVE).
#[utoipa::path(
    patch, path = "/api/webhooks/{webhookId}", tag = "webhooks", operation_id = "webhooks.update",
    params(path_params::WebhookId, crate::openapi::RequiredIdempotencyKey),
    request_body = WebhookPatch,
    responses(
        (status = 200, description = "The registration as changed", body = WebhookOut),
        (status = 400, description = "No field, status SUSPENDED or unknown, unknown event types, webhookId not a UUID, Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchRegistration,
        crate::openapi::KeyConflicts,
    )
)]
async fn update_webhook(call: RequiredKeyWrite<PathId>, body: JsonBody<WebhookPatch>) -> ApiResult<Response> {
    let id = call.path.0;
    let value = body.value;
    if value.status.is_none() && value.event_types.is_none() {
        return Err(Error::bad_request("Give status, eventTypes or both").into());
    }
    let statuses = "ACTIVE, INACTIVE";
    let status = value
        .status
        .as_deref()
        .map(|text| match WebhookStatus::parse(text) {
            Some(s) if s.requestable() => Ok(s),
            Some(_) => {
                Err(Error::invalid_field("status", "SUSPENDED is set by the service only; allowed: ACTIVE, INACTIVE"))
            }
            None => Err(Error::invalid_field("status", format!("unknown value {text:?}; allowed: {statuses}"))),
        })
        .transpose()?;
    let event_types =
        value.event_types.as_deref().map(|types| webhooks::event_types("eventTypes", types)).transpose()?;
    let change = WebhookChange { status, event_types };
    call.run(&webhooks::UPDATE, &body.document, async |app, w| Reply::ok(&app.webhooks.update(w, id, change).await?))
        .await
}

/// Delete a registration: its queued deliveries are CANCELLED and its URL may be registered
/// again (a new id and secret). Its delivery history stays.
#[utoipa::path(
    delete, path = "/api/webhooks/{webhookId}", tag = "webhooks", operation_id = "webhooks.delete",
    params(path_params::WebhookId, crate::openapi::RequiredIdempotencyKey),
    responses(
        (status = 204, description = "Deleted"),
        crate::openapi::NotAUuidOrNoKey<path_params::WebhookId>,
        crate::openapi::NoSuchRegistration,
        crate::openapi::KeyConflicts,
    )
)]
async fn delete_webhook(call: RequiredKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    call.run_no_content(&webhooks::DELETE, async |app, w| app.webhooks.delete(w, id).await).await
}

/// Send a test delivery now and answer its outcome.
///
/// One attempt of a fresh `webhook.test` event (data: the registration), signed as any
/// delivery, made synchronously and not retried; it is not recorded in the event history
/// (the registration's own test at creation is). A success resets the consecutive failure
/// count; a failure does not count towards suspension. A SUSPENDED registration may be
/// tested, to check the receiver before setting it ACTIVE. A key that completed answers its
/// recorded outcome without sending again; while the first call with a key is still attempting,
/// another with the same key answers 409 and sends nothing.
#[utoipa::path(
    post, path = "/api/webhooks/{webhookId}/test", tag = "webhooks", operation_id = "webhooks.test",
    params(path_params::WebhookId, crate::openapi::RequiredIdempotencyKey),
    responses(
        (status = 200, description = "The attempt's outcome (delivered or not)", body = TestOutcome),
        crate::openapi::NotAUuidOrNoKey<path_params::WebhookId>,
        crate::openapi::NoSuchRegistration,
        (status = 409, description = "WEBHOOK_INACTIVE, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn test_webhook(call: RequiredKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    let request = call.request(&webhooks::TEST, &serde_json::Value::Null);
    // The attempt holds no transaction: the write that records it opens after it, the key held
    // from before it. A refused attempt (no such registration, INACTIVE) is that write's
    // outcome, audited as a failure.
    let tenant = call.scope.tenant;
    // The test event carries what any event carries from its request.
    let origin = EventOrigin {
        correlation_id: call.scope.context.correlation_id.clone(),
        idempotency_key: call.idempotency_key().map(str::to_owned),
    };
    write::run_after(
        &call.state,
        request,
        async |app| match app.webhooks.attempt_test(tenant, id, origin).await {
            Err(error) if !error.is_final_outcome() => Err(error),
            attempt => Ok(attempt),
        },
        async |app, w, attempt| {
            let (event_id, outcome) = attempt?;
            Reply::ok(&app.webhooks.record_test(w, id, event_id, &outcome).await?)
        },
    )
    .await
}

/// Rotate an HMAC_SHA256 registration's secret.
///
/// The new secret is in this answer only. For 24 hours (previousSecretExpiresAt) deliveries
/// carry two signatures, newest first; rotating again inside that overlap retires the older
/// secret at once.
#[utoipa::path(
    post, path = "/api/webhooks/{webhookId}/secret/rotate", tag = "webhooks", operation_id = "webhooks.rotateSecret",
    params(path_params::WebhookId, crate::openapi::RequiredIdempotencyKey),
    responses(
        (status = 200, description = "The registration with its new secret and previousSecretExpiresAt", body = WebhookOut),
        crate::openapi::NotAUuidOrNoKey<path_params::WebhookId>,
        (status = 404, description = "No such registration, or it is JWS_ES256 (no secret)", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn rotate_secret(call: RequiredKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    let request = call.request(&webhooks::ROTATE, &serde_json::Value::Null);
    let written = write::run_or_replay(&call.state, request, async |app, w| {
        Ok(Reply::ok(&app.webhooks.rotate(w, id).await?)?.with_secret("secret"))
    })
    .await?;
    replay_with_secret(&call.state, &call.scope, written, 200).await
}
