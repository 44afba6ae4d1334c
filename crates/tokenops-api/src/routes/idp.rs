//! `/idp`: the embedded identity provider's standard endpoints: OIDC discovery, the JWKS
//! document and the OAuth 2.0 token endpoint (client-credentials grant). They follow the OAuth
//! and OIDC specifications rather than the API's conventions: no API-Version, form-encoded
//! token requests, and RFC 6749 §5.2 error bodies, because OAuth client libraries parse those.
//! When the bank's own provider issues tokens, these answer 404.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::sync::Arc;

use crate::ApiState;
use crate::error::ApiResult;
use crate::request_id::RequestId;

pub fn router() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/idp/.well-known/openid-configuration", get(discovery))
        .route("/idp/.well-known/jwks.json", get(jwks))
        .route("/idp/oauth2/token", post(token))
}

fn require_embedded(state: &ApiState) -> ApiResult<()> {
    super::embedded_provider_only(state, "This deployment uses an external identity provider")
}

/// OpenID Connect discovery (OpenID Connect Discovery 1.0 §4): the issuer, the token endpoint
/// and where the signing keys are, for OAuth libraries that configure themselves from it.
#[utoipa::path(
    get, path = "/idp/.well-known/openid-configuration", tag = "idp", operation_id = "idp.discovery",
    security(()),
    responses(
        (status = 200, description = "The provider's metadata", body = OpenIdConfiguration),
        (status = 404, description = "The deployment uses an external identity provider", body = crate::openapi::ErrorBody),
    )
)]
pub(crate) async fn discovery(State(state): State<Arc<ApiState>>) -> ApiResult<Response> {
    require_embedded(&state)?;
    Ok(axum::Json(tokenops_identity::openid_configuration(state.app.identity.issuer())).into_response())
}

/// The public keys that verify the provider's access tokens (a JWKS, RFC 7517), each named by
/// the `kid` of the tokens it signs.
#[utoipa::path(
    get, path = "/idp/.well-known/jwks.json", tag = "idp", operation_id = "idp.jwks",
    security(()),
    responses(
        (status = 200, description = "The signing keys, the previous one kept during a rotation (Cache-Control: public, max-age=300)", body = crate::openapi::Jwks),
        (status = 404, description = "The deployment uses an external identity provider", body = crate::openapi::ErrorBody),
        (status = 500, description = "System error occurred", body = crate::openapi::ErrorBody),
    )
)]
pub(crate) async fn jwks(State(state): State<Arc<ApiState>>) -> ApiResult<Response> {
    require_embedded(&state)?;
    let document = state.app.identity.jwks().await?;
    // Verifiers may cache for a while; rotation keeps the previous key published meanwhile.
    Ok(([(header::CACHE_CONTROL, "public, max-age=300")], axum::Json(document)).into_response())
}

/// OpenID provider metadata, as `tokenops_identity::openid_configuration` writes it. Only
/// documents it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct OpenIdConfiguration {
    /// The `iss` of every access token: `{auth_url}`.
    issuer: String,
    jwks_uri: String,
    token_endpoint: String,
    /// `client_credentials`.
    grant_types_supported: Vec<String>,
    /// `client_secret_basic` and `client_secret_post`.
    token_endpoint_auth_methods_supported: Vec<String>,
    response_types_supported: Vec<String>,
    subject_types_supported: Vec<String>,
    id_token_signing_alg_values_supported: Vec<String>,
    claims_supported: Vec<String>,
}

/// An RFC 6749 §5.2 error body.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct OAuthError {
    /// invalid_request, unsupported_grant_type or invalid_client.
    #[schema(example = "invalid_client")]
    error: String,
    error_description: String,
}

/// The token request (RFC 6749 §4.4.2), form-encoded. The handler reads the form itself, so
/// this type only documents it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct TokenRequest {
    grant_type: GrantType,
    /// With `client_secret`, instead of HTTP Basic authentication (never both).
    client_id: Option<String>,
    client_secret: Option<String>,
}

/// The one grant the embedded provider issues.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub enum GrantType {
    #[serde(rename = "client_credentials")]
    ClientCredentials,
}

/// An access token (RFC 6749 §5.1).
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct TokenResponse {
    /// A JWT carrying the client as `sub` and its organisation as `tenant_id` (none for a
    /// platform operator client).
    access_token: String,
    /// Always `Bearer`.
    #[schema(example = "Bearer")]
    token_type: &'static str,
    /// Lifetime in seconds.
    #[schema(example = 3600)]
    expires_in: i64,
}

/// More parameters than a client-credentials request can have (`grant_type`, `client_id`,
/// `client_secret`, `scope`), with room for extensions a client may add.
const MAX_TOKEN_PARAMETERS: usize = 16;

fn oauth_error(status: StatusCode, error: &str, description: &str) -> Response {
    let body = OAuthError { error: error.to_owned(), error_description: description.to_owned() };
    let mut response = super::no_store((status, axum::Json(body)).into_response());
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"tokenops\""));
    }
    response
}

/// Why a token request's client authentication was refused (RFC 6749 §5.2).
#[derive(Clone, Copy)]
enum ClientAuthRefusal {
    /// More than one method used: `invalid_request`, 400.
    TwoMethods,
    /// None given, an unsupported scheme, or malformed credentials: `invalid_client`, 401.
    Failed(&'static str),
}

impl ClientAuthRefusal {
    fn response(self) -> Response {
        match self {
            Self::TwoMethods => {
                oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "use one client authentication method, not two")
            }
            Self::Failed(why) => oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", why),
        }
    }
}

/// The client's id and secret from HTTP Basic (RFC 6749 §2.3.1, form-urlencoded parts) or from
/// the form body.
fn client_credentials(headers: &HeaderMap, form: &[(String, String)]) -> Result<(String, String), ClientAuthRefusal> {
    use ClientAuthRefusal::{Failed, TwoMethods};
    let field = |name: &str| form.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let from_form = match (field("client_id"), field("client_secret")) {
        (Some(id), Some(secret)) => Some((id, secret)),
        (None, None) => None,
        _ => return Err(Failed("client_id and client_secret must be given together")),
    };
    let from_header = match headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        None => None,
        Some(value) => {
            let encoded = value
                .strip_prefix("Basic ")
                .or_else(|| value.strip_prefix("basic "))
                .ok_or(Failed("the Authorization header must use the Basic scheme"))?;
            let malformed = Failed("malformed Basic credentials");
            let decoded = STANDARD.decode(encoded.trim()).map_err(|_| malformed)?;
            let text = String::from_utf8(decoded).map_err(|_| malformed)?;
            let (id, secret) = text.split_once(':').ok_or(malformed)?;
            let decode =
                |s: &str| form_urlencoded::parse(format!("v={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
            Some((decode(id).unwrap_or_default(), decode(secret).unwrap_or_default()))
        }
    };
    match (from_form, from_header) {
        (Some(_), Some(_)) => Err(TwoMethods),
        (Some(c), None) | (None, Some(c)) => Ok(c),
        (None, None) => Err(Failed("client authentication is required")),
    }
}

/// Exchange a machine client's credentials for an access token (OAuth 2.0 client credentials).
///
/// The spec names the provider's token endpoint `{auth_url}`; the embedded provider serves it
/// here. It follows RFC 6749, not the API's conventions: no API-Version, a form-encoded body,
/// §5.2 error bodies. The platform operator's credentials are written at first start to
/// `{data_dir}/operator-credentials.json`; an organisation's clients get theirs from the
/// one-time reveal link.
#[utoipa::path(
    post, path = "/idp/oauth2/token", tag = "idp", operation_id = "idp.token",
    request_body(content = TokenRequest, content_type = "application/x-www-form-urlencoded"),
    security((), ("clientBasic" = [])),
    responses(
        (status = 200, description = "The access token (Cache-Control: no-store)", body = TokenResponse),
        (status = 400, description = "invalid_request (not form-encoded, no grant_type, two client authentication methods) or unsupported_grant_type", body = OAuthError),
        (status = 401, description = "invalid_client (WWW-Authenticate: Basic): no client authentication, a scheme other than Basic, malformed credentials, an unknown or disabled client, or a wrong secret", body = OAuthError),
        (status = 404, description = "The deployment uses an external identity provider", body = crate::openapi::ErrorBody),
        (status = 500, description = "System error occurred", body = crate::openapi::ErrorBody),
    )
)]
pub(crate) async fn token(
    State(state): State<Arc<ApiState>>,
    Extension(request_id): Extension<RequestId>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
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
    // The grant has four parameters at most; a body of thousands is refused before any work.
    if form.len() > MAX_TOKEN_PARAMETERS {
        return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_request", "too many parameters"));
    }
    // RFC 6749 §3.2: a request parameter must not be sent more than once.
    let mut seen = std::collections::HashSet::new();
    if let Some((name, _)) = form.iter().find(|(name, _)| !seen.insert(name.as_str())) {
        return Ok(oauth_error(StatusCode::BAD_REQUEST, "invalid_request", &format!("{name} is sent more than once")));
    }
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
        Err(refusal) => return Ok(refusal.response()),
    };
    let Some(issued) = state.app.identity.client_credentials(&client_id, &secret, &request_id.0).await? else {
        return Ok(oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", "client authentication failed"));
    };
    let issued = TokenResponse { access_token: issued.token, token_type: "Bearer", expires_in: issued.expires_in };
    Ok(super::no_store(axum::Json(issued).into_response()))
}
