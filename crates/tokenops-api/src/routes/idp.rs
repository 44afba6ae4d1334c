//! `/idp`: the embedded identity provider's standard endpoints: OIDC discovery, the JWKS
//! document and the OAuth 2.0 token endpoint (client-credentials grant). They follow the OAuth
//! and OIDC specifications rather than the API's conventions: no API-Version, form-encoded
//! token requests, and RFC 6749 §5.2 error bodies, because OAuth client libraries parse those.
//! When the bank's own provider issues tokens, these answer 404.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;
use std::sync::Arc;

use crate::ApiState;
use crate::error::{ApiError, ApiResult};

pub fn router() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/idp/.well-known/openid-configuration", get(discovery))
        .route("/idp/.well-known/jwks.json", get(jwks))
        .route("/idp/oauth2/token", post(token))
}

fn require_embedded(state: &ApiState) -> ApiResult<()> {
    if state.embedded_provider {
        Ok(())
    } else {
        Err(ApiError(tokenops_app::Error::new(
            tokenops_app::Kind::NotFound,
            "ROUTE_NOT_FOUND",
            "This deployment uses an external identity provider",
        )))
    }
}

async fn discovery(State(state): State<Arc<ApiState>>) -> ApiResult<Response> {
    require_embedded(&state)?;
    Ok(axum::Json(tokenops_identity::openid_configuration(state.app.identity.issuer())).into_response())
}

async fn jwks(State(state): State<Arc<ApiState>>) -> ApiResult<Response> {
    require_embedded(&state)?;
    let document = state.app.identity.jwks().await?;
    // Verifiers may cache for a while; rotation keeps the previous key published meanwhile.
    Ok(([(header::CACHE_CONTROL, "public, max-age=300")], axum::Json(document)).into_response())
}

/// An RFC 6749 §5.2 error.
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let mut response =
        (status, axum::Json(json!({ "error": error, "error_description": description }))).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"tokenops\""));
    }
    response
}

/// The client's id and secret from HTTP Basic (RFC 6749 §2.3.1, form-urlencoded parts) or from
/// the form body; both at once is an invalid request.
fn client_credentials(headers: &HeaderMap, form: &[(String, String)]) -> Result<(String, String), &'static str> {
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let from_form = match (field("client_id"), field("client_secret")) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        _ => return Err("client_id and client_secret must be given together"),
    };
    let from_header = match headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(value) => {
            let encoded = value
                .strip_prefix("Basic ")
                .or_else(|| value.strip_prefix("basic "))
                .ok_or("the Authorization header must use the Basic scheme")?;
            let decoded = STANDARD.decode(encoded.trim()).map_err(|_| "malformed Basic credentials")?;
            let text = String::from_utf8(decoded).map_err(|_| "malformed Basic credentials")?;
            let (id, secret) = text.split_once(':').ok_or("malformed Basic credentials")?;
            let decode =
                |s: &str| form_urlencoded::parse(format!("v={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
            Some((decode(id).unwrap_or_default(), decode(secret).unwrap_or_default()))
        }
    };
    match (from_form, from_header) {
        (Some(_), Some(_)) => Err("use one client authentication method, not two"),
        (Some(c), None) | (None, Some(c)) => Ok(c),
        (None, None) => Err("client authentication is required"),
    }
}

async fn token(State(state): State<Arc<ApiState>>, headers: HeaderMap, body: Bytes) -> ApiResult<Response> {
    require_embedded(&state)?;
    let form_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !form_type.to_ascii_lowercase().starts_with("application/x-www-form-urlencoded") {
        return Ok(oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be application/x-www-form-urlencoded",
        ));
    }
    let form: Vec<(String, String)> = form_urlencoded::parse(&body).into_owned().collect();
    match form.iter().find(|(k, _)| k == "grant_type").map(|(_, v)| v.as_str()) {
        Some("client_credentials") => {}
        Some(_) => {
            return Ok(oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only client_credentials is supported",
            ));
        }
        None => return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "grant_type is required")),
    }
    let (client_id, secret) = match client_credentials(&headers, &form) {
        Ok(c) => c,
        Err(problem) => return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_request", problem)),
    };
    let Some(issued) = state.app.identity.client_credentials(&client_id, &secret).await? else {
        return Ok(oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed"));
    };
    let mut response =
        axum::Json(json!({ "access_token": issued.token, "token_type": "Bearer", "expires_in": issued.expires_in }))
            .into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}
