//! `TenantCall`: what a tenant-scoped handler reads before its query and body, in the order
//! the checks answer: the caller's organisation, then the route's path values; and `show`, the
//! read that answers one app call's result as JSON.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::{App, AppResult};
use tokenops_domain::TenantId;

use super::auth::TenantScope;
use super::path::ScopedPath;
use crate::ApiState;
use crate::error::{ApiError, ApiResult};

/// The state, the caller acting for its organisation, and the path values `P` (see
/// [`ScopedPath`]: none, an id, a text, or a path under the caller's own organisation).
pub struct TenantCall<P = ()> {
    pub state: Arc<ApiState>,
    pub scope: TenantScope,
    pub path: P,
}

impl<P: ScopedPath> FromRequestParts<Arc<ApiState>> for TenantCall<P> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<ApiState>) -> Result<Self, Self::Rejection> {
        let scope = TenantScope::from_request_parts(parts, state).await?;
        let path = P::read(parts, state, &scope).await?;
        Ok(Self { state: state.clone(), scope, path })
    }
}

impl<P> TenantCall<P> {
    /// Answers what `read` finds as JSON (200): `read` is lent the app, the caller's
    /// organisation and the route's path values, and makes one service call.
    pub async fn show<T, F>(self, read: F) -> ApiResult<Response>
    where
        T: Serialize,
        F: AsyncFnOnce(&App, TenantId, P) -> AppResult<T>,
    {
        let found = read(&self.state.app, self.scope.tenant, self.path).await?;
        Ok(axum::Json(found).into_response())
    }
}
