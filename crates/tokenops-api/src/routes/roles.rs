//! Roles and permissions: the permission catalogue (`/api/permissions`) and the organisation's
//! roles under `/api/tenants/{tenantId}/roles` — list (style C, default sort name,asc), detail
//! with paged holders, and custom-role create, edit and delete (platform roles are read-only).

use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::identity::roles::{self, NewRole, RoleChange, RoleOut};
use tokenops_app::identity::users::UserSummary;
use tokenops_domain::paging::{SortDirection, SortKey};
use tokenops_domain::permission::{Permission, platform_grants};
use tokenops_domain::role::PLATFORM_ROLES;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{optional_text, something_to_change, text};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageC, STRICT_SIZE, Style};
use crate::extract::{JsonBody, OwnTenant, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

/// Sortable properties (API name → store column).
const SORTABLE: &[(&str, &str)] = &[
    ("name", "name"),
    ("description", "description"),
    ("createdAt", "created_at"),
    ("updatedAt", "updated_at"),
    ("id", "id"),
];

pub(super) const NAME_MAX: usize = 100;
const DESCRIPTION_MAX: usize = 500;
// The documented maxLength of a name and of a description.
const _: () = assert!(NAME_MAX == 100 && DESCRIPTION_MAX == 500);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(list_permissions)).routes(routes!(list_roles, create_role)).routes(routes!(
        get_role,
        update_role,
        delete_role
    ))
}

/// A page of roles (style C).
pub type RolePage = PageC<RoleOut>;
/// A page of users as role holders and group members are listed (style C).
pub type UserSummaryPage = PageC<UserSummary>;

/// A role with one page of its holders.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleDetail {
    #[serde(flatten)]
    pub role: RoleOut,
    /// Ordered by first name, then last name.
    pub holders: UserSummaryPage,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOut {
    #[schema(example = "customer:read")]
    pub name: &'static str,
    pub description: &'static str,
    /// The platform roles that grant it.
    pub platform_roles: Vec<&'static str>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionCatalogue {
    /// Every permission, in catalogue order.
    pub permissions: Vec<PermissionOut>,
}

/// The complete permission catalogue.
#[utoipa::path(
    get, path = "/api/permissions", tag = "roles", operation_id = "permissions.list",
    responses(
        (status = 200, description = "Every permission with the platform roles that grant it. The spec does not show the catalogue: this service publishes it here", body = PermissionCatalogue),
    )
)]
async fn list_permissions() -> ApiResult<Response> {
    let permissions = Permission::ALL
        .iter()
        .map(|p| PermissionOut {
            name: p.name(),
            description: p.description(),
            platform_roles: PLATFORM_ROLES
                .iter()
                .filter(|r| platform_grants(r.name).is_some_and(|g| g.contains(*p)))
                .map(|r| r.name)
                .collect(),
        })
        .collect();
    Ok(axum::Json(PermissionCatalogue { permissions }).into_response())
}

/// List the organisation's roles (paging style C).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/roles", tag = "roles", operation_id = "roles.list",
    params(
        path_params::TenantId,
        ("sort" = Option<Vec<String>>, Query, description = "name, description, createdAt, updatedAt or id, optionally ,asc|desc; repeatable; default name,asc"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style C page of roles, platform and custom. The spec does not show page size bounds here: this service takes 1 to 100, default 20, and refuses others with 400", body = RolePage),
        crate::openapi::TenantListInvalid,
        crate::openapi::IdentitySortUnknown,
        (status = 403, description = "Invalid tenant id: the path names another organisation; or missing role:read", body = crate::openapi::ErrorBody),
    )
)]
async fn list_roles(call: TenantCall<OwnTenant>, params: QueryParams) -> ApiResult<Response> {
    let sort =
        paging::identity_sort_keys(&params, SORTABLE, &[SortKey { column: "name", direction: SortDirection::Asc }])?;
    paging::list(&params, STRICT_SIZE, Style::C, async |page| {
        Ok(call.state.app.roles.list(call.scope.tenant, &sort, page).await?.map(|r| r.out()))
    })
    .await
}

/// A role with one page of its holders, ordered by first name then last name.
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/roles/{roleId}", tag = "roles", operation_id = "roles.get",
    params(path_params::TenantId, path_params::RoleId, crate::openapi::UsersPageQuery),
    responses(
        (status = 200, description = "The role (as in the list) with `holders`, a style C page of the users who hold it", body = RoleDetail),
        crate::openapi::PathIdOrPagingInvalid,
        crate::openapi::NoSuchRole,
    )
)]
async fn get_role(call: TenantCall<OwnTenant<PathId>>, params: QueryParams) -> ApiResult<Response> {
    let page = paging::page_request(&params, STRICT_SIZE)?;
    call.show(async |app, tenant, OwnTenant { then: PathParam(id), .. }| {
        let (role, holders) = app.roles.get(tenant, id, page).await?;
        Ok(RoleDetail { role: role.out(), holders: PageC::new(holders, page) })
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RoleIn {
    /// 1 to 100 characters, not blank; unique in the organisation (case-insensitive); not a
    /// platform name.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// Up to 500 characters.
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Permission names from `GET /api/permissions`.
    pub permissions: Option<Vec<String>>,
}

/// A change: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct RolePatch {
    /// 1 to 100 characters, not blank.
    #[schema(pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// Up to 500 characters.
    #[schema(max_length = 500)]
    pub description: Option<String>,
    /// Replaces the whole set.
    pub permissions: Option<Vec<String>>,
}

fn description(value: Option<String>) -> Result<Option<String>, Error> {
    match value {
        Some(d) if d.chars().count() > DESCRIPTION_MAX => {
            Err(Error::invalid_field("description", format!("must be at most {DESCRIPTION_MAX} characters")))
        }
        other => Ok(other.map(|d| d.trim().to_owned())),
    }
}

/// Create a custom role.
#[utoipa::path(
    post, path = "/api/tenants/{tenantId}/roles", tag = "roles", operation_id = "roles.create",
    params(path_params::TenantId, crate::openapi::OptionalIdempotencyKey),
    request_body = RoleIn,
    responses(
        (status = 201, description = "Created", body = RoleOut, headers(("Location" = String))),
        (status = 400, description = "Blank or too long name or description, or Unknown permissions: {names}.", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id, missing role:create, or granting a permission the caller lacks", body = crate::openapi::ErrorBody),
        (status = 409, description = "The name is a platform role's (reserved) or in use, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_role(call: OptionalKeyWrite<OwnTenant>, body: JsonBody<RoleIn>) -> ApiResult<Response> {
    let tenant = call.scope.tenant;
    let new = NewRole {
        name: text("name", body.value.name, NAME_MAX)?,
        description: description(body.value.description)?.unwrap_or_default(),
        permissions: body.value.permissions.unwrap_or_default(),
    };
    call.run(&roles::CREATE, &body.document, async |app, w| {
        let r = app.roles.create(w, new).await?;
        Reply::created(&r.out(), format!("/api/tenants/{tenant}/roles/{}", r.record.id))
    })
    .await
}

/// Edit a custom role: name, description, permissions.
#[utoipa::path(
    patch, path = "/api/tenants/{tenantId}/roles/{roleId}", tag = "roles", operation_id = "roles.update",
    params(path_params::TenantId, path_params::RoleId, crate::openapi::OptionalIdempotencyKey),
    request_body = RolePatch,
    responses(
        (status = 200, description = "The role after the change", body = RoleOut),
        (status = 400, description = "Editing a platform role, nothing to change, blank or too long name, or Unknown permissions: {names}.", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id, missing role:update, or adding a permission the caller lacks", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchRole,
        (status = 409, description = "The new name is reserved or in use, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn update_role(call: OptionalKeyWrite<OwnTenant<PathId>>, body: JsonBody<RolePatch>) -> ApiResult<Response> {
    let id = call.path.then.0;
    let change = RoleChange {
        name: optional_text("name", body.value.name, NAME_MAX)?,
        description: description(body.value.description)?,
        permissions: body.value.permissions,
    };
    something_to_change(
        &[change.name.is_some(), change.description.is_some(), change.permissions.is_some()],
        "name, description and/or permissions",
    )?;
    call.run(&roles::UPDATE, &body.document, async |app, w| {
        let r = app.roles.update(w, id, change).await?;
        Reply::ok(&r.out())
    })
    .await
}

/// Delete a custom role that no user or machine client holds.
#[utoipa::path(
    delete, path = "/api/tenants/{tenantId}/roles/{roleId}", tag = "roles", operation_id = "roles.delete",
    params(path_params::TenantId, path_params::RoleId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "A path id is not a UUID, or deleting a platform role", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchRole,
        (status = 409, description = "The role is in use, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn delete_role(call: OptionalKeyWrite<OwnTenant<PathId>>) -> ApiResult<Response> {
    let id = call.path.then.0;
    call.run_no_content(&roles::DELETE, async |app, w| app.roles.delete(w, id).await).await
}
