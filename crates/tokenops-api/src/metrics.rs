//! Prometheus metrics: the one recorder (histogram buckets chosen per family, HELP text for
//! every family the service records, `tokenops_build_info`), request counts and latencies by
//! route and status (recorded here), and the figures a scrape reads (`App::signals`).

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics::Unit;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Instant;
use tokenops_app::signals::Signals;

/// Seconds, for request and step latencies: fine below 20 ms (the 202's goal), coarse above.
const LATENCY_BUCKETS: &[f64] = &[0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];
/// Seconds from acceptance to a terminal state: the 1 s settlement goal, then approvals that
/// take minutes or hours.
const SETTLEMENT_BUCKETS: &[f64] =
    &[0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3_600.0, 14_400.0, 86_400.0];
/// Counts per batch or commit.
const SIZE_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// Every family the service records: name, type, unit and HELP text. The Prometheus text shows
/// HELP for each; the alert rules and the dashboard in `docs/` may name only these.
pub const FAMILIES: &[(&str, Kind, Option<Unit>, &str)] = &[
    ("tokenops_build_info", Kind::Gauge, None, "Always 1; the labels say which build runs"),
    ("tokenops_http_requests_total", Kind::Counter, None, "HTTP requests answered, by method, route and status"),
    (
        "tokenops_http_request_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time to answer an HTTP request, by method, route and status (the 202 of POST /api/transactions included)",
    ),
    (
        "tokenops_operations_entered_total",
        Kind::Counter,
        None,
        "Token operations that entered a state, by type and state (SUBMITTED is acceptance; counted as the step writes it, so a step whose commit fails may count again when retried)",
    ),
    ("tokenops_operations_failed_total", Kind::Counter, None, "Token operations that FAILED, by type and failure code"),
    (
        "tokenops_operation_terminal_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time from acceptance (202) to a terminal state, by type and state",
    ),
    ("tokenops_breaks_total", Kind::Counter, None, "Breaks recorded, by reason"),
    ("tokenops_jobs_queued", Kind::Gauge, None, "Jobs waiting, by kind"),
    ("tokenops_jobs_running", Kind::Gauge, None, "Jobs running, by kind"),
    ("tokenops_jobs_dead", Kind::Gauge, None, "Jobs that used all their attempts, by kind"),
    (
        "tokenops_jobs_oldest_due_age_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the oldest due job of a kind has waited to start",
    ),
    ("tokenops_jobs_finished_total", Kind::Counter, None, "Job runs that ended, by kind and outcome"),
    ("tokenops_job_duration_seconds", Kind::Histogram, Some(Unit::Seconds), "Time a job run (or batch) took, by kind"),
    ("tokenops_job_batch_size", Kind::Histogram, None, "Jobs completed together in one batch, by kind"),
    ("tokenops_approvals_waiting", Kind::Gauge, None, "Approval requests PENDING in all organisations"),
    (
        "tokenops_approvals_oldest_waiting_age_seconds",
        Kind::Gauge,
        Some(Unit::Seconds),
        "How long the oldest PENDING approval request has waited",
    ),
    ("tokenops_ledger_last_block", Kind::Gauge, None, "The latest block the ledger answered"),
    (
        "tokenops_webhook_attempts_total",
        Kind::Counter,
        None,
        "Webhook delivery attempts, by outcome (delivered, retry, parked)",
    ),
    (
        "tokenops_webhook_attempt_duration_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "Time a webhook attempt took on the wire, by outcome",
    ),
    (
        "tokenops_webhook_backlog",
        Kind::Gauge,
        None,
        "Webhook deliveries waiting (PENDING or RETRY_PENDING), by the registration's status",
    ),
    (
        "tokenops_ledger_send_errors_total",
        Kind::Counter,
        None,
        "Signed transactions the ledger did not take, by kind (temporary, final, superseded)",
    ),
    (
        "tokenops_signatures_superseded_total",
        Kind::Counter,
        None,
        "Recorded signatures whose nonce another transaction took; signed anew",
    ),
    ("tokenops_nonce_gaps_healed_total", Kind::Counter, None, "Nonce gaps the sweep healed, by how (resent, filled)"),
    (
        "tokenops_operations_resumed_total",
        Kind::Counter,
        None,
        "In-flight operations the resume sweep gave a job again, by state",
    ),
    (
        "tokenops_store_group_commit_sync_seconds",
        Kind::Histogram,
        Some(Unit::Seconds),
        "SQLite: time of one group commit's sync",
    ),
    (
        "tokenops_store_group_commit_writes",
        Kind::Histogram,
        None,
        "SQLite: write transactions made durable by one group commit",
    ),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// The process-wide recorder, installed once (several apps may run in one test process).
pub fn handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = builder().build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics shows only what this one records");
            }
            describe();
            metrics::gauge!("tokenops_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
            handle
        })
        .clone()
}

fn builder() -> PrometheusBuilder {
    let buckets = [
        (Matcher::Full("tokenops_operation_terminal_seconds".into()), SETTLEMENT_BUCKETS),
        (Matcher::Full("tokenops_job_batch_size".into()), SIZE_BUCKETS),
        (Matcher::Full("tokenops_store_group_commit_writes".into()), SIZE_BUCKETS),
        (Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS),
    ];
    let mut builder = PrometheusBuilder::new();
    for (matcher, values) in buckets {
        // Refused only for an empty list; these are constants, none empty.
        builder = builder.set_buckets_for_metric(matcher, values).expect("bucket lists are not empty");
    }
    builder
}

fn describe() {
    for &(name, kind, unit, help) in FAMILIES {
        match (kind, unit) {
            (Kind::Counter, Some(unit)) => metrics::describe_counter!(name, unit, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => metrics::describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => metrics::describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

pub async fn record_request(request: Request, next: Next) -> Response {
    let route =
        request.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "unmatched".into());
    let method = request.method().to_string();
    tracing::Span::current().record("route", route.as_str());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let labels = [("method", method), ("route", route), ("status", status)];
    metrics::counter!("tokenops_http_requests_total", &labels).increment(1);
    metrics::histogram!("tokenops_http_request_duration_seconds", &labels).record(started.elapsed().as_secs_f64());
    response
}

/// Sets the gauges a scrape reads.
pub fn record_signals(signals: &Signals) {
    for (kind, stats) in &signals.queue {
        metrics::gauge!("tokenops_jobs_queued", "kind" => kind.clone()).set(stats.queued as f64);
        metrics::gauge!("tokenops_jobs_running", "kind" => kind.clone()).set(stats.running as f64);
        metrics::gauge!("tokenops_jobs_dead", "kind" => kind.clone()).set(stats.dead as f64);
        metrics::gauge!("tokenops_jobs_oldest_due_age_seconds", "kind" => kind.clone())
            .set(stats.oldest_due_age_ms as f64 / 1_000.0);
    }
    for (status, waiting) in &signals.webhook_backlog {
        metrics::gauge!("tokenops_webhook_backlog", "registration_status" => *status).set(*waiting as f64);
    }
    metrics::gauge!("tokenops_approvals_waiting").set(signals.approvals_waiting as f64);
    metrics::gauge!("tokenops_approvals_oldest_waiting_age_seconds")
        .set(signals.oldest_approval_age_ms as f64 / 1_000.0);
}
