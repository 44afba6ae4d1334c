//! Operational endpoints: liveness, readiness (store reachable), Prometheus metrics, the OpenAPI
//! document and its reference page. None needs API-Version or a token.

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::sync::Arc;

use crate::ApiState;

pub fn router(document: utoipa::openapi::OpenApi) -> Router<Arc<ApiState>> {
    let json = Arc::new(document.to_pretty_json().unwrap_or_else(|_| "{}".into()));
    Router::new()
        .route("/healthz", get(|| async { axum::Json(serde_json::json!({ "status": "ok" })) }))
        .route("/readyz", get(readiness))
        .route("/metrics", get(metrics))
        .route(
            "/openapi.json",
            get(move || {
                let json = json.clone();
                async move { ([(header::CONTENT_TYPE, "application/json")], (*json).clone()) }
            }),
        )
        .route("/docs", get(|| async { Html(REFERENCE_PAGE) }))
}

/// How long readiness waits for the store: a probe must be answered before its own timeout,
/// and a store that takes longer than this to answer `SELECT 1` is not serving requests either.
const READINESS_STORE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

async fn readiness(State(state): State<Arc<ApiState>>) -> Response {
    let store = state.app.store.backend().as_str();
    let problem = match tokio::time::timeout(READINESS_STORE_TIMEOUT, state.app.store.ping()).await {
        Ok(Ok(())) => return axum::Json(serde_json::json!({ "status": "ready", "store": store })).into_response(),
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no answer within {} ms", READINESS_STORE_TIMEOUT.as_millis()),
    };
    tracing::warn!(store, problem, "readiness: the store cannot be reached");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        axum::Json(serde_json::json!({
            "status": "unavailable",
            "store": store,
            "failing": ["store"],
            "message": format!("the {store} store cannot be reached: {problem}"),
        })),
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    match state.app.queue_stats().await {
        Ok(stats) => crate::metrics::record_queue(stats),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read job queue statistics"),
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render()).into_response()
}

/// A self-contained reference page: renders /openapi.json with a few lines of script and no
/// downloaded assets.
const REFERENCE_PAGE: &str = include_str!("reference.html");
