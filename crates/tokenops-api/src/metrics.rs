//! Prometheus metrics: request counts and latencies by route and status (recorded here), job
//! queue depth and age (read from the store at scrape time), job outcomes (by the runner).

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Instant;
use tokenops_app::queue::QueueStats;

/// The process-wide recorder, installed once (several apps may run in one test process).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics shows only what this one records");
            }
            handle
        })
        .clone()
}

pub async fn record_request(request: Request, next: Next) -> Response {
    let route =
        request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "unmatched".into());
    let method = request.method().to_string();
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("tokenops_http_requests_total", &labels).increment(1);
    metrics::histogram!("tokenops_http_request_duration_seconds", &labels).record(started.elapsed().as_secs_f64());
    response
}

pub fn record_queue(stats: QueueStats) {
    metrics::gauge!("tokenops_jobs_queued").set(stats.queued as f64);
    metrics::gauge!("tokenops_jobs_running").set(stats.running as f64);
    metrics::gauge!("tokenops_jobs_dead").set(stats.dead as f64);
    metrics::gauge!("tokenops_jobs_oldest_due_age_seconds").set(stats.oldest_due_age_ms as f64 / 1_000.0);
}
