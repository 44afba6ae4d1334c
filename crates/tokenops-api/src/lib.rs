//! The HTTP layer: routers per area of the spec (`routes`), the spec's cross-cutting rules as
//! extractors and layers (`extract`, `error`, `request_id`, `metrics`), and the write runner.
//! Handlers parse, call one app service and shape the response; no SQL and no business rule.

pub mod access;
pub mod csv;
pub mod error;
pub mod extract;
pub mod metrics;
pub mod openapi;
pub mod request_id;
pub mod routes;
pub mod write;

use axum::Router;
use axum::middleware::{from_fn, from_fn_with_state};
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use tokenops_app::App;
use tokenops_identity::TokenVerifier;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use error::TimestampStyle;
use extract::paging::CursorCodec;

/// What every handler can reach.
pub struct ApiState {
    pub app: Arc<App>,
    pub verifier: Arc<TokenVerifier>,
    pub cursors: CursorCodec,
    pub max_body_bytes: usize,
    /// How long a contract registration waits for its deployment to settle before answering.
    pub contract_register_wait: std::time::Duration,
    pub metrics: PrometheusHandle,
    /// Whether the embedded identity provider serves `/idp` and the sign-in endpoints (off when
    /// the bank's own provider issues the tokens).
    pub embedded_provider: bool,
    /// The service's base URL, for links it hands out (sign-in URL in invitations).
    pub public_url: String,
    /// Set at SIGTERM: `/readyz` answers 503 while in-flight requests finish.
    pub shutting_down: std::sync::atomic::AtomicBool,
}

/// The areas of the API, each with the timestamp form of its errors.
fn areas() -> Vec<(OpenApiRouter<Arc<ApiState>>, TimestampStyle)> {
    vec![
        (routes::customers::router(), TimestampStyle::Iso8601),
        (routes::contracts::router(), TimestampStyle::Iso8601),
        (routes::accounts::router(), TimestampStyle::Iso8601),
        (routes::transactions::router(), TimestampStyle::Iso8601),
        (routes::audit::router(), TimestampStyle::Iso8601),
        (routes::roles::router(), TimestampStyle::Iso8601),
        (routes::groups::router(), TimestampStyle::Iso8601),
        (routes::templates::router(), TimestampStyle::Iso8601),
        (routes::policies::router(), TimestampStyle::Iso8601),
        (routes::approvals::router(), TimestampStyle::Iso8601),
        (routes::scripts::router(), TimestampStyle::Iso8601),
        (routes::automations::router(), TimestampStyle::Iso8601),
        (routes::clients::router(), TimestampStyle::Iso8601),
        (routes::tenants::router(), TimestampStyle::Iso8601),
        (routes::users::router(), TimestampStyle::Iso8601),
        (routes::auth::router(), TimestampStyle::SpacedUtc),
        (routes::webhook_events::router(), TimestampStyle::SpacedUtc),
        (routes::webhooks::router(), TimestampStyle::SpacedUtc),
    ]
}

/// The OpenAPI document of the whole API.
pub fn document() -> utoipa::openapi::OpenApi {
    let (_, mut document) = areas()
        .into_iter()
        .fold(OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()), |api, (router, _)| api.merge(router))
        .split_for_parts();
    openapi::finish(&mut document);
    document
}

/// The complete HTTP surface: the API under `/api` (API-Version required and access checked on
/// every route; every area is added through [`area`]), the operational endpoints, the OpenAPI
/// document and its reference page.
pub fn router(state: Arc<ApiState>) -> Router {
    let areas = areas();
    let styles = error::AreaStyles::new(
        areas.iter().map(|(router, style)| (router.get_openapi().paths.paths.keys().map(String::as_str), *style)),
    );
    let (api, mut document) = areas
        .into_iter()
        .fold(OpenApiRouter::with_openapi(openapi::ApiDoc::openapi()), |api, (router, style)| {
            api.merge(area(router, style, &state))
        })
        .route_layer(from_fn(metrics::record_request))
        .split_for_parts();
    openapi::finish(&mut document);
    let token_url = state.embedded_provider.then(|| state.app.identity.token_url());
    openapi::for_deployment(&mut document, &state.public_url, token_url);
    Router::new()
        .merge(api)
        .merge(routes::operations::router(document))
        .merge(routes::idp::router())
        .merge(routes::webhooks::well_known_router())
        .fallback(move |request: axum::extract::Request| styles.route_not_found(request))
        .layer(from_fn_with_state(state.clone(), extract::body::read_whole_body))
        .layer(from_fn_with_state(state.clone(), error::render_errors))
        .layer(from_fn(request_id::assign_request_id))
        .with_state(state)
}

/// One area of the API: API-Version required on every route, then the route's guard
/// (`access`), and every error of the area in the area's timestamp form. The style layer wraps
/// the others, so that their refusals carry the area's form too (a webhook-history client sees
/// one form on every error).
fn area(
    router: OpenApiRouter<Arc<ApiState>>,
    style: TimestampStyle,
    state: &Arc<ApiState>,
) -> OpenApiRouter<Arc<ApiState>> {
    router
        .route_layer(from_fn_with_state(state.clone(), access::authorize))
        .layer(from_fn(extract::api_version::require_api_version))
        .layer(from_fn(move |request, next| error::timestamp_style(style, request, next)))
}

/// The operational endpoints alone, for worker-only nodes.
pub fn operations_only_router(state: Arc<ApiState>) -> Router {
    Router::new()
        .merge(routes::operations::router(openapi::ApiDoc::openapi()))
        .fallback(error::route_not_found)
        .layer(from_fn_with_state(state.clone(), error::render_errors))
        .layer(from_fn(request_id::assign_request_id))
        .with_state(state)
}
