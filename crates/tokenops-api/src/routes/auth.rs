//! `/api/auth/*`: sign-in with the embedded identity provider (login, refresh, new-password,
//! activate). Bodies are validated field by field with the spec's message `Invalid Request
//! parameter. {field}`; every credential failure is `401 Invalid credentials.`. These errors use
//! the spec's `yyyy-MM-dd HH:mm:ss.SSS` timestamps ("some identity errors").

use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};
use std::sync::Arc;
use tokenops_app::identity::signin::{self, LoginOutcome};
use tokenops_app::{Code, Error};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::TimestampStyle;
use crate::error::{ApiError, ApiResult};
use crate::extract::path::{PathParam, PathText};
use crate::extract::{JsonBody, TenantScope};
use crate::request_id::RequestId;
use crate::write::{self, Reply, WriteRequest};
use tokenops_app::context::Caller;
use tokenops_app::identity::clients::{self, RevealedSecret};

/// Longest accepted email and password: beyond these nothing valid exists.
const EMAIL_MAX: usize = 254;
const PASSWORD_MAX: usize = 1_024;
// The documented maxLength of an email and of a password (a new one is bounded by the password
// policy: see the tests).
const _: () = assert!(EMAIL_MAX == 254 && PASSWORD_MAX == 1_024);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(login))
        .routes(routes!(refresh))
        .routes(routes!(new_password))
        .routes(routes!(activate))
        .routes(routes!(reveal_client_secret))
}

fn require_embedded(state: &ApiState) -> Result<(), ApiError> {
    super::embedded_provider_only(state, "Sign-in is done at this deployment's external identity provider")
}

/// What each sign-in operation starts from, checked in the order its errors are answered: the
/// JSON body, then the deployment's provider (sign-in is the embedded provider's only).
struct SignInForm {
    request_id: String,
    fields: Map<String, Value>,
}

impl FromRequest<Arc<ApiState>> for SignInForm {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        // The request-id layer wraps every route, so the id is always there.
        let request_id = request.extensions().get::<RequestId>().map(|id| id.0.clone());
        let request_id = request_id.ok_or_else(|| Error::internal("a sign-in ran outside the request-id layer"))?;
        let body = JsonBody::<Map<String, Value>>::object_or_malformed(request, state).await?;
        require_embedded(state)?;
        Ok(Self { request_id, fields: body.value })
    }
}

fn invalid(name: &str) -> Error {
    Error::bad_request(format!("Invalid Request parameter. {name}")).with_code(Code::InvalidRequestParameter)
}

/// A required, non-blank text field, or `400 Invalid Request parameter. {field}`.
fn text<'a>(body: &'a Map<String, Value>, name: &str) -> Result<&'a str, Error> {
    body.get(name).and_then(Value::as_str).filter(|text| !text.trim().is_empty()).ok_or_else(|| invalid(name))
}

/// A required text field of at most `max` characters, without NUL (the store could not look it
/// up), or `400 Invalid Request parameter. {field}`.
fn field(body: &Map<String, Value>, name: &str, max: usize) -> Result<String, Error> {
    let text = text(body, name)?;
    if text.chars().count() > max || text.contains('\0') {
        return Err(invalid(name));
    }
    Ok(text.to_owned())
}

/// A refresh token or a challenge's session: any non-blank text, whatever its length, which the
/// sign-in then refuses with its 401 unless it is a live one (the spec lists no 400 for a token
/// that is merely not ours: another provider's may be over 1,000 characters long).
fn credential(body: &Map<String, Value>, name: &str) -> Result<String, Error> {
    text(body, name).map(str::to_owned)
}

fn email(body: &Map<String, Value>) -> Result<String, Error> {
    let email = field(body, "email", EMAIL_MAX)?;
    if !email.contains('@') || email.chars().any(char::is_whitespace) {
        return Err(Error::bad_request("Invalid Request parameter. email").with_code(Code::InvalidRequestParameter));
    }
    Ok(email)
}

/// Body of `POST /api/auth/login`. The handlers read the body field by field instead (for the
/// spec's `Invalid Request parameter. {field}`), so these request types only document it.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct LoginIn {
    /// At most 254 characters, with an `@` and no white space.
    #[schema(format = Email, max_length = 254, pattern = r"^[^\s\x00]*@[^\s\x00]*$")]
    email: String,
    /// The password, or the temporary password of an invited user: not blank, at most 1024
    /// characters.
    #[schema(format = Password, max_length = 1024, pattern = r"^[^\x00]*[^\s\x00][^\x00]*$")]
    password: String,
}

/// Body of `POST /api/auth/refresh`.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct RefreshIn {
    /// From a sign-in; not blank.
    #[schema(pattern = r"\S")]
    refresh_token: String,
}

/// Body of `POST /api/auth/new-password`.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct NewPasswordIn {
    /// At most 254 characters, with an `@` and no white space.
    #[schema(format = Email, max_length = 254, pattern = r"^[^\s\x00]*@[^\s\x00]*$")]
    email: String,
    /// Must satisfy the password policy; its message is the 400's. The policy: 12 to 256
    /// characters with an upper-case letter, a lower-case letter, a digit and a symbol, and not
    /// the email address.
    #[schema(format = Password, min_length = 12, max_length = 256, pattern = r"^[^\x00]*[^\s\x00][^\x00]*$")]
    new_password: String,
    /// From the NEW_PASSWORD_REQUIRED challenge; not blank.
    #[schema(pattern = r"\S")]
    session: String,
}

/// Body of `POST /api/auth/activate`.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct ActivateIn {
    /// At most 254 characters, with an `@` and no white space.
    #[schema(format = Email, max_length = 254, pattern = r"^[^\s\x00]*@[^\s\x00]*$")]
    email: String,
    /// From the invitation: not blank, at most 1024 characters.
    #[schema(format = Password, max_length = 1024, pattern = r"^[^\x00]*[^\s\x00][^\x00]*$")]
    temporary_password: String,
    /// Must satisfy the password policy; its message is the 400's. The policy: 12 to 256
    /// characters with an upper-case letter, a lower-case letter, a digit and a symbol, and not
    /// the email address.
    #[schema(format = Password, min_length = 12, max_length = 256, pattern = r"^[^\x00]*[^\s\x00][^\x00]*$")]
    new_password: String,
}

/// Always `Bearer`.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub enum TokenType {
    Bearer,
}

/// The tokens of a sign-in, as [`Tokens`] serializes them with a refresh token.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct SignedIn {
    /// A JWT; send it as `Authorization: Bearer`.
    access_token: String,
    /// Exchange it at `/api/auth/refresh` for a new access token.
    refresh_token: String,
    token_type: TokenType,
    /// The access token's lifetime in seconds.
    #[schema(example = 3600)]
    expires_in: i64,
}

/// A refreshed access token, as [`Tokens`] serializes it without a refresh token: refresh
/// hands out no new refresh token.
#[derive(utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[allow(dead_code)]
pub struct Refreshed {
    access_token: String,
    token_type: TokenType,
    /// The access token's lifetime in seconds.
    #[schema(example = 3600)]
    expires_in: i64,
}

/// The only challenge there is.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub enum Challenge {
    #[serde(rename = "NEW_PASSWORD_REQUIRED")]
    NewPasswordRequired,
}

/// An invited user's first sign-in: no tokens until a password is chosen. No `Debug`: the
/// session works like a credential.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct PasswordChallenge {
    challenge: Challenge,
    /// Send it to `/api/auth/new-password` with the new password.
    session: String,
}

/// What login answers: tokens or the challenge, never both.
#[derive(utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum LoginOut {
    SignedIn(SignedIn),
    Challenged(PasswordChallenge),
}

/// Tokens and sign-in sessions work like credentials: never cached.
fn no_store(body: &impl Serialize) -> Response {
    super::no_store(axum::Json(body).into_response())
}

/// Sign in with email and password.
#[utoipa::path(
    post, path = "/api/auth/login", tag = "auth", operation_id = "auth.login",
    request_body = LoginIn,
    security(()),
    responses(
        (status = 200, description = "Either {accessToken, refreshToken, tokenType, expiresIn} or {challenge: NEW_PASSWORD_REQUIRED, session}, never both", body = LoginOut),
        (status = 400, description = "Invalid Request parameter. {field}, or Malformed JSON request", body = crate::openapi::ErrorBody),
        (status = 401, description = "Invalid credentials. (whatever the cause)", body = crate::openapi::ErrorBody),
    )
)]
async fn login(State(state): State<Arc<ApiState>>, form: SignInForm) -> ApiResult<Response> {
    let email = email(&form.fields)?;
    let password = field(&form.fields, "password", PASSWORD_MAX)?;
    let outcome = signin::login(&state.app, &form.request_id, &email, &password).await?;
    Ok(match outcome {
        LoginOutcome::Tokens(tokens) => no_store(&tokens),
        LoginOutcome::NewPasswordRequired { session } => {
            no_store(&PasswordChallenge { challenge: Challenge::NewPasswordRequired, session })
        }
    })
}

/// A new access token for a refresh token (no new refresh token).
#[utoipa::path(
    post, path = "/api/auth/refresh", tag = "auth", operation_id = "auth.refresh",
    request_body = RefreshIn,
    security(()),
    responses(
        (status = 200, description = "A new access token; no new refresh token", body = Refreshed),
        (status = 400, description = "Invalid Request parameter. refreshToken (absent, blank or not a string), or Malformed JSON request", body = crate::openapi::ErrorBody),
        (status = 401, description = "Refresh token is invalid or expired. (any other text: unknown, of any length, expired, revoked, or the account disabled)", body = crate::openapi::ErrorBody),
    )
)]
async fn refresh(State(state): State<Arc<ApiState>>, form: SignInForm) -> ApiResult<Response> {
    let token = credential(&form.fields, "refreshToken")?;
    Ok(no_store(&signin::refresh(&state.app, &form.request_id, &token).await?))
}

/// What choosing a first password answers, by the challenge's session (new-password) or with
/// the temporary password (activate): the same tokens, the same refusals.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
enum PasswordChosen {
    #[response(status = 200, description = "Tokens as login; the user becomes ACTIVE")]
    SignedIn(SignedIn),
    #[response(
        status = 400,
        description = "Invalid Request parameter. {field}, Malformed JSON request, or the password policy's message"
    )]
    Invalid(crate::openapi::ErrorBody),
    #[response(
        status = 401,
        description = "Invalid credentials. (a wrong, used or expired session or temporary password, of any length, or the account locked)"
    )]
    Refused(crate::openapi::ErrorBody),
}

/// Complete the NEW_PASSWORD_REQUIRED challenge.
#[utoipa::path(
    post, path = "/api/auth/new-password", tag = "auth", operation_id = "auth.newPassword",
    request_body = NewPasswordIn,
    security(()),
    responses(PasswordChosen)
)]
async fn new_password(State(state): State<Arc<ApiState>>, form: SignInForm) -> ApiResult<Response> {
    let email = email(&form.fields)?;
    let new_password = field(&form.fields, "newPassword", PASSWORD_MAX)?;
    let session = credential(&form.fields, "session")?;
    Ok(no_store(&signin::new_password(&state.app, &form.request_id, &email, &new_password, &session).await?))
}

/// Activate an invited user with the temporary password and a new one.
#[utoipa::path(
    post, path = "/api/auth/activate", tag = "auth", operation_id = "auth.activate",
    request_body = ActivateIn,
    security(()),
    responses(PasswordChosen)
)]
async fn activate(State(state): State<Arc<ApiState>>, form: SignInForm) -> ApiResult<Response> {
    let email = email(&form.fields)?;
    let temporary = field(&form.fields, "temporaryPassword", PASSWORD_MAX)?;
    let new_password = field(&form.fields, "newPassword", PASSWORD_MAX)?;
    Ok(no_store(&signin::activate(&state.app, &form.request_id, &email, &temporary, &new_password).await?))
}

/// Reveal a machine client's secret, once.
#[utoipa::path(
    get, path = "/api/auth/client-secrets/{oneTimeToken}", tag = "auth", operation_id = "auth.revealClientSecret",
    params(("oneTimeToken" = String, Path, description = "From the secretRevealUrl handed out when the client was created")),
    security(()),
    responses(
        (status = 200, description = "{clientId, clientSecret, tokenUrl}; the link then stops working. The spec names this bootstrap operation without its method or path: this service serves it here", body = RevealedSecret),
        (status = 404, description = "The link is unknown, used or expired, or its client was disabled", body = crate::openapi::ErrorBody),
    )
)]
async fn reveal_client_secret(
    State(state): State<Arc<ApiState>>,
    request_id: axum::Extension<RequestId>,
    PathParam(token): PathText,
) -> ApiResult<Response> {
    require_embedded(&state)?;
    let gone = || Error::of(Code::RevealNotFound);
    // The reveal is recorded in the client's organisation's audit log.
    let tenant = state.app.clients.reveal_tenant(&token, state.app.clock.now()).await?.ok_or_else(gone)?;
    let caller = Caller::anonymous("anonymous", Some(tenant));
    let scope = TenantScope::acting_for(tenant, caller, &request_id.0, TimestampStyle::SpacedUtc);
    let token_url = state.app.identity.token_url();
    let request = WriteRequest::unkeyed(&scope, &clients::REVEAL);
    let response = write::run(&state, request, async |app, w| {
        Reply::ok(&app.clients.reveal(w, &app.sealer, &token_url, &token).await?)
    })
    .await?;
    Ok(super::no_store(response))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use tokenops_app::identity::signin::Tokens;
    use utoipa::PartialSchema;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;

    fn required<S: PartialSchema>() -> BTreeSet<String> {
        let RefOr::T(Schema::Object(object)) = S::schema() else { panic!("not an object schema") };
        assert_eq!(object.properties.len(), object.required.len(), "every member is always sent");
        object.required.iter().cloned().collect()
    }

    fn members(tokens: &Tokens) -> BTreeSet<String> {
        let value = serde_json::to_value(tokens).unwrap_or_default();
        value.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
    }

    /// The documented bounds of a new password are the password policy's.
    #[test]
    fn new_password_bounds_are_the_policys() {
        let policy = tokenops_identity::PasswordPolicy::default();
        for schema in [NewPasswordIn::schema(), ActivateIn::schema()] {
            let schema = serde_json::to_value(schema).unwrap_or_default();
            let property = &schema["properties"]["newPassword"];
            assert_eq!(property["minLength"], serde_json::json!(policy.min_length), "{property}");
            assert_eq!(property["maxLength"], serde_json::json!(policy.max_length), "{property}");
        }
    }

    /// The documented token bodies are the ones `Tokens` serializes, with and without a
    /// refresh token.
    #[test]
    fn token_bodies_are_documented_as_they_are_sent() {
        let tokens = |refresh: Option<&str>| Tokens {
            access_token: "a".into(),
            refresh_token: refresh.map(str::to_owned),
            token_type: "Bearer",
            expires_in: 3600,
        };
        assert_eq!(members(&tokens(Some("r"))), required::<SignedIn>());
        assert_eq!(members(&tokens(None)), required::<Refreshed>());
        assert_eq!(tokens(None).token_type, "Bearer", "TokenType documents the one value");
    }
}
