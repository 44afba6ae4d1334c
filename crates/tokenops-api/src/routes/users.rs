//! `/api/users`: the caller's own profile.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_app::identity::signin;
use tokenops_domain::role::platform_roles;
use tokenops_store::UserRecord;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::TenantScope;

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(get_own_profile))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserOut {
    pub id: uuid::Uuid,
    pub tenant_id: uuid::Uuid,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    /// INVITED, ACTIVE or SUSPENDED.
    pub status: String,
    /// The role's name.
    pub role: String,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&UserRecord> for UserOut {
    fn from(u: &UserRecord) -> Self {
        let role = platform_roles()
            .into_iter()
            .find(|r| r.id == u.role_id)
            .map(|r| r.name)
            .unwrap_or_else(|| u.role_id.to_string());
        Self {
            id: u.id,
            tenant_id: u.tenant_id.as_uuid(),
            email: u.email.clone(),
            first_name: u.first_name.clone(),
            last_name: u.last_name.clone(),
            status: u.status.as_str().to_owned(),
            role,
            created_at: u.created_at.to_iso8601(),
            updated_at: u.updated_at.to_iso8601(),
        }
    }
}

/// The caller's own profile.
#[utoipa::path(
    get, path = "/api/users/me", tag = "organisation", operation_id = "users.me",
    responses(
        (status = 200, body = UserOut),
        (status = 401, description = "No usable token, or Your access has been revoked. (the user is not ACTIVE)", body = crate::openapi::ErrorBody),
    )
)]
async fn get_own_profile(State(state): State<Arc<ApiState>>, scope: TenantScope) -> ApiResult<Response> {
    let user = signin::active_user(&state.app, scope.tenant, &scope.context.caller.subject).await?;
    Ok(axum::Json(UserOut::from(&user)).into_response())
}
