//! `/api/tenants/{tenantId}/roles`: the roles the organisation can assign (paging style C,
//! default sort name,asc).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::paging::{SortDirection, SortKey};
use tokenops_domain::role::Role;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, STRICT_SIZE, Style};
use crate::extract::{OwnTenantPath, QueryParams};

/// Sortable properties (API name → field).
const SORTABLE: &[(&str, &str)] = &[
    ("name", "name"),
    ("description", "description"),
    ("createdAt", "created_at"),
    ("updatedAt", "updated_at"),
    ("id", "id"),
];

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(list_roles))
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleOut {
    pub id: uuid::Uuid,
    pub name: String,
    pub description: String,
    /// A platform role (SUPER_ADMIN, ADMIN, USER): shared by every organisation, read-only.
    pub platform: bool,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&Role> for RoleOut {
    fn from(r: &Role) -> Self {
        Self {
            id: r.id,
            name: r.name.clone(),
            description: r.description.clone(),
            platform: r.platform,
            created_at: r.created_at.to_iso8601(),
            updated_at: r.updated_at.to_iso8601(),
        }
    }
}

/// List the organisation's roles (paging style C).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/roles", tag = "roles", operation_id = "roles.list",
    params(
        ("tenantId" = uuid::Uuid, Path, description = "Must be the caller's organisation"),
        ("sort" = Option<Vec<String>>, Query, description = "name, description, createdAt, updatedAt or id, optionally ,asc|desc; repeatable; default name,asc"),
        ("page" = Option<u64>, Query, description = "Zero-based, default 0"),
        ("size" = Option<u32>, Query, description = "1 to 100, default 20"),
    ),
    responses(
        (status = 200, description = "Style C page: items, pageNumber, pageSize, totalResults"),
        (status = 400, description = "tenantId not a UUID, invalid paging, unknown sort property", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id: the path names another organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn list_roles(
    State(state): State<Arc<ApiState>>,
    OwnTenantPath(scope): OwnTenantPath,
    params: QueryParams,
) -> ApiResult<Response> {
    let sort = paging::sort_keys(&params, SORTABLE, &[SortKey { column: "name", direction: SortDirection::Asc }])?;
    let page = paging::page_request(&params, STRICT_SIZE)?;
    let roles = state.app.roles.list(scope.tenant, &sort, page).map(|r| RoleOut::from(&r));
    Ok(axum::Json(paging::envelope(Style::C, &roles, page)).into_response())
}
