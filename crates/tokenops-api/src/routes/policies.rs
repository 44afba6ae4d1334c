//! `/api/policies`: policies (paging style B, newest first; filters status and ruleType), one
//! policy with its current content, creation from a visible template, activation under the
//! slot rule, archiving, and the versions: listed newest first, added, and chosen as current.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::policies::{self, NewPolicy, PolicyOut, VersionOut};
use tokenops_domain::policy::{PolicyFilter, PolicyStatus, RuleType};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{optional_text, text};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageB, STRICT_SIZE, Style};
use crate::extract::{IdempotencyKey, JsonBody, PathId, QueryParams, TenantScope};
use crate::write::{self, Reply, WriteRoute};

const KEY_MAX: usize = 100;
const NAME_MAX: usize = 200;
const TEXT_MAX: usize = 2000;

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(get_policy))
        .routes(routes!(activate_policy))
        .routes(routes!(archive_policy))
        .routes(routes!(list_versions, create_version))
        .routes(routes!(set_current_version))
}

/// A page of policies (style B).
pub type PolicyPage = PageB<PolicyOut>;
/// A page of policy versions (style B).
pub type VersionPage = PageB<VersionOut>;

/// A policy content document: required, a JSON value (its rules are validated by the service).
fn content(value: Option<serde_json::Value>) -> Result<serde_json::Value, Error> {
    value.ok_or_else(|| Error::invalid_field("content", "is required"))
}

/// List the organisation's policies (paging style B).
#[utoipa::path(
    get, path = "/api/policies", tag = "policies", operation_id = "policies.list",
    params(
        ("status" = Option<PolicyStatus>, Query, description = "DRAFT, ACTIVE or ARCHIVED"),
        ("ruleType" = Option<RuleType>, Query, description = "APPROVAL"),
        ("page" = Option<u64>, Query, description = "Zero-based, default 0"),
        ("size" = Option<u32>, Query, description = "1 to 100, default 20"),
    ),
    responses(
        (status = 200, description = "Style B page of policies, each with its current version's content. The spec gives no order: newest first (createdAt descending, then id). It does not show page size bounds: this service takes 1 to 100, default 20, and refuses others with 400", body = PolicyPage),
        (status = 400, description = "Invalid paging, or an unknown status or ruleType", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:read", body = crate::openapi::ErrorBody),
    )
)]
async fn list_policies(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    params: QueryParams,
) -> ApiResult<Response> {
    let statuses: Vec<&str> = PolicyStatus::ALL.iter().map(|s| s.as_str()).collect();
    let rule_types: Vec<&str> = RuleType::ALL.iter().map(|r| r.as_str()).collect();
    let filter = PolicyFilter {
        status: params.choice("status", PolicyStatus::parse, &statuses)?,
        rule_type: params.choice("ruleType", RuleType::parse, &rule_types)?,
    };
    let page = paging::page_request(&params, STRICT_SIZE)?;
    let policies = state.app.policies.list(scope.tenant, filter, page).await?;
    Ok(paging::respond(Style::B, &policies, page))
}

/// A policy with its current version's content.
#[utoipa::path(
    get, path = "/api/policies/{policyId}", tag = "policies", operation_id = "policies.get",
    params(("policyId" = Uuid, Path)),
    responses(
        (status = 200, description = "The policy; content is its current version's", body = PolicyOut),
        (status = 400, description = "policyId is not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:read", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn get_policy(State(state): State<Arc<ApiState>>, scope: TenantScope, PathId(id): PathId) -> ApiResult<Response> {
    Ok(axum::Json(state.app.policies.get(scope.tenant, id).await?).into_response())
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyIn {
    /// A SYSTEM template's key or one of the organisation's own, not deprecated.
    #[schema(required = true, value_type = String)]
    pub template_key: Option<String>,
    /// The policy content of version 1, validated for the template's action.
    #[schema(required = true, value_type = Object)]
    pub content: Option<serde_json::Value>,
    /// Optional, 1 to 200 characters.
    pub name: Option<String>,
    /// Optional, 1 to 2000 characters.
    pub description: Option<String>,
    /// Optional summary of version 1, 1 to 2000 characters.
    pub change_summary: Option<String>,
}

/// Create a DRAFT policy at version 1 from a template, with the caller's content.
///
/// The spec shows templateKey and content; this service also takes an optional name,
/// description and changeSummary (version 1's). The template's default content is never
/// copied: the content sent is version 1's, stored as sent (hitPolicy included). The policy's
/// action and ruleType are the template's. Several drafts may share a (ruleType, action,
/// templateKey) slot; only activation checks it.
#[utoipa::path(
    post, path = "/api/policies", tag = "policies", operation_id = "policies.create",
    params(("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters")),
    request_body = PolicyIn,
    responses(
        (status = 201, description = "Created: DRAFT, version 1", body = PolicyOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED with details: a missing field, or content that breaks a rule (each violation with its JSON path under content: a field outside the catalogue, !=, an amount compared without assetId, a bad decimal, an unknown key)", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:create", body = crate::openapi::ErrorBody),
        (status = 404, description = "No visible template with that key (another organisation's, a deprecated one, or none)", body = crate::openapi::ErrorBody),
        (status = 422, description = "Idempotency-Key reused with a different payload", body = crate::openapi::ErrorBody),
    )
)]
async fn create_policy(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
    body: JsonBody<PolicyIn>,
) -> ApiResult<Response> {
    let request = route.request(&scope, &policies::CREATE, key, &[], &body.document);
    let value = body.value;
    let new = NewPolicy {
        template_key: text("templateKey", value.template_key, KEY_MAX)?,
        content: content(value.content)?,
        name: optional_text("name", value.name, NAME_MAX)?,
        description: optional_text("description", value.description, TEXT_MAX)?,
        change_summary: optional_text("changeSummary", value.change_summary, TEXT_MAX)?,
    };
    write::run(&state, request, |app, mut w| async move {
        let created = app.policies.create(&mut w, new).await;
        let reply = created.and_then(|p| Reply::created(&p, format!("/api/policies/{}", p.id)));
        (w, reply)
    })
    .await
}

/// Activate a policy.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/activate", tag = "policies", operation_id = "policies.activate",
    params(("policyId" = Uuid, Path), ("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters")),
    responses(
        (status = 200, description = "ACTIVE: matching events are checked against its current version. Activating an ACTIVE policy succeeds unchanged", body = PolicyOut),
        (status = 400, description = "policyId is not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:update", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation", body = crate::openapi::ErrorBody),
        (status = 409, description = "POLICY_SLOT_TAKEN: another non-archived policy (DRAFT or ACTIVE) holds the same ruleType, action and templateKey (body adds conflictingPolicyId); or POLICY_ARCHIVED: an archived policy is not activated again", body = crate::openapi::ErrorBody),
    )
)]
async fn activate_policy(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
) -> ApiResult<Response> {
    let request = route.request(&scope, &policies::ACTIVATE, key, &[&id], &serde_json::Value::Null);
    write::run(&state, request.about(id.to_string()), |app, mut w| async move {
        let activated = app.policies.activate(&mut w, id).await;
        (w, activated.and_then(|p| Reply::ok(&p)))
    })
    .await
}

/// Archive a policy, from any status.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/archive", tag = "policies", operation_id = "policies.archive",
    params(("policyId" = Uuid, Path), ("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters")),
    responses(
        (status = 200, description = "ARCHIVED: no longer evaluated, its slot freed, its versions kept. Archiving an archived policy changes nothing", body = PolicyOut),
        (status = 400, description = "policyId is not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:update", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn archive_policy(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
) -> ApiResult<Response> {
    let request = route.request(&scope, &policies::ARCHIVE, key, &[&id], &serde_json::Value::Null);
    write::run(&state, request.about(id.to_string()), |app, mut w| async move {
        let archived = app.policies.archive(&mut w, id).await;
        (w, archived.and_then(|p| Reply::ok(&p)))
    })
    .await
}

/// List a policy's versions (paging style B, newest first).
#[utoipa::path(
    get, path = "/api/policies/{policyId}/versions", tag = "policies", operation_id = "policies.versions.list",
    params(
        ("policyId" = Uuid, Path),
        ("page" = Option<u64>, Query, description = "Zero-based, default 0"),
        ("size" = Option<u32>, Query, description = "1 to 100, default 20"),
    ),
    responses(
        (status = 200, description = "Style B page of versions, newest (highest versionNumber) first", body = VersionPage),
        (status = 400, description = "policyId is not a UUID, or invalid paging", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:read", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn list_versions(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
    params: QueryParams,
) -> ApiResult<Response> {
    let page = paging::page_request(&params, STRICT_SIZE)?;
    let versions = state.app.policies.list_versions(scope.tenant, id, page).await?;
    Ok(paging::respond(Style::B, &versions, page))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VersionIn {
    /// What changed; optional, 1 to 2000 characters.
    pub change_summary: Option<String>,
    /// The new version's policy content, validated for the policy's action.
    #[schema(required = true, value_type = Object)]
    pub content: Option<serde_json::Value>,
}

/// Add a version to a policy; the current version does not change.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/versions", tag = "policies", operation_id = "policies.versions.create",
    params(("policyId" = Uuid, Path), ("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters")),
    request_body = VersionIn,
    responses(
        (status = 201, description = "The version record, numbered after the highest; serve it with PUT current-version. Location is the policy's versions list (no endpoint reads a single version)", body = VersionOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED with details (see POST /api/policies), or policyId not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:version:create", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation", body = crate::openapi::ErrorBody),
        (status = 409, description = "POLICY_ARCHIVED: an archived policy's versions are frozen", body = crate::openapi::ErrorBody),
    )
)]
async fn create_version(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
    body: JsonBody<VersionIn>,
) -> ApiResult<Response> {
    let request = route.request(&scope, &policies::CREATE_VERSION, key, &[&id], &body.document);
    let value = body.value;
    let change_summary = optional_text("changeSummary", value.change_summary, TEXT_MAX)?;
    let content = content(value.content)?;
    write::run(&state, request.about(id.to_string()), |app, mut w| async move {
        let added = app.policies.add_version(&mut w, id, change_summary, content).await;
        // No endpoint reads one version: Location names the list that holds it.
        let reply = added.and_then(|v| Reply::created(&v, format!("/api/policies/{}/versions", v.policy_id)));
        (w, reply)
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CurrentVersionIn {
    /// An existing version number of the policy.
    #[schema(required = true, value_type = u32)]
    pub version_number: Option<i64>,
}

/// Choose the version a policy serves (an earlier number rolls back).
#[utoipa::path(
    put, path = "/api/policies/{policyId}/current-version", tag = "policies", operation_id = "policies.currentVersion.set",
    params(("policyId" = Uuid, Path), ("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters")),
    request_body = CurrentVersionIn,
    responses(
        (status = 200, description = "The policy with version set, and that version's content", body = PolicyOut),
        (status = 400, description = "versionNumber missing or not a positive integer, or policyId not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoUsableToken,
        (status = 403, description = "Missing policy:update", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation, or no such version number", body = crate::openapi::ErrorBody),
        (status = 409, description = "POLICY_ARCHIVED: an archived policy's current version does not change", body = crate::openapi::ErrorBody),
    )
)]
async fn set_current_version(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathId(id): PathId,
    route: WriteRoute,
    key: Option<IdempotencyKey>,
    body: JsonBody<CurrentVersionIn>,
) -> ApiResult<Response> {
    let request = route.request(&scope, &policies::SET_CURRENT_VERSION, key, &[&id], &body.document);
    let number = body.value.version_number.ok_or_else(|| Error::invalid_field("versionNumber", "is required"))?;
    let number = u32::try_from(number)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| Error::invalid_field("versionNumber", "must be a positive integer"))?;
    write::run(&state, request.about(id.to_string()), |app, mut w| async move {
        let set = app.policies.set_current_version(&mut w, id, number).await;
        (w, set.and_then(|p| Reply::ok(&p)))
    })
    .await
}
