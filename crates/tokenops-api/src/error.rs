//! The error envelope: every error's status comes from its code (the app's table,
//! `tokenops_app::codes::Code`, and HTTP's own, [`HttpCode`]), and one layer renders every error
//! response as `{timestamp, status, error, message, code, details?, requestId}` in the timestamp
//! form its route group chose. Handlers never build error bodies.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokenops_app::{Code, Error, error_codes};
use tokenops_domain::Timestamp;

use crate::ApiState;
use crate::request_id::RequestId;

error_codes! {
    /// The codes of HTTP itself, which no service raises; the app's are [`Code`]. Wire names are
    /// unique across both tables (`tests::wire_names_are_unique_across_both_tables`).
    pub enum HttpCode {
        RouteNotFound = "ROUTE_NOT_FOUND", 404, "No such endpoint";
        MethodNotAllowed = "METHOD_NOT_ALLOWED", 405, "The method is not allowed on this path";
        PayloadTooLarge = "PAYLOAD_TOO_LARGE", 413;
        UnsupportedMediaType = "UNSUPPORTED_MEDIA_TYPE", 415, "Content-Type must be application/json";
        MalformedJson = "MALFORMED_JSON", 400, "Malformed JSON request";
        UnsupportedApiVersion = "UNSUPPORTED_API_VERSION", 400;
    }
}

/// Every code an error body can carry, with its status: the app's table, then HTTP's.
pub fn all_codes() -> impl Iterator<Item = (&'static str, u16)> {
    let app = Code::ALL.iter().map(|c| (c.wire(), c.status()));
    app.chain(HttpCode::ALL.iter().map(|c| (c.wire(), c.status())))
}

/// The one error type of the HTTP layer: the app's `Error`, or an error of HTTP itself.
#[derive(Debug)]
pub enum ApiError {
    App(Error),
    Http { code: HttpCode, message: String },
}

pub type ApiResult<T> = Result<T, ApiError>;

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::App(e)
    }
}

impl ApiError {
    pub fn http(code: HttpCode, message: impl Into<String>) -> Self {
        ApiError::Http { code, message: message.into() }
    }

    /// An HTTP error with its code's default message (the code's name where it has none).
    pub fn http_default(code: HttpCode) -> Self {
        Self::http(code, code.default_message().unwrap_or(code.wire()))
    }
}

/// The spec's two timestamp forms; a route group picks one with [`timestamp_style`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampStyle {
    /// `2026-11-21T06:02:42.123Z`: most of the API.
    #[default]
    Iso8601,
    /// `2026-11-21 06:02:42.123`: webhooks, delivery history and some identity errors.
    SpacedUtc,
}

impl TimestampStyle {
    pub fn render(self, at: Timestamp) -> String {
        match self {
            TimestampStyle::Iso8601 => at.to_iso8601(),
            TimestampStyle::SpacedUtc => at.to_spaced_utc(),
        }
    }
}

/// The HTTP status of a code's table entry (the reason phrase is the status's canonical one).
pub fn status_of(status: u16) -> StatusCode {
    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The parts of an error body known when the error is raised; the renderer adds the timestamp
/// and the request id.
#[derive(Debug, Clone)]
pub struct PendingErrorBody {
    pub status: StatusCode,
    pub message: String,
    pub code: &'static str,
    pub details: Value,
    pub extra: Map<String, Value>,
}

impl PendingErrorBody {
    pub fn render(&self, style: TimestampStyle, now: Timestamp, request_id: Option<&str>) -> Value {
        let mut body = Map::new();
        body.insert("timestamp".into(), json!(style.render(now)));
        body.insert("status".into(), json!(self.status.as_u16()));
        body.insert("error".into(), json!(self.status.canonical_reason().unwrap_or("Error")));
        body.insert("message".into(), json!(self.message));
        body.insert("code".into(), json!(self.code));
        if self.details.as_array().is_some_and(|d| !d.is_empty()) {
            body.insert("details".into(), self.details.clone());
        }
        for (name, value) in &self.extra {
            body.insert(name.clone(), value.clone());
        }
        if let Some(id) = request_id {
            body.insert("requestId".into(), json!(id));
        }
        Value::Object(body)
    }
}

impl ApiError {
    pub fn pending_body(&self) -> PendingErrorBody {
        match self {
            ApiError::App(e) => PendingErrorBody {
                status: status_of(e.status()),
                message: e.message.clone(),
                code: e.code.wire(),
                details: serde_json::to_value(&e.details).unwrap_or(Value::Null),
                extra: e.extra.clone(),
            },
            ApiError::Http { code, message } => PendingErrorBody {
                status: status_of(code.status()),
                message: message.clone(),
                code: code.wire(),
                details: Value::Array(Vec::new()),
                extra: Map::new(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::App(e) = &self
            && e.status() >= 500
        {
            // The one place an unexpected failure is logged, with its cause.
            tracing::error!(error = %e, "request failed");
        }
        let pending = self.pending_body();
        let mut response = pending.status.into_response();
        if let ApiError::App(e) = &self
            && let Some(seconds) = e.retry_after
            && let Ok(v) = HeaderValue::from_str(&seconds.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response.extensions_mut().insert(pending);
        response
    }
}

/// Route-group layer choosing the timestamp form of its error bodies (and telling handlers,
/// which store rendered bodies for idempotent replay).
pub async fn timestamp_style(style: TimestampStyle, mut request: Request, next: Next) -> Response {
    request.extensions_mut().insert(style);
    let mut response = next.run(request).await;
    response.extensions_mut().insert(style);
    response
}

/// Outermost layer: renders every pending error body, and gives bare framework errors (405, and
/// anything else without a body) the envelope too.
pub async fn render_errors(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let request_id = request.extensions().get::<RequestId>().cloned();
    let path = request.uri().path().to_owned();
    let mut response = next.run(request).await;
    let pending = match response.extensions_mut().remove::<PendingErrorBody>() {
        Some(p) => p,
        None if response.status() == StatusCode::METHOD_NOT_ALLOWED => {
            ApiError::http_default(HttpCode::MethodNotAllowed).pending_body()
        }
        None => return response,
    };
    let style = response.extensions().get::<TimestampStyle>().copied().unwrap_or_default();
    let mut body = pending.render(style, state.app.clock.now(), request_id.as_ref().map(|r| r.0.as_str()));
    if response.status() == StatusCode::UNAUTHORIZED
        && names_its_path_on_401(&path)
        && let Some(fields) = body.as_object_mut()
    {
        fields.insert("path".to_owned(), Value::String(path));
    }
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

/// The spec's policy endpoints answer a refused token with a default body that carries the
/// request's `path` (Errors, Envelope): the envelope adds it there, and only there. Clients branch
/// on the status, never on the body.
fn names_its_path_on_401(path: &str) -> bool {
    ["/api/policies", "/api/templates", "/api/approvals"]
        .iter()
        .any(|area| path == *area || path.strip_prefix(area).is_some_and(|rest| rest.starts_with('/')))
}

/// Unknown route: a 404 in the envelope.
pub async fn route_not_found() -> ApiError {
    ApiError::http_default(HttpCode::RouteNotFound)
}

/// The timestamp form of each area's paths, read off the areas' routes (the one place that
/// picks a form is the list of areas): an unknown path answers in the form of the area whose
/// routes share its first two segments (`/api/webhooks/{id}/nope` is the webhooks area's), so
/// that an area's client sees one form on every error.
#[derive(Debug, Clone, Default)]
pub struct AreaStyles(Arc<std::collections::BTreeMap<String, TimestampStyle>>);

impl AreaStyles {
    /// `areas`: each area's route paths with its form.
    pub fn new<'a, P: IntoIterator<Item = &'a str>>(areas: impl IntoIterator<Item = (P, TimestampStyle)>) -> Self {
        let mut styles = std::collections::BTreeMap::new();
        for (paths, style) in areas {
            for path in paths {
                styles.insert(area_prefix(path).to_owned(), style);
            }
        }
        Self(Arc::new(styles))
    }

    pub fn style_of(&self, path: &str) -> TimestampStyle {
        self.0.get(area_prefix(path)).copied().unwrap_or_default()
    }

    /// [`route_not_found`] in the form of the path's area.
    pub async fn route_not_found(self, request: Request) -> Response {
        let style = self.style_of(request.uri().path());
        let mut response = ApiError::http_default(HttpCode::RouteNotFound).into_response();
        response.extensions_mut().insert(style);
        response
    }
}

/// A path's first two segments: `/api/webhooks` of `/api/webhooks/{webhookId}/test`.
fn area_prefix(path: &str) -> &str {
    let end = path.match_indices('/').nth(2).map_or(path.len(), |(at, _)| at);
    &path[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_path_takes_its_areas_form() {
        let styles = AreaStyles::new([
            (vec!["/api/webhooks", "/api/webhooks/{webhookId}/test"], TimestampStyle::SpacedUtc),
            (vec!["/api/customers"], TimestampStyle::Iso8601),
        ]);
        assert_eq!(styles.style_of("/api/webhooks/"), TimestampStyle::SpacedUtc);
        assert_eq!(styles.style_of("/api/webhooks/x/nope"), TimestampStyle::SpacedUtc);
        assert_eq!(styles.style_of("/api/webhooks"), TimestampStyle::SpacedUtc);
        assert_eq!(styles.style_of("/api/webhooksx"), TimestampStyle::Iso8601);
        assert_eq!(styles.style_of("/api/customers/x/y"), TimestampStyle::Iso8601);
        assert_eq!(styles.style_of("/nowhere"), TimestampStyle::Iso8601);
    }

    #[test]
    fn only_the_policy_areas_name_their_path_on_401() {
        assert!(names_its_path_on_401("/api/policies"));
        assert!(names_its_path_on_401("/api/policies/0190/activate"));
        assert!(names_its_path_on_401("/api/templates"));
        assert!(names_its_path_on_401("/api/approvals/tasks"));
        assert!(!names_its_path_on_401("/api/policiesx"));
        assert!(!names_its_path_on_401("/api/customers"));
    }

    #[test]
    fn wire_names_are_unique_across_both_tables() {
        let mut seen = std::collections::HashSet::new();
        for (wire, status) in all_codes() {
            assert!(seen.insert(wire), "{wire} declared twice");
            assert!(StatusCode::from_u16(status).is_ok_and(|s| s.is_client_error() || s.is_server_error()), "{wire}");
        }
    }

    #[test]
    fn the_spec_codes_for_what_comes_next_are_in_the_table() {
        let validation = Error::invalid_field("amount", "must be positive");
        let body = ApiError::from(validation).pending_body();
        assert_eq!((body.status, body.code), (StatusCode::BAD_REQUEST, "VALIDATION_FAILED"));
        assert_eq!(body.details, json!([{"field": "amount", "message": "must be positive"}]));
        let busy = ApiError::from(Error::of(Code::IdempotencyConflict)).pending_body();
        assert_eq!((busy.status, busy.code), (StatusCode::CONFLICT, "IDEMPOTENCY_CONFLICT"));
    }
}
