//! Bearer authentication: `Authenticated` is any verified caller with its resolved access (who
//! it is, what it may do; see `tokenops_app::identity::access`); `TenantScope` is a caller
//! acting for an organisation, which every tenant-scoped handler takes, so a handler cannot
//! reach data without the tenant the token names.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::context::{Caller, RequestContext};
use tokenops_app::identity::access;
use tokenops_domain::TenantId;
use tokenops_domain::audit::AuditSource;
use tokenops_identity::VerifyError;

use crate::ApiState;
use crate::error::{ApiError, TimestampStyle};
use crate::request_id::RequestId;

#[derive(Debug, Clone)]
pub struct Authenticated(pub Caller);

impl FromRequestParts<Arc<ApiState>> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        if let Some(caller) = parts.extensions.get::<Authenticated>() {
            return Ok(caller.clone());
        }
        let header = parts.headers.get(AUTHORIZATION).ok_or_else(|| {
            Error::unauthorized("Authentication is required: send Authorization: Bearer <access token>")
        })?;
        let token = header
            .to_str()
            .ok()
            .and_then(bearer_token)
            .ok_or_else(|| Error::unauthorized("The Authorization header must be: Bearer <access token>"))?;
        let claims = state.verifier.verify(token, state.app.clock.now()).await.map_err(|e| match e {
            VerifyError::Expired => Error::unauthorized("The access token has expired"),
            VerifyError::NotYetValid => Error::unauthorized("The access token is not valid yet"),
            VerifyError::WrongAudience => Error::unauthorized("The access token is not meant for this service (aud)"),
            // The embedded provider's keys are read from the store: failing to read them is the
            // service's failure, not a fault of the token, and a 401 would send the caller off
            // to sign in again for nothing.
            VerifyError::KeysUnavailable if state.embedded_provider => {
                Error::internal("the embedded provider's signing keys could not be read")
            }
            VerifyError::KeysUnavailable => {
                Error::unauthorized("The access token could not be verified now; retry shortly")
            }
            _ => Error::unauthorized("The access token is invalid"),
        })?;
        let caller = Authenticated(access::resolve(&state.app, &claims, !state.embedded_provider).await?);
        parts.extensions.insert(caller.clone());
        Ok(caller)
    }
}

/// The token of `Bearer <token>`; the scheme name is case-insensitive (RFC 9110 §11.1).
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// A verified caller acting for an organisation, with the request's identifiers: the context of
/// every tenant-scoped read and write.
#[derive(Debug, Clone)]
pub struct TenantScope {
    pub tenant: TenantId,
    pub context: RequestContext,
    pub style: TimestampStyle,
}

impl TenantScope {
    /// A caller acting for `tenant` though its token does not name it (the operator creating
    /// the organisation, a client secret revealed without a token): no correlation id.
    pub fn acting_for(tenant: TenantId, caller: Caller, request_id: &RequestId, style: TimestampStyle) -> Self {
        let context = RequestContext {
            caller,
            tenant: Some(tenant),
            request_id: request_id.0.clone(),
            correlation_id: None,
            source: AuditSource::Api,
        };
        Self { tenant, context, style }
    }
}

impl FromRequestParts<Arc<ApiState>> for TenantScope {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        let Authenticated(caller) = Authenticated::from_request_parts(parts, state).await?;
        let tenant = caller.tenant.ok_or_else(|| Error::unauthorized(crate::access::NO_TENANT_CLAIM))?;
        let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.clone()).unwrap_or_default();
        // The spec's correlationId is "carried from the originating request; omitted when
        // none": the caller's X-Correlation-Id, else the X-Request-Id it sent, never an id the
        // service made up.
        let sent = |name: &str| {
            parts.headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty() && v.len() <= 128)
        };
        let correlation_id = sent("x-correlation-id")
            .or_else(|| sent(crate::request_id::X_REQUEST_ID.as_str()).filter(|sent| *sent == request_id))
            .map(str::to_owned);
        let style = parts.extensions.get::<TimestampStyle>().copied().unwrap_or_default();
        Ok(TenantScope {
            tenant,
            context: RequestContext {
                caller,
                tenant: Some(tenant),
                request_id,
                correlation_id,
                source: AuditSource::Api,
            },
            style,
        })
    }
}

/// On a path that names an organisation (`/api/tenants/{tenantId}/…`): 403 `Invalid tenant id`
/// unless it is the caller's own (400 when it is not a UUID).
pub async fn require_own_tenant(parts: &mut Parts, state: &Arc<ApiState>, scope: &TenantScope) -> Result<(), ApiError> {
    let params = super::path::params(parts, state).await?;
    let named = params.iter().find(|(name, _)| name == "tenantId").map_or("", |(_, v)| v.as_str());
    if super::path::uuid_param("tenantId", named)? != scope.tenant.as_uuid() {
        return Err(Error::forbidden("Invalid tenant id").into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer   "), None);
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
    }
}
