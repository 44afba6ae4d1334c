//! Approval groups under `/api/tenants/{tenantId}/groups`: list (style C, default sort
//! name,asc), detail with paged members, create (key unique, 409), rename, deactivate and
//! reactivate, members added and removed (a deactivated group takes no members: 409).

use axum::http::request::Parts;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use std::fmt::Display;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::identity::groups::{self, GroupChange, GroupOut};
use tokenops_app::identity::users::UserSummary;
use tokenops_domain::identity::GroupStatus;
use tokenops_domain::paging::{SortDirection, SortKey};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::fields::{self, optional_text, required, something_to_change, text};
use super::roles::UserSummaryPage;
use crate::ApiState;
use crate::error::{ApiError, ApiResult};
use crate::extract::paging::{self, PageC, STRICT_SIZE, Style};
use crate::extract::path::{self, ScopedPath, uuid_param};
use crate::extract::{JsonBody, OwnTenant, PathId, PathParam, QueryParams, TenantCall, TenantScope};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

const SORTABLE: &[(&str, &str)] = &[
    ("key", "key"),
    ("name", "name"),
    ("status", "status"),
    ("createdAt", "created_at"),
    ("updatedAt", "updated_at"),
    ("id", "id"),
];

const KEY_MAX: usize = 64;
const NAME_MAX: usize = 100;
// The documented maxLength of a key and of a name.
const _: () = assert!(KEY_MAX == 64 && NAME_MAX == 100);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_groups, create_group))
        .routes(routes!(get_group, update_group))
        .routes(routes!(add_member))
        .routes(routes!(get_member, remove_member))
}

/// A page of approval groups (style C).
pub type GroupPage = PageC<GroupOut>;

/// An approval group with one page of its members.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupDetail {
    #[serde(flatten)]
    pub group: GroupOut,
    /// Ordered by first name, then last name.
    pub members: UserSummaryPage,
}

/// A group key: 1–64 letters, digits, `_`, `-` or `.`, starting with a letter or digit (it is
/// written `#key` in approver expressions).
fn group_key(value: Option<String>) -> Result<String, Error> {
    fields::key("key", value, KEY_MAX)
}

/// List the organisation's approval groups (paging style C).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/groups", tag = "groups", operation_id = "groups.list",
    params(
        path_params::TenantId,
        ("sort" = Option<Vec<String>>, Query, description = "key, name, status, createdAt, updatedAt or id, optionally ,asc|desc; repeatable; default name,asc"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style C page of approval groups. The spec does not show page size bounds here: this service takes 1 to 100, default 20, and refuses others with 400", body = GroupPage),
        crate::openapi::TenantListInvalid,
        crate::openapi::IdentitySortUnknown,
    )
)]
async fn list_groups(call: TenantCall<OwnTenant>, params: QueryParams) -> ApiResult<Response> {
    let sort =
        paging::identity_sort_keys(&params, SORTABLE, &[SortKey { column: "name", direction: SortDirection::Asc }])?;
    paging::list(&params, STRICT_SIZE, Style::C, async |page| {
        Ok(call.state.app.groups.list(call.scope.tenant, &sort, page).await?.map(|g| GroupOut::from(&g)))
    })
    .await
}

/// An approval group with one page of its members, ordered by first name then last name.
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/groups/{groupId}", tag = "groups", operation_id = "groups.get",
    params(path_params::TenantId, path_params::GroupId, crate::openapi::UsersPageQuery),
    responses(
        (status = 200, description = "The group with `members`, a style C page of its users", body = GroupDetail),
        crate::openapi::PathIdOrPagingInvalid,
        crate::openapi::NoSuchGroup,
    )
)]
async fn get_group(call: TenantCall<OwnTenant<PathId>>, params: QueryParams) -> ApiResult<Response> {
    let page = paging::page_request(&params, STRICT_SIZE)?;
    call.show(async |app, tenant, OwnTenant { then: PathParam(id), .. }| {
        let (group, members) = app.groups.get(tenant, id, page).await?;
        Ok(GroupDetail { group: GroupOut::from(&group), members: PageC::new(members, page) })
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupIn {
    /// 1 to 64 letters, digits, `_`, `-`, `.`, starting with a letter or digit (white space
    /// around it is trimmed); unique in the organisation (case-insensitive).
    #[schema(
        required = true,
        value_type = String,
        pattern = r"^\s*[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\s*$"
    )]
    pub key: Option<String>,
    /// 1 to 100 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
}

/// Create an approval group.
#[utoipa::path(
    post, path = "/api/tenants/{tenantId}/groups", tag = "groups", operation_id = "groups.create",
    params(path_params::TenantId, crate::openapi::OptionalIdempotencyKey),
    request_body = GroupIn,
    responses(
        (status = 201, description = "Created, ACTIVE", body = GroupOut, headers(("Location" = String))),
        (status = 400, description = "Blank, malformed or too long key or name", body = crate::openapi::ErrorBody),
        (status = 409, description = "The group key is in use, or the Idempotency-Key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_group(call: OptionalKeyWrite<OwnTenant>, body: JsonBody<GroupIn>) -> ApiResult<Response> {
    let tenant = call.scope.tenant;
    let group_key = group_key(body.value.key)?;
    let name = text("name", body.value.name, NAME_MAX)?;
    call.run(&groups::CREATE, &body.document, async |app, w| {
        let g = app.groups.create(w, group_key, name).await?;
        Reply::created(&GroupOut::from(&g), format!("/api/tenants/{tenant}/groups/{}", g.id))
    })
    .await
}

/// A change: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct GroupPatch {
    /// 1 to 100 characters, not blank.
    #[schema(pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// ACTIVE or INACTIVE.
    #[schema(value_type = Option<GroupStatus>)]
    pub status: Option<String>,
}

/// Rename, deactivate or reactivate an approval group.
#[utoipa::path(
    patch, path = "/api/tenants/{tenantId}/groups/{groupId}", tag = "groups", operation_id = "groups.update",
    params(path_params::TenantId, path_params::GroupId, crate::openapi::OptionalIdempotencyKey),
    request_body = GroupPatch,
    responses(
        (status = 200, description = "The group after the change", body = GroupOut),
        (status = 400, description = "Nothing to change, blank or too long name, or status not ACTIVE/INACTIVE", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchGroup,
        crate::openapi::KeyConflicts,
    )
)]
async fn update_group(call: OptionalKeyWrite<OwnTenant<PathId>>, body: JsonBody<GroupPatch>) -> ApiResult<Response> {
    let id = call.path.then.0;
    let name = optional_text("name", body.value.name, NAME_MAX)?;
    let status = match body.value.status.as_deref() {
        None => None,
        Some(text) => Some(
            GroupStatus::parse(text)
                .ok_or_else(|| Error::invalid_field("status", format!("{text:?} must be ACTIVE or INACTIVE")))?,
        ),
    };
    something_to_change(&[name.is_some(), status.is_some()], "name and/or status")?;
    call.run(&groups::UPDATE, &body.document, async |app, w| {
        Reply::ok(&GroupOut::from(&app.groups.update(w, id, GroupChange { name, status }).await?))
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberIn {
    /// A user of the organisation.
    #[schema(required = true, value_type = Uuid)]
    pub user_id: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MembershipOut {
    pub group_id: Uuid,
    pub user: UserSummary,
}

/// Add a user of the organisation to an approval group.
#[utoipa::path(
    post, path = "/api/tenants/{tenantId}/groups/{groupId}/members", tag = "groups", operation_id = "groups.members.add",
    params(path_params::TenantId, path_params::GroupId, crate::openapi::OptionalIdempotencyKey),
    request_body = MemberIn,
    responses(
        (status = 201, description = "Added; Location reads the member", body = MembershipOut, headers(("Location" = String))),
        (status = 200, description = "The user was a member already; nothing changed", body = MembershipOut),
        (status = 400, description = "userId missing or not a UUID", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such group, or no such user in the organisation", body = crate::openapi::ErrorBody),
        (status = 409, description = "The group is deactivated, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn add_member(call: OptionalKeyWrite<OwnTenant<PathId>>, body: JsonBody<MemberIn>) -> ApiResult<Response> {
    let id = call.path.then.0;
    let tenant = call.scope.tenant;
    let user_id = required("userId", body.value.user_id)?;
    let user_id = Uuid::parse_str(&user_id).map_err(|_| Error::invalid_field("userId", "must be a UUID"))?;
    call.run(&groups::ADD_MEMBER, &body.document, async |app, w| {
        let (group, user, added) = app.groups.add_member(w, id, user_id).await?;
        let body = MembershipOut { group_id: group.id, user };
        if added {
            Reply::created(&body, format!("/api/tenants/{tenant}/groups/{}/members/{user_id}", group.id))
        } else {
            Reply::ok(&body)
        }
    })
    .await
}

/// `{groupId}/members/{userId}`: a group and one of its members, both UUIDs (400 naming the
/// one that is not).
#[derive(Clone, Copy)]
struct GroupMember {
    group: Uuid,
    user: Uuid,
}

impl ScopedPath for GroupMember {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, _: &TenantScope) -> Result<Self, ApiError> {
        let params = path::params(parts, state).await?;
        let value = |name: &str| params.iter().find(|(n, _)| n == name).map_or("", |(_, v)| v.as_str());
        Ok(Self { group: uuid_param("groupId", value("groupId"))?, user: uuid_param("userId", value("userId"))? })
    }

    fn values(&self) -> Vec<&dyn Display> {
        vec![&self.group, &self.user]
    }

    fn resource(&self) -> Option<String> {
        Some(self.group.to_string())
    }
}

/// One member of an approval group, as the group's read lists its members.
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/groups/{groupId}/members/{userId}", tag = "groups", operation_id = "groups.members.get",
    params(path_params::TenantId, path_params::GroupId, path_params::UserId),
    responses(
        (status = 200, description = "The member", body = UserSummary),
        crate::openapi::PathIdNotUuid,
        (status = 404, description = "No such group, or the user is not a member (MEMBER_NOT_FOUND)", body = crate::openapi::ErrorBody),
    )
)]
async fn get_member(call: TenantCall<OwnTenant<GroupMember>>) -> ApiResult<Response> {
    call.show(async |app, tenant, OwnTenant { then: GroupMember { group, user }, .. }| {
        app.groups.member(tenant, group, user).await
    })
    .await
}

/// Remove a member from an approval group.
#[utoipa::path(
    delete, path = "/api/tenants/{tenantId}/groups/{groupId}/members/{userId}", tag = "groups", operation_id = "groups.members.remove",
    params(path_params::TenantId, path_params::GroupId, path_params::UserId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 204, description = "Removed"),
        crate::openapi::PathIdNotUuid,
        (status = 404, description = "No such group, or the user is not a member", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn remove_member(call: OptionalKeyWrite<OwnTenant<GroupMember>>) -> ApiResult<Response> {
    let GroupMember { group: id, user: user_id } = call.path.then;
    call.run_no_content(&groups::REMOVE_MEMBER, async |app, w| app.groups.remove_member(w, id, user_id).await).await
}
