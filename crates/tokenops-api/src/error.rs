//! The error envelope: one table from `Kind` to HTTP status and reason phrase, and the layer that
//! renders every error response as `{timestamp, status, error, message, code, details?,
//! requestId}` in the timestamp form its route group chose. Handlers never build error bodies.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};
use std::sync::Arc;
use tokenops_app::{Error, Kind};
use tokenops_domain::Timestamp;

use crate::ApiState;
use crate::request_id::RequestId;

/// The one error type of the HTTP layer: the app's `Error`, made renderable.
#[derive(Debug)]
pub struct ApiError(pub Error);

pub type ApiResult<T> = Result<T, ApiError>;

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
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

/// Status and reason phrase per kind: the single table every error response is rendered from.
pub fn status_of(kind: Kind) -> StatusCode {
    match kind {
        Kind::BadRequest => StatusCode::BAD_REQUEST,
        Kind::Unauthorized => StatusCode::UNAUTHORIZED,
        Kind::Forbidden => StatusCode::FORBIDDEN,
        Kind::NotFound => StatusCode::NOT_FOUND,
        Kind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
        Kind::Conflict => StatusCode::CONFLICT,
        Kind::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Kind::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Kind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
        Kind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        Kind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
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
        let status = status_of(self.0.kind);
        PendingErrorBody {
            status,
            message: self.0.message.clone(),
            code: self.0.code,
            details: serde_json::to_value(&self.0.details).unwrap_or(Value::Null),
            extra: self.0.extra.clone(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self.0.kind, Kind::Internal | Kind::Unavailable) {
            // The one place an unexpected failure is logged, with its cause.
            tracing::error!(error = %self.0, "request failed");
        }
        let pending = self.pending_body();
        let mut response = pending.status.into_response();
        if let Some(seconds) = self.0.retry_after
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
    let mut response = next.run(request).await;
    let pending = match response.extensions_mut().remove::<PendingErrorBody>() {
        Some(p) => p,
        None if response.status() == StatusCode::METHOD_NOT_ALLOWED => {
            ApiError(Error::new(Kind::MethodNotAllowed, "METHOD_NOT_ALLOWED", "The method is not allowed on this path"))
                .pending_body()
        }
        None => return response,
    };
    let style = response.extensions().get::<TimestampStyle>().copied().unwrap_or_default();
    let body = pending.render(style, state.app.clock.now(), request_id.as_ref().map(|r| r.0.as_str()));
    let (mut parts, _) = response.into_parts();
    parts.headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body.to_string()))
}

/// Unknown route: a 404 in the envelope.
pub async fn route_not_found() -> ApiError {
    ApiError(Error::new(Kind::NotFound, "ROUTE_NOT_FOUND", "No such endpoint"))
}
