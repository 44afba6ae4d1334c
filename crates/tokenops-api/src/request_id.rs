//! The request's span: its id (from `X-Request-Id` when well formed, 1–128 of `A-Za-z0-9._:-`,
//! minted otherwise) and its trace context (W3C `traceparent`, continued or started), both
//! echoed on every response and recorded on the span with the route, organisation and caller.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tokenops_app::trace::TraceContext;
use tracing::Instrument;

pub static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

fn well_formed(text: &str) -> bool {
    (1..=128).contains(&text.len())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
}

pub async fn assign_request_id(mut request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| well_formed(v))
        .map(str::to_owned)
        .unwrap_or_else(|| tokenops_domain::new_id().to_string());
    request.extensions_mut().insert(RequestId(id.clone()));
    // The caller's trace continues here (W3C `traceparent`), or a new one starts; the jobs the
    // request enqueues carry it (`app::trace`).
    let parent = request.headers().get(TRACEPARENT).and_then(|v| v.to_str().ok()).and_then(TraceContext::parse);
    let context = parent.map_or_else(TraceContext::root, |p| p.child());
    // Routing has not happened yet at this outermost layer: the span names the path; the metrics
    // layer (a route layer) records the matched route, access control the caller and tenant.
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        method = %request.method(),
        path = %loggable_path(request.uri().path()),
        route = tracing::field::Empty,
        tenant_id = tracing::field::Empty,
        caller = tracing::field::Empty,
        status = tracing::field::Empty,
        trace_id = %context.trace_hex(),
        span_id = %context.span_hex(),
        parent_span_id = tracing::field::Empty,
    );
    if let Some(parent) = parent {
        span.record("parent_span_id", parent.span_hex());
    }
    let started = std::time::Instant::now();
    let mut response = context.scope(next.run(request).instrument(span.clone())).await;
    span.record("status", response.status().as_u16());
    span.in_scope(|| {
        tracing::info!(
            status = response.status().as_u16(),
            latency_ms = started.elapsed().as_millis() as u64,
            "request finished"
        )
    });
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    }
    if let Ok(value) = HeaderValue::from_str(&context.header()) {
        response.headers_mut().insert(TRACEPARENT, value);
    }
    response
}

/// Paths whose rest is a secret (a one-time reveal token): never written to a log or a span.
const SECRET_PATH_PREFIXES: &[&str] = &["/api/auth/client-secrets/"];

/// The request path as logs may show it: the secret part of a secret-bearing path redacted.
pub fn loggable_path(path: &str) -> std::borrow::Cow<'_, str> {
    for prefix in SECRET_PATH_PREFIXES {
        if let Some(rest) = path.strip_prefix(prefix)
            && !rest.is_empty()
        {
            return format!("{prefix}[redacted]").into();
        }
    }
    path.into()
}

#[cfg(test)]
mod tests {
    use super::{loggable_path, well_formed};

    #[test]
    fn secrets_in_paths_never_reach_a_log() {
        assert_eq!(loggable_path("/api/auth/client-secrets/s3cr3t-token"), "/api/auth/client-secrets/[redacted]");
        assert_eq!(loggable_path("/api/customers/c-1"), "/api/customers/c-1");
        assert_eq!(loggable_path("/api/auth/client-secrets/"), "/api/auth/client-secrets/");
    }

    #[test]
    fn request_ids_are_bounded_and_plain() {
        assert!(well_formed("abc-123_x.y:z"));
        assert!(!well_formed(""));
        assert!(!well_formed("has space"));
        assert!(!well_formed(&"a".repeat(129)));
    }
}
