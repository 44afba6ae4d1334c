//! The write runner every write handler uses: admits the request (API-Version, auth, key and
//! body were checked by extractors), runs one app service call on the admitted `Write`, then
//! commits the effect with its response, stores a caller's mistake as the key's outcome, or
//! abandons the write after an internal failure. Replays answer with the stored response.

use axum::extract::{FromRequestParts, MatchedPath};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;
use std::fmt::Display;
use std::marker::PhantomData;
use std::sync::Arc;
use tokenops_app::write::{Admission, AuditAction, Held, IdempotencyRequest, RefusedKey, Write, WriteResponse};
use tokenops_app::{App, AppResult, Error};

use crate::ApiState;
use crate::error::{ApiError, ApiResult};
use crate::extract::path::ScopedPath;
use crate::extract::{IdempotencyKey, TenantCall, TenantScope};

/// A successful write's response.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub location: Option<String>,
    /// Body members answered to this request only, never stored under its key: a secret the
    /// response shows once must not lie in the idempotency records in clear (see
    /// [`Reply::with_secret`]).
    secret: Option<(&'static str, String)>,
}

impl Reply {
    pub fn ok(body: &impl Serialize) -> AppResult<Self> {
        Ok(Self {
            status: StatusCode::OK,
            body: serde_json::to_value(body).map_err(Error::internal)?,
            location: None,
            secret: None,
        })
    }

    pub fn created(body: &impl Serialize, location: String) -> AppResult<Self> {
        Ok(Self {
            status: StatusCode::CREATED,
            body: serde_json::to_value(body).map_err(Error::internal)?,
            location: Some(location),
            secret: None,
        })
    }

    /// Moves the body member `name` (a secret shown once) out of what is stored under the key:
    /// it is answered to this request, and a replay answers without it unless its handler puts
    /// it back from where the secret is sealed.
    pub fn with_secret(mut self, name: &'static str) -> Self {
        let taken = self.body.as_object_mut().and_then(|body| body.remove(name));
        if let Some(Value::String(secret)) = taken {
            self.secret = Some((name, secret));
        }
        self
    }

    /// 202: the write is accepted and goes on in the background; `location` is where to follow it.
    pub fn accepted(body: &impl Serialize, location: String) -> AppResult<Self> {
        Ok(Self {
            status: StatusCode::ACCEPTED,
            body: serde_json::to_value(body).map_err(Error::internal)?,
            location: Some(location),
            secret: None,
        })
    }

    /// 204: the write succeeded and there is nothing to show.
    pub fn no_content() -> Self {
        Self { status: StatusCode::NO_CONTENT, body: Value::Null, location: None, secret: None }
    }

    fn stored(self) -> WriteResponse {
        debug_assert!(self.secret.is_none(), "the secret is taken out before storing");
        let headers = self.location.map(|l| vec![("location".to_owned(), l)]).unwrap_or_default();
        // The write's resource id is filled in by `Writes::commit`.
        WriteResponse { status: self.status.as_u16(), body: self.body, headers, resource_id: None }
    }
}

/// A reply answered outside a write's own commit: the resource read again after its write
/// committed (what the key stored is the write's first answer).
impl IntoResponse for Reply {
    fn into_response(self) -> Response {
        respond(&self.stored(), false)
    }
}

impl Reply {
    /// This reply answered to a replay of its key (`Idempotent-Replayed: true`): the resource
    /// read again for a handler whose replay answers it as it is now, not as stored.
    pub fn replayed(self) -> Response {
        respond(&self.stored(), true)
    }
}

pub use tokenops_app::write::fingerprint;

/// A replayed response with `name` set to `value` (a secret put back from where it is sealed).
pub fn replayed_with(mut stored: WriteResponse, name: &str, value: Option<String>) -> Response {
    if let (Some(value), Some(body)) = (value, stored.body.as_object_mut()) {
        body.insert(name.to_owned(), Value::String(value));
    }
    respond(&stored, true)
}

fn respond(stored: &WriteResponse, replayed: bool) -> Response {
    let status = StatusCode::from_u16(stored.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if status == StatusCode::NO_CONTENT {
        let mut response = status.into_response();
        if replayed {
            response
                .headers_mut()
                .insert(HeaderName::from_static("idempotent-replayed"), HeaderValue::from_static("true"));
        }
        return response;
    }
    // Rendered from the stored body itself: a response is as large as the resource it shows.
    let body = match serde_json::to_vec(&stored.body) {
        Ok(bytes) => bytes,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    };
    let mut response = (status, body).into_response();
    for (name, value) in &stored.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::from_str(value)) {
            response.headers_mut().insert(name, value);
        }
    }
    if replayed {
        response.headers_mut().insert(HeaderName::from_static("idempotent-replayed"), HeaderValue::from_static("true"));
    }
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The write a request asks for, taken once from the request: its method and matched route
/// (for example `PATCH /api/customers/{customerRef}`), the parts of its fingerprint that no
/// handler spells out.
#[derive(Debug, Clone)]
pub struct WriteRoute {
    method: Method,
    route: String,
}

impl<S: Send + Sync> FromRequestParts<S> for WriteRoute {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        // Every write route is matched by the router, so it has a matched path.
        let route = parts.extensions.get::<MatchedPath>().map(|m| m.as_str().to_owned());
        let route = route.ok_or_else(|| Error::internal("a write handler ran outside the router"))?;
        Ok(Self { method: parts.method.clone(), route })
    }
}

impl WriteRoute {
    /// The request for [`run`]: `params` fill the route's `{…}` parameters in order, as the
    /// handler has read them (a UUID in its canonical form), and with the body document they
    /// make the fingerprint, so a retry written differently is still the same request.
    pub fn request<'a>(
        &self,
        scope: &'a TenantScope,
        action: &'static AuditAction,
        key: Option<IdempotencyKey>,
        params: &[&dyn Display],
        document: &Value,
    ) -> WriteRequest<'a> {
        let caller = action.per_caller.then_some(scope.context.caller.subject.as_str());
        let fingerprint = fingerprint(self.method.as_str(), &self.path(params), caller, document);
        WriteRequest { scope, action, key, fingerprint, resource_id: None }
    }

    /// The route with its parameters filled in.
    fn path(&self, params: &[&dyn Display]) -> String {
        let mut path = String::with_capacity(self.route.len() + 64);
        let mut params = params.iter();
        let mut rest = self.route.as_str();
        while let Some(open) = rest.find('{') {
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
            path.push_str(&rest[..open]);
            match params.next() {
                Some(value) => path.push_str(&value.to_string()),
                None => path.push_str(&rest[open..close]),
            }
            rest = &rest[close..];
        }
        path.push_str(rest);
        debug_assert!(params.next().is_none(), "more parameters than {} has", self.route);
        debug_assert!(!path.contains('{'), "{} needs more parameters", self.route);
        path
    }
}

/// A write request as its handler takes it: the [`TenantCall`] (the caller's organisation and
/// the route's path values), then the route itself and the Idempotency-Key, read in that order (the body, read last, is the
/// handler's own argument). `K` is the key's rule: [`RequiredKeyWrite`] or [`OptionalKeyWrite`].
pub struct WriteCall<K, P> {
    pub state: Arc<ApiState>,
    pub scope: TenantScope,
    pub path: P,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
    key_rule: PhantomData<K>,
}

/// A write of the spec's resources: the Idempotency-Key is required (400 without it).
pub type RequiredKeyWrite<P = ()> = WriteCall<IdempotencyKey, P>;
/// A write whose Idempotency-Key is optional (still checked when sent).
pub type OptionalKeyWrite<P = ()> = WriteCall<Option<IdempotencyKey>, P>;

impl<K, P> FromRequestParts<Arc<ApiState>> for WriteCall<K, P>
where
    K: FromRequestParts<Arc<ApiState>, Rejection = ApiError> + Into<Option<IdempotencyKey>> + Send,
    P: ScopedPath,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        let TenantCall { state, scope, path } = TenantCall::from_request_parts(parts, state).await?;
        let route = WriteRoute::from_request_parts(parts, &state).await?;
        let key = K::from_request_parts(parts, &state).await?.into();
        Ok(Self { state, scope, path, route, key, key_rule: PhantomData })
    }
}

impl<K, P: ScopedPath> WriteCall<K, P> {
    /// The Idempotency-Key sent, for work done before the write opens (which reads it from
    /// there otherwise).
    pub fn idempotency_key(&self) -> Option<&str> {
        self.key.as_ref().map(|k| k.0.as_str())
    }

    /// The request for [`run`], about the resource the path names (if it names one by id);
    /// `document` is the body as sent (`Value::Null` without one).
    pub fn request(&self, action: &'static AuditAction, document: &Value) -> WriteRequest<'_> {
        let request = self.route.request(&self.scope, action, self.key.clone(), &self.path.values(), document);
        match self.path.resource() {
            Some(resource_id) => request.about(resource_id),
            None => request,
        }
    }

    /// Runs `work` as this request's write (see [`run`]).
    pub async fn run<F>(&self, action: &'static AuditAction, document: &Value, work: F) -> ApiResult<Response>
    where
        F: AsyncFnOnce(&App, &mut Write) -> AppResult<Reply>,
    {
        run(&self.state, self.request(action, document), work).await
    }

    /// Runs `work` as this request's write about `resource_id`: a resource the body names, or
    /// the one the path names once parsed (see [`run`]).
    pub async fn run_about<F>(
        &self,
        action: &'static AuditAction,
        document: &Value,
        resource_id: impl Into<String>,
        work: F,
    ) -> ApiResult<Response>
    where
        F: AsyncFnOnce(&App, &mut Write) -> AppResult<Reply>,
    {
        run(&self.state, self.request(action, document).about(resource_id), work).await
    }

    /// Runs `work` as this request's write, sent without a body, that has nothing to show (a
    /// deletion, a removal): 204.
    pub async fn run_no_content<F>(&self, action: &'static AuditAction, work: F) -> ApiResult<Response>
    where
        F: AsyncFnOnce(&App, &mut Write) -> AppResult<()>,
    {
        self.run(action, &Value::Null, async |app, w| {
            work(app, w).await?;
            Ok(Reply::no_content())
        })
        .await
    }
}

/// What [`run`] admits: who writes, the audit action (also the Idempotency-Key's scope), the key
/// with the request's fingerprint, and the resource the write is about. Made by
/// [`WriteRoute::request`].
pub struct WriteRequest<'a> {
    scope: &'a TenantScope,
    action: &'static AuditAction,
    key: Option<IdempotencyKey>,
    fingerprint: String,
    resource_id: Option<String>,
}

impl<'a> WriteRequest<'a> {
    /// A write that takes no Idempotency-Key (so needs no fingerprint).
    pub fn unkeyed(scope: &'a TenantScope, action: &'static AuditAction) -> Self {
        Self { scope, action, key: None, fingerprint: String::new(), resource_id: None }
    }

    /// Names the resource the write is about, when the request names it (for the audit record).
    /// A path may name what no resource can be (`%00` in it): kept as the record can hold it.
    pub fn about(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(tokenops_domain::audit::storable_text(resource_id.into()));
        self
    }

    /// A write whose resource it makes from the one its path names (a clone): the service
    /// names the new one.
    pub fn about_what_it_makes(mut self) -> Self {
        self.resource_id = None;
        self
    }
}

/// What [`run_or_replay`] hands back.
pub enum Written {
    /// The key had completed with the same request: its stored response, with the resource id
    /// the write named (`None` for a record stored before the store kept it).
    Replayed(WriteResponse),
    /// The request ran: its response.
    Ran(Response),
}

impl IntoResponse for Written {
    /// A replay answers the stored response as it was first answered, with
    /// `Idempotent-Replayed: true`.
    fn into_response(self) -> Response {
        match self {
            Self::Replayed(stored) => respond(&stored, true),
            Self::Ran(response) => response,
        }
    }
}

/// Runs a write whose effect happens before its transaction (a test delivery): the key is held
/// first (see `Writes::hold`), so that a completed key replays and one in flight answers 409
/// without `effect` running again; `effect` then runs once and `work` records its result in the
/// write. An `effect` error drops the key, so that the same request can be retried.
pub async fn run_after<T, E, F>(state: &ApiState, request: WriteRequest<'_>, effect: E, work: F) -> ApiResult<Response>
where
    E: AsyncFnOnce(&App) -> AppResult<T>,
    F: AsyncFnOnce(&App, &mut Write, T) -> AppResult<Reply>,
{
    let WriteRequest { scope, action, key, fingerprint, resource_id } = request;
    let writes = &state.app.writes;
    let Some(key) = key else {
        let done = effect(&state.app).await?;
        let request = WriteRequest { scope, action, key: None, fingerprint, resource_id };
        return run(state, request, async |app, w| work(app, w, done).await).await;
    };
    let idempotency = IdempotencyRequest { key: key.0, request_hash: fingerprint };
    let held = match writes.hold(&scope.context, action, idempotency).await? {
        Held::Replay(stored) => return Ok(respond(&stored, true)),
        Held::Mine(held) => held,
    };
    let done = match effect(&state.app).await {
        Ok(done) => done,
        Err(error) => {
            writes.release_held(held).await;
            return Err(error.into());
        }
    };
    let write = writes.begin_held(scope.context.clone(), action, held, resource_id).await?;
    Ok(finish(state, scope, write, async |app, w| work(app, w, done).await).await?.into_response())
}

/// Runs a write (see [`run_or_replay`]); a replay answers the stored response.
pub async fn run<F>(state: &ApiState, request: WriteRequest<'_>, work: F) -> ApiResult<Response>
where
    F: AsyncFnOnce(&App, &mut Write) -> AppResult<Reply>,
{
    Ok(run_or_replay(state, request, work).await?.into_response())
}

/// Admits the request and runs `work` on the admitted write, or hands back the stored response
/// of a completed key, for a handler whose replay answers otherwise than as stored. `work` is
/// lent the app with the admitted write: one service call, and the reply it makes.
pub async fn run_or_replay<F>(state: &ApiState, request: WriteRequest<'_>, work: F) -> ApiResult<Written>
where
    F: AsyncFnOnce(&App, &mut Write) -> AppResult<Reply>,
{
    let WriteRequest { scope, action, key, fingerprint, resource_id } = request;
    let idempotency = key.map(|k| IdempotencyRequest { key: k.0, request_hash: fingerprint });
    let writes = &state.app.writes;
    let write = match writes.begin(scope.context.clone(), action, idempotency, resource_id).await? {
        Admission::Replay(stored) => return Ok(Written::Replayed(stored)),
        Admission::Proceed(write) => write,
    };
    finish(state, scope, write, work).await
}

/// Runs `work` on an admitted write and commits it, or records a caller's mistake as its outcome.
async fn finish<F>(state: &ApiState, scope: &TenantScope, mut write: Write, work: F) -> ApiResult<Written>
where
    F: AsyncFnOnce(&App, &mut Write) -> AppResult<Reply>,
{
    let writes = &state.app.writes;
    let outcome = work(&state.app, &mut write).await;
    match outcome {
        Ok(mut reply) => {
            let secret = reply.secret.take();
            let mut stored = writes.commit(write, reply.stored()).await?;
            if let (Some((name, secret)), Some(body)) = (secret, stored.body.as_object_mut()) {
                body.insert(name.to_owned(), Value::String(secret));
            }
            Ok(Written::Ran(respond(&stored, false)))
        }
        Err(error) if error.is_final_outcome() => {
            let reason = error.message.clone();
            let retry_after = error.retry_after;
            let body = ApiError::App(error).pending_body().render(
                scope.style,
                write.now(),
                Some(scope.context.request_id.as_str()),
            );
            let mut headers = Vec::new();
            if let Some(seconds) = retry_after {
                headers.push(("retry-after".to_owned(), seconds.to_string()));
            }
            let status = body["status"].as_u64().and_then(|s| u16::try_from(s).ok()).unwrap_or(500);
            let stored = WriteResponse { status, body, headers, resource_id: None };
            // An invalid request changed nothing and binds nothing: the caller corrects it and
            // sends it again under the same key. Other refusals are the key's answer.
            let key = if status == 400 { RefusedKey::Freed } else { RefusedKey::Bound };
            let stored = writes.refuse(write, stored, &reason, key).await?;
            Ok(Written::Ran(respond(&stored, false)))
        }
        Err(error) => {
            writes.abandon(write).await;
            Err(ApiError::App(error))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprint_ignores_key_order_and_whitespace() {
        let a = fingerprint("POST", "/api/customers", Some("u1"), &json!({"a": 1, "b": {"y": [1, 2], "x": null}}));
        let b = fingerprint(
            "POST",
            "/api/customers",
            Some("u1"),
            &serde_json::from_str(r#"{ "b": {"x": null, "y": [1,2]}, "a": 1 }"#).unwrap_or_default(),
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            fingerprint("POST", "/api/customers", Some("u1"), &json!({"a": 2, "b": {"y": [1, 2], "x": null}}))
        );
        assert_ne!(
            a,
            fingerprint("PATCH", "/api/customers", Some("u1"), &json!({"a": 1, "b": {"y": [1, 2], "x": null}}))
        );
        assert_ne!(
            a,
            fingerprint("POST", "/api/customers", Some("u2"), &json!({"a": 1, "b": {"y": [1, 2], "x": null}}))
        );
        // The caller cannot be spelt into the path or the body's line.
        assert_ne!(
            fingerprint("POST", "/a", Some("u\n{}"), &json!({})),
            fingerprint("POST", "/a\nu", Some(""), &json!({}))
        );
        // Without a caller, nothing of one is in it: the form keys stored before callers joined.
        assert_ne!(fingerprint("POST", "/a", None, &json!({})), fingerprint("POST", "/a", Some(""), &json!({})));
    }

    #[test]
    fn a_route_is_filled_in_as_the_handler_read_it() {
        let route = WriteRoute { method: Method::DELETE, route: "/api/tenants/{tenantId}/groups/{groupId}".to_owned() };
        let (tenant, group) = (uuid::Uuid::nil(), "G1");
        assert_eq!(route.path(&[&tenant, &group]), format!("/api/tenants/{tenant}/groups/G1"));
        let route = WriteRoute { method: Method::POST, route: "/api/customers".to_owned() };
        assert_eq!(route.path(&[]), "/api/customers");
    }

    #[test]
    fn fingerprints_stay_what_stored_keys_hold() {
        // SHA-256 of `POST /api/customers\n` and the body's compact JSON with sorted keys (a
        // per-caller action's adds the caller as a JSON string and `\n` between them): a change
        // here would make every stored key's retry a 422 (another payload).
        let body = json!({"b": {"y": [1, 2], "x": null}, "né": "\"q\"", "a": 1});
        assert_eq!(
            fingerprint("POST", "/api/customers", None, &body),
            "dfb2e6d456d48d478fdc937b1ad18aeb74510ea7767fb764afa055cb08a1323d"
        );
        assert_eq!(
            fingerprint("POST", "/api/customers", Some("u1"), &body),
            "3d06dc743e02a6d4bb7c79d0161e93d12f742b4349b5a9d2b2860deb5a1a7b1d"
        );
    }
}
