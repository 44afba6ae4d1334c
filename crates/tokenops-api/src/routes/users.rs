//! Users: the caller's own profile (`/api/users/me`), the user-by-id lookup (`/api/users/{id}`,
//! not tenant-scoped, Content-Type application/json required), and the organisation's users
//! under `/api/tenants/{tenantId}/users`: invite (200, not 201), list (style C), read, change
//! role or status, remove.

use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::identity::organisations;
use tokenops_app::identity::users::{self, Invitation, InviteeFields, UserChange, UserOut, UserQuery};
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{SortDirection, SortKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::embedded_provider_only;
use super::fields::{PERSON_NAME_MAX, email, optional_text, something_to_change};
use super::roles;
use crate::ApiState;
use crate::error::{ApiError, ApiResult, HttpCode};
use crate::extract::body::is_json_content_type;
use crate::extract::paging::{self, PageC, STRICT_SIZE, Style};
use crate::extract::{Authenticated, JsonBody, OwnTenant, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_own_profile))
        .routes(routes!(get_user_by_id))
        .routes(routes!(list_users, invite_user))
        .routes(routes!(get_user, update_user, remove_user))
}

/// A page of users (style C).
pub type UserPage = PageC<UserOut>;

/// Sortable properties (API name → store column).
const SORTABLE: &[(&str, &str)] = &[
    ("firstName", "first_name"),
    ("lastName", "last_name"),
    ("email", "email"),
    ("status", "status"),
    ("createdAt", "created_at"),
    ("updatedAt", "updated_at"),
    ("id", "id"),
    ("role.name", "role_name"),
];

const SEARCH_MAX: usize = 100;
// The documented maxLength of a role name.
const _: () = assert!(roles::NAME_MAX == 100);

fn user_status(field: &str, text: &str) -> Result<UserStatus, Error> {
    UserStatus::parse(text)
        .ok_or_else(|| Error::invalid_field(field, format!("{text:?} is not one of INVITED, ACTIVE, SUSPENDED")))
}

/// The caller's own profile.
#[utoipa::path(
    get, path = "/api/users/me", tag = "organisation", operation_id = "users.me",
    responses(
        (status = 200, description = "The caller's own profile. The spec does not show this path: this service serves it at /api/users/me", body = UserOut),
        (status = 401, description = "No usable token, or Your access has been revoked. (the user is not ACTIVE)", body = crate::openapi::ErrorBody),
        (status = 404, description = "The caller is a machine client or an external subject, not a user", body = crate::openapi::ErrorBody),
    )
)]
async fn get_own_profile(call: TenantCall) -> ApiResult<Response> {
    let principal = call.scope.context.caller.principal;
    call.show(async |app, tenant, ()| app.users.own_profile(tenant, principal).await).await
}

/// A user by id, in any organisation (the spec's lookup is not tenant-scoped).
#[utoipa::path(
    get, path = "/api/users/{id}", tag = "organisation", operation_id = "users.get_by_id",
    params(("id" = uuid::Uuid, Path), ("Content-Type" = String, Header, description = "Must be application/json")),
    responses(
        (status = 200, description = "The user", body = UserOut),
        (status = 400, description = "id not a UUID", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such user", body = crate::openapi::ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = crate::openapi::ErrorBody),
    )
)]
async fn get_user_by_id(
    State(state): State<Arc<ApiState>>,
    _caller: Authenticated,
    headers: axum::http::HeaderMap,
    PathParam(id): PathId,
) -> ApiResult<Response> {
    if !is_json_content_type(headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok())) {
        return Err(ApiError::http_default(HttpCode::UnsupportedMediaType));
    }
    Ok(axum::Json(state.app.users.get_any(id).await?).into_response())
}

/// List the organisation's users (paging style C).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/users", tag = "organisation", operation_id = "users.list",
    params(
        path_params::TenantId,
        ("search" = Option<String>, Query, description = "Case-insensitive prefix of email, first name or last name (at most 100 characters)"),
        ("status" = Option<UserStatus>, Query, description = "INVITED, ACTIVE or SUSPENDED"),
        ("role" = Option<String>, Query, description = "A role name (platform names case-insensitive)"),
        ("sort" = Option<Vec<String>>, Query, description = "firstName, lastName, email, status, createdAt, updatedAt, id or role.name, optionally ,asc|desc; repeatable; default firstName,asc then lastName,asc"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style C page of users. The spec does not show page size bounds here: this service takes 1 to 100, default 20, and refuses others with 400", body = UserPage),
        (status = 400, description = "tenantId not a UUID, invalid paging, unknown status or role, a sort direction other than asc or desc", body = crate::openapi::ErrorBody),
        crate::openapi::IdentitySortUnknown,
    )
)]
async fn list_users(call: TenantCall<OwnTenant>, params: QueryParams) -> ApiResult<Response> {
    let default = [
        SortKey { column: "first_name", direction: SortDirection::Asc },
        SortKey { column: "last_name", direction: SortDirection::Asc },
    ];
    let sort = paging::identity_sort_keys(&params, SORTABLE, &default)?;
    let page = paging::page_request(&params, STRICT_SIZE)?;
    let search = params.non_blank("search")?.map(str::to_owned);
    if search.as_ref().is_some_and(|s| s.chars().count() > SEARCH_MAX) {
        return Err(Error::invalid_field("search", format!("must be at most {SEARCH_MAX} characters")).into());
    }
    let status = params.one("status")?.map(|s| user_status("status", s)).transpose()?;
    let role_name = params.non_blank("role")?.map(str::to_owned);
    let users =
        call.state.app.users.list(call.scope.tenant, UserQuery { search, status, role_name }, &sort, page).await?;
    Ok(paging::respond(Style::C, &users, page))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InvitationIn {
    /// Unique across organisations; the invitation is mailed here.
    #[schema(required = true, value_type = String, format = Email)]
    pub email: Option<String>,
    /// At most 100 characters. The spec names two text fields for the person's names, not
    /// validated up front: absent, null or blank is an empty name.
    pub first_name: Option<String>,
    /// At most 100 characters; absent, null or blank is an empty name.
    pub last_name: Option<String>,
    /// Blank or absent: USER. Platform names match case-insensitively; else a custom role.
    pub role_name: Option<String>,
    /// Ignored: the user joins the path's organisation.
    #[schema(value_type = Option<String>)]
    pub tenant_id: Option<serde_json::Value>,
}

/// One of an invitee's names: absent, null or blank is an empty name (the spec leaves the
/// names to the identity provider); only one longer than the user record holds is refused.
fn person_name(field: &str, value: Option<String>) -> Result<String, Error> {
    let value = value.map(|v| v.trim().to_owned()).unwrap_or_default();
    if value.chars().count() > PERSON_NAME_MAX {
        return Err(Error::invalid_field(field, format!("must be at most {PERSON_NAME_MAX} characters")));
    }
    Ok(value)
}

/// The invite's body, read but not refused here: the spec has the role lookup, the permission
/// check and then the identity provider decide, so the invitee's problem waits in the
/// [`Invitation`] for the provider's step, and a role name of any length is only looked up.
fn parse_invitation(body: InvitationIn) -> Invitation {
    let invitee = invitee_fields(body.email, body.first_name, body.last_name);
    Invitation { invitee, role_name: body.role_name }
}

fn invitee_fields(
    email_text: Option<String>,
    first_name: Option<String>,
    last_name: Option<String>,
) -> Result<InviteeFields, Error> {
    Ok(InviteeFields {
        email: email("email", email_text)?,
        first_name: person_name("firstName", first_name)?,
        last_name: person_name("lastName", last_name)?,
    })
}

/// Invite a user into the organisation; answers 200 (not 201) with the INVITED user.
#[utoipa::path(
    post, path = "/api/tenants/{tenantId}/users", tag = "organisation", operation_id = "users.invite",
    params(path_params::TenantId, crate::openapi::OptionalIdempotencyKey),
    request_body = InvitationIn,
    responses(
        (status = 200, description = "Invited: the user is INVITED and mailed a temporary password", body = UserOut),
        (status = 400, description = "email missing, blank, too long (over 254 characters) or no address a mail could reach (one @ between a local part and a domain of non-empty labels, no spaces or control characters), or a name over 100 characters; answered after the role lookup (404) and the permission checks (403). The names may be absent or blank (an empty name)", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id; missing the role's creation permission (super_admin:create, admin:create, user:create); or a custom role grants a permission the caller lacks", body = crate::openapi::ErrorBody),
        crate::openapi::NoRoleOrExternalProvider,
        (status = 409, description = "The email is registered already (in any organisation), or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn invite_user(call: OptionalKeyWrite<OwnTenant>, body: JsonBody<InvitationIn>) -> ApiResult<Response> {
    embedded_provider_only(&call.state, "Users are created at this deployment's external identity provider")?;
    let invitation = parse_invitation(body.value);
    let temporary = organisations::temporary_password().await?;
    let sign_in_url = format!("{}/api/auth/login", call.state.public_url);
    call.run(&users::INVITE, &body.document, async |app, w| {
        Reply::ok(&app.users.invite(w, &app.sealer, &sign_in_url, invitation, temporary).await?)
    })
    .await
}

/// A user of the organisation.
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/users/{userId}", tag = "organisation", operation_id = "users.get",
    params(path_params::TenantId, path_params::UserId),
    responses(
        (status = 200, description = "The user", body = UserOut),
        crate::openapi::PathIdNotUuid,
        crate::openapi::NoSuchUser,
    )
)]
async fn get_user(call: TenantCall<OwnTenant<PathId>>) -> ApiResult<Response> {
    call.show(async |app, tenant, OwnTenant { then: PathParam(id), .. }| app.users.get(tenant, id).await).await
}

/// A change: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct UserPatch {
    /// A platform role (case-insensitive) or a custom role of the organisation; not blank, at
    /// most 100 characters.
    #[schema(pattern = r"\S", max_length = 100)]
    pub role_name: Option<String>,
    /// ACTIVE (reactivate) or SUSPENDED.
    #[schema(value_type = Option<SettableUserStatus>)]
    pub status: Option<String>,
}

/// The statuses a PATCH may set (INVITED is an invitation's; a user leaves it by choosing a
/// password).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
enum SettableUserStatus {
    Active,
    Suspended,
}

/// Change a user's role, suspend or reactivate them.
#[utoipa::path(
    patch, path = "/api/tenants/{tenantId}/users/{userId}", tag = "organisation", operation_id = "users.update",
    params(path_params::TenantId, path_params::UserId, crate::openapi::OptionalIdempotencyKey),
    request_body = UserPatch,
    responses(
        (status = 200, description = "The user after the change. Reactivating a user who never chose a password makes them INVITED again", body = UserOut),
        (status = 400, description = "Nothing to change, unknown status, blank role name, or changing yourself or the organisation's owner", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id, missing user:update, or missing the permission the user's current or new role needs", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such user, or Role {name} not found", body = crate::openapi::ErrorBody),
        (status = 409, description = "An INVITED user cannot be set ACTIVE: they activate by choosing a password; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn update_user(call: OptionalKeyWrite<OwnTenant<PathId>>, body: JsonBody<UserPatch>) -> ApiResult<Response> {
    let id = call.path.then.0;
    let role_name = optional_text("roleName", body.value.role_name, roles::NAME_MAX)?;
    let status = match body.value.status.as_deref() {
        None => None,
        Some(s @ ("ACTIVE" | "SUSPENDED")) => Some(user_status("status", s)?),
        Some(other) => {
            return Err(Error::invalid_field("status", format!("{other:?} must be ACTIVE or SUSPENDED")).into());
        }
    };
    something_to_change(&[role_name.is_some(), status.is_some()], "roleName and/or status")?;
    call.run(&users::UPDATE, &body.document, async |app, w| {
        Reply::ok(&app.users.update(w, id, UserChange { role_name, status }).await?)
    })
    .await
}

/// Remove a user from the organisation.
#[utoipa::path(
    delete, path = "/api/tenants/{tenantId}/users/{userId}", tag = "organisation", operation_id = "users.remove",
    params(path_params::TenantId, path_params::UserId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 204, description = "Removed: the user's tokens are refused from now on"),
        (status = 400, description = "A path id is not a UUID, or removing yourself or the organisation's owner", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id, missing member:remove, or missing the permission the user's role needs", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchUser,
        crate::openapi::KeyConflicts,
    )
)]
async fn remove_user(call: OptionalKeyWrite<OwnTenant<PathId>>) -> ApiResult<Response> {
    let id = call.path.then.0;
    call.run_no_content(&users::REMOVE, async |app, w| app.users.remove(w, id).await).await
}
