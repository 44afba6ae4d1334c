//! Path parameters: a path id that is not a UUID is 400, not 404; `ScopedPath`, the path values
//! a tenant-scoped handler reads after its caller's organisation.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_domain::TenantId;
use tokenops_domain::ids::canonical_uuid;
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
    canonical_uuid(value).ok_or_else(|| Error::invalid_field(name, "must be a UUID"))
}

/// The route's last path parameter, read as a `T`: [`PathId`] or [`PathText`].
#[derive(Debug, Clone, Copy)]
pub struct PathParam<T>(pub T);

/// The route's single `{…Id}` path parameter, parsed as a UUID.
pub type PathId = PathParam<Uuid>;

/// A single text path parameter (for example a client-chosen reference).
pub type PathText = PathParam<String>;

/// What a path parameter's text is read as.
pub trait ParamValue: Display + Send + Sized {
    /// The value of the parameter `name`, or the 400 naming it.
    fn parse(name: &str, value: String) -> Result<Self, Error>;
}

impl ParamValue for Uuid {
    fn parse(name: &str, value: String) -> Result<Self, Error> {
        uuid_param(name, &value)
    }
}

impl ParamValue for String {
    fn parse(_: &str, value: String) -> Result<Self, Error> {
        Ok(value)
    }
}

impl<S: Send + Sync, T: ParamValue> FromRequestParts<S> for PathParam<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let (name, value) = last_param(parts, state).await?;
        Ok(PathParam(T::parse(&name, value)?))
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

impl<T: ParamValue> ScopedPath for PathParam<T> {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, _: &TenantScope) -> Result<Self, ApiError> {
        Self::from_request_parts(parts, state).await
    }

    fn values(&self) -> Vec<&dyn Display> {
        vec![&self.0]
    }

    fn resource(&self) -> Option<String> {
        Some(self.0.to_string())
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
