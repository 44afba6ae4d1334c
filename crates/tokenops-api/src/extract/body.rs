//! JSON request bodies: `Content-Type: application/json` (415 otherwise), a size limit (413),
//! `Malformed JSON request` for unreadable JSON (400; for the sign-in endpoints also JSON that is
//! not an object), and a 400 naming the field for a body of the wrong shape, a key given twice
//! or a number that would be rounded (`strict_json`). The parsed document
//! is kept for the idempotency fingerprint. Every request's body is read whole before routing
//! (`read_whole_body`).

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::HeaderValue;
use axum::http::header::{CONNECTION, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::Response;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::json_depth;

use super::strict_json::{self, ParseError};
use crate::ApiState;
use crate::error::{ApiError, HttpCode};

#[derive(Debug, Clone)]
pub struct JsonBody<T> {
    pub value: T,
    /// The document as sent (parsed), for the request fingerprint.
    pub document: Value,
}

pub fn is_json_content_type(value: Option<&str>) -> bool {
    let Some(value) = value else { return false };
    let mime = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

impl<T: Default> JsonBody<T> {
    /// A body that may be left out, as sent, or else the default value with the document `{}`:
    /// the same request either way, so a retry that adds or drops the empty body still
    /// fingerprints the same under its Idempotency-Key.
    pub fn or_default(body: Option<Self>) -> Self {
        body.unwrap_or_else(|| Self { value: T::default(), document: Value::Object(serde_json::Map::new()) })
    }
}

impl<T: DeserializeOwned> FromRequest<Arc<ApiState>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        required(request, state, BodyRefusal::Named).await
    }
}

/// How a body that is JSON but not an object, or that holds a NUL, is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BodyRefusal {
    /// 400 `The request body must be a JSON object`, and 400 for a NUL anywhere.
    Named,
    /// As unreadable JSON: 400 `Malformed JSON request`; a NUL is left to the route, which
    /// checks each field it reads.
    SignInStyle,
}

impl<T: DeserializeOwned> JsonBody<T> {
    /// A required body as the extractor reads it, except that JSON other than an object (`[1]`,
    /// `null`, `"x"`) is `Malformed JSON request` and a NUL is the route's to refuse: the sign-in
    /// endpoints' spec allows only that and `Invalid Request parameter. {field}` (Errors >
    /// Sign-in).
    pub async fn object_or_malformed(request: Request, state: &Arc<ApiState>) -> Result<Self, ApiError> {
        required(request, state, BodyRefusal::SignInStyle).await
    }
}

async fn required<T: DeserializeOwned>(
    request: Request,
    state: &Arc<ApiState>,
    refusal: BodyRefusal,
) -> Result<JsonBody<T>, ApiError> {
    let content_type = request.headers().get(CONTENT_TYPE).map(|v| v.to_str().unwrap_or_default().to_owned());
    let bytes = read(request, state).await?;
    // A request with neither body nor Content-Type sent no fields: it is answered as `{}` would
    // be, with the 400 naming what is required (the spec keeps 415 for one read).
    if bytes.is_empty() && content_type.is_none() {
        return parse(b"{}", refusal);
    }
    if !is_json_content_type(content_type.as_deref()) {
        return Err(ApiError::http_default(HttpCode::UnsupportedMediaType));
    }
    parse(&bytes, refusal)
}

/// A body that may be left out (`Option<JsonBody<T>>`): an empty body is `None`, with or
/// without a Content-Type (clients differ in what they send with no body); anything else is
/// checked as a required body would be.
impl<T: DeserializeOwned> axum::extract::OptionalFromRequest<Arc<ApiState>> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<ApiState>) -> Result<Option<Self>, Self::Rejection> {
        let json = is_json_content_type(request.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()));
        let bytes = read(request, state).await?;
        if bytes.is_empty() {
            return Ok(None);
        }
        if !json {
            return Err(ApiError::http_default(HttpCode::UnsupportedMediaType));
        }
        parse(&bytes, BodyRefusal::Named).map(Some)
    }
}

/// Marks a request whose body could not be read whole: past the size limit, or broken off.
#[derive(Debug, Clone, Copy)]
enum UnreadBody {
    TooLarge,
    Broken,
}

/// Reads every request's body whole, up to the size limit, before any check may refuse the
/// request. A refusal made before the body was read (a missing key, a bad token) would otherwise
/// leave its bytes on the connection, and the server would close a connection the client still
/// takes for reusable: its next request would fail. A body that cannot be read whole is handed on
/// empty and marked (`read` answers 413 or 400), and its response says `Connection: close`.
pub async fn read_whole_body(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, state.max_body_bytes).await;
    let unread = match read {
        Ok(bytes) => return next.run(Request::from_parts(parts, Body::from(bytes))).await,
        Err(error) if past_the_limit(&error) => UnreadBody::TooLarge,
        Err(_) => UnreadBody::Broken,
    };
    parts.extensions.insert(unread);
    let mut response = next.run(Request::from_parts(parts, Body::empty())).await;
    response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn past_the_limit(error: &axum::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(error) = cause {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// The body's bytes, as `read_whole_body` read them (413 past the size limit).
async fn read(request: Request, state: &Arc<ApiState>) -> Result<axum::body::Bytes, ApiError> {
    let limit = state.max_body_bytes;
    let too_large = || ApiError::http(HttpCode::PayloadTooLarge, format!("The request body exceeds {limit} bytes"));
    match request.extensions().get::<UnreadBody>() {
        Some(UnreadBody::TooLarge) => return Err(too_large()),
        Some(UnreadBody::Broken) => return Err(Error::bad_request("The request body could not be read").into()),
        None => {}
    }
    axum::body::to_bytes(request.into_body(), limit).await.map_err(|_| too_large())
}

/// A JSON object's bytes parsed into `T`, keeping the document for the fingerprint.
fn parse<T: DeserializeOwned>(bytes: &[u8], refusal: BodyRefusal) -> Result<JsonBody<T>, ApiError> {
    let malformed = || ApiError::http_default(HttpCode::MalformedJson);
    let document = match strict_json::parse(bytes) {
        Ok(document) => document,
        Err(ParseError::Malformed) => return Err(malformed()),
        Err(ParseError::Refused(_)) if refusal == BodyRefusal::SignInStyle => return Err(malformed()),
        Err(ParseError::Refused(strict)) if strict.path().is_empty() => {
            return Err(Error::bad_request(format!("Invalid request body: the document {}", strict.problem())).into());
        }
        Err(ParseError::Refused(strict)) => return Err(Error::invalid_field(strict.path(), strict.problem()).into()),
    };
    if !document.is_object() {
        return Err(match refusal {
            BodyRefusal::Named => Error::bad_request("The request body must be a JSON object").into(),
            BodyRefusal::SignInStyle => malformed(),
        });
    }
    if json_depth::too_deep(&document) {
        // Kept, it would nest past what a reader of its audit record or replay accepts.
        return Err(match refusal {
            BodyRefusal::Named => Error::bad_request(format!(
                "The request body nests objects and arrays deeper than {} levels",
                json_depth::MAX_DEPTH
            ))
            .into(),
            BodyRefusal::SignInStyle => malformed(),
        });
    }
    if refusal == BodyRefusal::Named && contains_nul(&document) {
        // PostgreSQL cannot store it and no field of the API has a use for it.
        return Err(Error::bad_request("Text in the request body must not contain NUL (\\u0000) characters").into());
    }
    let value = serde_path_to_error::deserialize(&document).map_err(shape_error)?;
    Ok(JsonBody { value, document })
}

/// A body of the wrong shape: a 400 whose `details` name the field (its JSON path, `params.x`,
/// `approvers[2].step`), so a client need not parse the message to find what to fix.
fn shape_error(error: serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = error.path().to_string();
    let problem = in_json_words(&error.inner().to_string());
    // The path ends at the offending field.
    let field = match path.as_str() {
        "" | "." => return Error::bad_request(format!("Invalid request body: {problem}")).into(),
        path => path.to_owned(),
    };
    Error::invalid_field(&field, problem).into()
}

/// serde's description of what it expected names Rust types (`expected struct OwnerIn`,
/// `expected u32`); a client reads JSON, so those become JSON's words.
fn in_json_words(problem: &str) -> String {
    let Some((head, expected)) = problem.split_once("expected ") else { return problem.to_owned() };
    let (what, rest) = expected.split_once(' ').map_or((expected, ""), |(what, rest)| (what, rest));
    let words = match what {
        "struct" | "map" => Some(("an object", rest.split_once(' ').map_or("", |(_, after)| after))),
        "u8" | "u16" | "u32" | "u64" | "usize" | "i8" | "i16" | "i32" | "i64" | "isize" => {
            Some(("a whole number", rest))
        }
        "f32" | "f64" => Some(("a number", rest)),
        _ => None,
    };
    match words {
        Some((json, "")) => format!("{head}expected {json}"),
        Some((json, rest)) => format!("{head}expected {json} {rest}"),
        None => problem.to_owned(),
    }
}

fn contains_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(contains_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || contains_nul(v)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::{contains_nul, in_json_words, is_json_content_type};

    #[test]
    fn what_was_expected_is_said_in_json_words() {
        assert_eq!(
            in_json_words("invalid type: string \"x\", expected struct OwnerIn"),
            "invalid type: string \"x\", expected an object"
        );
        assert_eq!(
            in_json_words("invalid type: string \"1\", expected u32"),
            "invalid type: string \"1\", expected a whole number"
        );
        assert_eq!(
            in_json_words("invalid value: integer `-1`, expected u32"),
            "invalid value: integer `-1`, expected a whole number"
        );
        assert_eq!(
            in_json_words("invalid type: integer `1`, expected a string"),
            "invalid type: integer `1`, expected a string"
        );
        assert_eq!(in_json_words("missing field `x`"), "missing field `x`");
    }

    #[test]
    fn nul_is_found_anywhere() {
        assert!(contains_nul(&serde_json::json!({ "a": ["x", "y\u{0}"] })));
        assert!(contains_nul(&serde_json::json!({ "k\u{0}": 1 })));
        assert!(!contains_nul(&serde_json::json!({ "a": "plain", "b": [1, null] })));
    }

    #[test]
    fn json_media_types() {
        assert!(is_json_content_type(Some("application/json")));
        assert!(is_json_content_type(Some("application/json; charset=utf-8")));
        assert!(is_json_content_type(Some("application/merge-patch+json")));
        assert!(!is_json_content_type(Some("text/plain")));
        assert!(!is_json_content_type(None));
    }
}
