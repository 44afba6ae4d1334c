//! Path parameters: a path id that is not a UUID is 400, not 404; `ScopedPath`, the path values
//! a tenant-scoped handler reads after its caller's organisation.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::TenantId;
use uuid::Uuid;

use super::auth::{TenantScope, require_own_tenant};
use crate::ApiState;
use crate::error::ApiError;

/// The route's path parameters by name, in order.
pub async fn params<S: Send + Sync>(parts: &mut Parts, state: &S) -> Result<Vec<(String, String)>, ApiError> {
    let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
        .await
        .map_err(|_| Error::bad_request("Invalid path"))?;
    Ok(params)
}

async fn last_param<S: Send + Sync>(parts: &mut Parts, state: &S) -> Result<(String, String), ApiError> {
    params(parts, state).await?.pop().ok_or_else(|| Error::bad_request("Invalid path").into())
}

/// A path parameter that must be a UUID (400 naming it otherwise).
pub fn uuid_param(name: &str, value: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(value).map_err(|_| Error::invalid_field(name, "must be a UUID"))
}

/// The route's single `{…Id}` path parameter, parsed as a UUID.
#[derive(Debug, Clone, Copy)]
pub struct PathId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let (name, value) = last_param(parts, state).await?;
        Ok(PathId(uuid_param(&name, &value)?))
    }
}

/// A single text path parameter (for example a client-chosen reference).
#[derive(Debug, Clone)]
pub struct PathText(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathText {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(PathText(last_param(parts, state).await?.1))
    }
}

/// A route's path values as a tenant-scoped handler reads them: once the caller's organisation
/// is known (so a caller without one is refused before a malformed path is).
pub trait ScopedPath: Sized + Send {
    fn read(
        parts: &mut Parts,
        state: &Arc<ApiState>,
        scope: &TenantScope,
    ) -> impl Future<Output = Result<Self, ApiError>> + Send;

    /// The route's `{…}` values in order, as read (a UUID in its canonical form), for a write's
    /// fingerprint.
    fn values(&self) -> Vec<&dyn Display>;

    /// The resource a write is about, when the path names it (a handler that parses a text
    /// value names the resource as parsed, with `WriteRequest::about`).
    fn resource(&self) -> Option<String> {
        None
    }
}

/// A route without path values.
impl ScopedPath for () {
    async fn read(_: &mut Parts, _: &Arc<ApiState>, _: &TenantScope) -> Result<Self, ApiError> {
        Ok(())
    }

    fn values(&self) -> Vec<&dyn Display> {
        Vec::new()
    }
}

impl ScopedPath for PathId {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, _: &TenantScope) -> Result<Self, ApiError> {
        PathId::from_request_parts(parts, state).await
    }

    fn values(&self) -> Vec<&dyn Display> {
        vec![&self.0]
    }

    fn resource(&self) -> Option<String> {
        Some(self.0.to_string())
    }
}

impl ScopedPath for PathText {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, _: &TenantScope) -> Result<Self, ApiError> {
        PathText::from_request_parts(parts, state).await
    }

    fn values(&self) -> Vec<&dyn Display> {
        vec![&self.0]
    }

    fn resource(&self) -> Option<String> {
        Some(self.0.clone())
    }
}

/// A route under `/api/tenants/{tenantId}`, which must name the caller's own organisation
/// (see `auth::require_own_tenant`), followed by the path values `P`.
pub struct OwnTenant<P = ()> {
    pub tenant: TenantId,
    pub then: P,
}

impl<P: ScopedPath> ScopedPath for OwnTenant<P> {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, scope: &TenantScope) -> Result<Self, ApiError> {
        require_own_tenant(parts, state, scope).await?;
        Ok(Self { tenant: scope.tenant, then: P::read(parts, state, scope).await? })
    }

    fn values(&self) -> Vec<&dyn Display> {
        let mut values: Vec<&dyn Display> = vec![&self.tenant];
        values.extend(self.then.values());
        values
    }

    fn resource(&self) -> Option<String> {
        self.then.resource()
    }
}
