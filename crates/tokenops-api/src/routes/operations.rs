//! Operational endpoints: liveness, readiness (not shutting down, store and ledger reachable),
//! Prometheus metrics, the OpenAPI document and its reference page. None needs API-Version or a
//! token.

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
        .route("/healthz", get(liveness))
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

/// The liveness body: `{"status": "ok"}` while the process serves HTTP.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Liveness {
    #[schema(example = "ok")]
    status: String,
}

/// The readiness body. Ready: `{status: "ready", store, ledgerBlock}`; not ready (503):
/// `{status: "unavailable" | "shutting_down", store, failing, message}`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub(crate) struct Readiness {
    /// `ready`, `unavailable` or `shutting_down`.
    status: String,
    /// The store in use: `sqlite` or `postgres`.
    store: String,
    /// The ledger's latest block, when ready.
    #[schema(rename = "ledgerBlock")]
    ledger_block: Option<u64>,
    /// When not ready: each failing part, of `shutdown`, `store`, `ledger`.
    failing: Option<Vec<String>>,
    /// When not ready: why, part by part.
    message: Option<String>,
}

/// Liveness: the process serves HTTP. It checks nothing else, so that an orchestrator restarts
/// only a process that no longer answers.
#[utoipa::path(
    get, path = "/healthz", tag = "operations", operation_id = "operations.liveness",
    security(()),
    responses((status = 200, description = "The process answers", body = Liveness))
)]
pub(crate) async fn liveness() -> Response {
    axum::Json(serde_json::json!({ "status": "ok" })).into_response()
}

/// How long readiness waits for the store and for the ledger: a probe must be answered before
/// its own timeout, and a dependency that takes longer than this to answer is not serving
/// requests either.
const READINESS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Ready when the service is not shutting down, its store answers `SELECT 1` and its ledger its
/// latest block, all checked at once. Otherwise 503 naming each failing part in `failing` and why
/// in `message`.
#[utoipa::path(
    get, path = "/readyz", tag = "operations", operation_id = "operations.readiness",
    security(()),
    responses(
        (status = 200, description = "Ready: not shutting down, the store answers and the ledger its latest block (each within 2 s)", body = Readiness),
        (status = 503, description = "Not ready: `failing` names each part (shutdown, store, ledger) and `message` says why; requests may still be answered (a node outage leaves the API serving)", body = Readiness),
    )
)]
pub(crate) async fn readiness(State(state): State<Arc<ApiState>>) -> Response {
    let app = &state.app;
    let store = app.store.backend().as_str();
    let bounded = |what: &'static str| format!("{what}: no answer within {} ms", READINESS_TIMEOUT.as_millis());
    let (store_probe, ledger_probe) = tokio::join!(
        tokio::time::timeout(READINESS_TIMEOUT, app.store.ping()),
        tokio::time::timeout(READINESS_TIMEOUT, app.ledger.latest_block()),
    );
    let mut failing = Vec::new();
    let mut problems = Vec::new();
    if state.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
        failing.push("shutdown");
        problems.push("the service is shutting down".to_owned());
    }
    match store_probe {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            failing.push("store");
            problems.push(format!("the {store} store cannot be reached: {e}"));
        }
        Err(_) => {
            failing.push("store");
            problems.push(bounded("the store"));
        }
    }
    let block = match ledger_probe {
        Ok(Ok(block)) => {
            metrics::gauge!("tokenops_ledger_last_block").set(block as f64);
            Some(block)
        }
        Ok(Err(e)) => {
            failing.push("ledger");
            problems.push(format!("the ledger cannot be reached: {e}"));
            None
        }
        Err(_) => {
            failing.push("ledger");
            problems.push(bounded("the ledger"));
            None
        }
    };
    if failing.is_empty() {
        let ready = serde_json::json!({ "status": "ready", "store": store, "ledgerBlock": block });
        return axum::Json(ready).into_response();
    }
    let message = problems.join("; ");
    if failing != ["shutdown"] {
        tracing::warn!(store, message, "readiness: not ready");
    }
    let status = if failing.contains(&"shutdown") { "shutting_down" } else { "unavailable" };
    let body = serde_json::json!({ "status": status, "store": store, "failing": failing, "message": message });
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}

/// Prometheus metrics of the service: requests, jobs, approvals, settlement and the ledger.
#[utoipa::path(
    get, path = "/metrics", tag = "operations", operation_id = "operations.metrics",
    security(()),
    responses((status = 200, description = "Prometheus text exposition format 0.0.4", body = String, content_type = "text/plain"))
)]
pub(crate) async fn metrics(State(state): State<Arc<ApiState>>) -> Response {
    match state.app.signals().await {
        Ok(signals) => crate::metrics::record_signals(&signals),
        Err(e) => tracing::warn!(error = %e, "metrics: could not read the job queue and approvals from the store"),
    }
    match tokio::time::timeout(READINESS_TIMEOUT, state.app.ledger.latest_block()).await {
        Ok(Ok(block)) => metrics::gauge!("tokenops_ledger_last_block").set(block as f64),
        Ok(Err(e)) => tracing::warn!(error = %e, "metrics: the ledger did not answer its latest block"),
        Err(_) => tracing::warn!("metrics: the ledger did not answer its latest block in time"),
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render()).into_response()
}

/// A self-contained reference page: renders /openapi.json with a few lines of script and no
/// downloaded assets.
const REFERENCE_PAGE: &str = include_str!("reference.html");
