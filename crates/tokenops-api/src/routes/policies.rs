//! `/api/policies`: policies (paging style B, newest first; filters status and ruleType), one
//! policy with its current content, creation from a visible template, activation under the
//! slot rule, archiving, and the versions: listed newest first, added, and chosen as current;
//! and the simulation of a version or of unsaved content over past operations (beyond the spec).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::policies::simulation::{
    MAX_OPERATIONS, MAX_WINDOW_DAYS, Simulation, SimulationOut, SimulationSource,
};
use tokenops_app::policies::{self, NewPolicy, PolicyChange, PolicyOut, VersionOut};
use tokenops_domain::Timestamp;
use tokenops_domain::policy::{PolicyFilter, PolicyStatus, RuleType};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::fields::{optional_text, required, something_to_change, text, version_number};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageB, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall, TenantScope};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

const KEY_MAX: usize = 100;
const NAME_MAX: usize = 200;
const TEXT_MAX: usize = 2000;
// The documented maxLength of a template key, a name and the longer texts.
const _: () = assert!(KEY_MAX == 100 && NAME_MAX == 200 && TEXT_MAX == 2000);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_policies, create_policy))
        .routes(routes!(get_policy, update_policy))
        .routes(routes!(activate_policy))
        .routes(routes!(archive_policy))
        .routes(routes!(list_versions, create_version))
        .routes(routes!(set_current_version))
        .routes(routes!(simulate_policy))
}

/// A page of policies (style B).
pub type PolicyPage = PageB<PolicyOut>;
/// A page of policy versions (style B).
pub type VersionPage = PageB<VersionOut>;

/// List the organisation's policies (paging style B).
#[utoipa::path(
    get, path = "/api/policies", tag = "policies", operation_id = "policies.list",
    params(
        ("status" = Option<PolicyStatus>, Query, description = "DRAFT, ACTIVE or ARCHIVED"),
        ("ruleType" = Option<RuleType>, Query, description = "APPROVAL"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style B page of policies, each with its current version's content. The spec gives no order: newest first (createdAt descending, then id). It does not show page size bounds: this service takes 1 to 100, default 20, and refuses others with 400", body = PolicyPage),
        (status = 400, description = "Invalid paging, or an unknown status or ruleType", body = crate::openapi::ErrorBody),
    )
)]
async fn list_policies(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = PolicyFilter {
        status: params.one_of("status", &PolicyStatus::ALL, PolicyStatus::as_str)?,
        rule_type: params.one_of("ruleType", &RuleType::ALL, RuleType::as_str)?,
    };
    paging::list(&params, STRICT_SIZE, Style::B, |page| call.state.app.policies.list(call.scope.tenant, filter, page))
        .await
}

/// A policy with its current version's content.
#[utoipa::path(
    get, path = "/api/policies/{policyId}", tag = "policies", operation_id = "policies.get",
    params(path_params::PolicyId),
    responses(
        (status = 200, description = "The policy; content is its current version's", body = PolicyOut),
        crate::openapi::NotAUuid<path_params::PolicyId>,
        crate::openapi::NoSuchPolicy,
    )
)]
async fn get_policy(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.policies.get(tenant, id).await).await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct PolicyPatch {
    /// 1 to 200 characters, not blank.
    #[schema(pattern = r"\S", max_length = 200)]
    pub name: Option<String>,
    /// 1 to 2000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 2000)]
    pub description: Option<String>,
}

/// Change a policy's name and/or description.
///
/// Beyond the spec, which gives policies no update of their labels: the name and description
/// a risk officer reads are corrected without a new version. Status, versions and content do
/// not change (a rule change is a new version). A field left out stays; neither can be
/// cleared (null is the same as leaving it out). An archived policy is kept as it was (409).
/// Audited as policy.update with the labels before and after.
#[utoipa::path(
    patch, path = "/api/policies/{policyId}", tag = "policies", operation_id = "policies.update",
    params(path_params::PolicyId, crate::openapi::OptionalIdempotencyKey),
    request_body = PolicyPatch,
    responses(
        (status = 200, description = "The policy after the change, updatedAt moved", body = PolicyOut),
        (status = 400, description = "VALIDATION_FAILED: nothing to change, a blank or too long name or description, an unknown field, or policyId not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchPolicy,
        (status = 409, description = "POLICY_ARCHIVED: an archived policy's labels do not change; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn update_policy(call: OptionalKeyWrite<PathId>, body: JsonBody<PolicyPatch>) -> ApiResult<Response> {
    let (id, value) = (call.path.0, body.value);
    let change = PolicyChange {
        name: optional_text("name", value.name, NAME_MAX)?,
        description: optional_text("description", value.description, TEXT_MAX)?,
    };
    something_to_change(&[change.name.is_some(), change.description.is_some()], "name and/or description")?;
    call.run(&policies::UPDATE, &body.document, async |app, w| Reply::ok(&app.policies.update(w, id, change).await?))
        .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyIn {
    /// A SYSTEM template's key or one of the organisation's own, not deprecated.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub template_key: Option<String>,
    /// The policy content of version 1, validated for the template's action.
    #[schema(required = true, value_type = Object)]
    pub content: Option<serde_json::Value>,
    /// Optional, 1 to 200 characters, not blank.
    #[schema(pattern = r"\S", max_length = 200)]
    pub name: Option<String>,
    /// Optional, 1 to 2000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 2000)]
    pub description: Option<String>,
    /// Optional summary of version 1, 1 to 2000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 2000)]
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
    params(crate::openapi::OptionalIdempotencyKey),
    request_body = PolicyIn,
    responses(
        (status = 201, description = "Created: DRAFT, version 1", body = PolicyOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED with details: a missing field, or content that breaks a rule (each violation with its JSON path under content: a field outside the catalogue, !=, an amount compared without assetId, a bad decimal, an unknown key)", body = crate::openapi::ErrorBody),
        (status = 404, description = "No visible template with that key (another organisation's, a deprecated one, or none)", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn create_policy(call: OptionalKeyWrite, body: JsonBody<PolicyIn>) -> ApiResult<Response> {
    let value = body.value;
    let new = NewPolicy {
        template_key: text("templateKey", value.template_key, KEY_MAX)?,
        content: required("content", value.content)?,
        name: optional_text("name", value.name, NAME_MAX)?,
        description: optional_text("description", value.description, TEXT_MAX)?,
        change_summary: optional_text("changeSummary", value.change_summary, TEXT_MAX)?,
    };
    call.run(&policies::CREATE, &body.document, async |app, w| {
        let p = app.policies.create(w, new).await?;
        Reply::created(&p, format!("/api/policies/{}", p.id))
    })
    .await
}

/// Activate a policy.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/activate", tag = "policies", operation_id = "policies.activate",
    params(path_params::PolicyId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 200, description = "ACTIVE: matching events are checked against its current version. Activating an ACTIVE policy succeeds unchanged", body = PolicyOut),
        crate::openapi::NotAUuid<path_params::PolicyId>,
        crate::openapi::NoSuchPolicy,
        (status = 409, description = "POLICY_SLOT_TAKEN: another non-archived policy (DRAFT or ACTIVE) holds the same ruleType, action and templateKey (body adds conflictingPolicyId); or POLICY_ARCHIVED: an archived policy is not activated again; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn activate_policy(call: OptionalKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    call.run(&policies::ACTIVATE, &Value::Null, async |app, w| Reply::ok(&app.policies.activate(w, id).await?)).await
}

/// Archive a policy, from any status.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/archive", tag = "policies", operation_id = "policies.archive",
    params(path_params::PolicyId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 200, description = "ARCHIVED: no longer evaluated, its slot freed, its versions kept. Archiving an archived policy changes nothing", body = PolicyOut),
        crate::openapi::NotAUuid<path_params::PolicyId>,
        crate::openapi::NoSuchPolicy,
        crate::openapi::KeyConflicts,
    )
)]
async fn archive_policy(call: OptionalKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    call.run(&policies::ARCHIVE, &Value::Null, async |app, w| Reply::ok(&app.policies.archive(w, id).await?)).await
}

/// List a policy's versions (paging style B, newest first).
#[utoipa::path(
    get, path = "/api/policies/{policyId}/versions", tag = "policies", operation_id = "policies.versions.list",
    params(path_params::PolicyId, crate::openapi::PageQuery),
    responses(
        (status = 200, description = "Style B page of versions, newest (highest versionNumber) first", body = VersionPage),
        (status = 400, description = "policyId is not a UUID, or invalid paging", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchPolicy,
    )
)]
async fn list_versions(call: TenantCall<PathId>, params: QueryParams) -> ApiResult<Response> {
    let id = call.path.0;
    paging::list(&params, STRICT_SIZE, Style::B, |page| {
        call.state.app.policies.list_versions(call.scope.tenant, id, page)
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionIn {
    /// What changed; optional, 1 to 2000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 2000)]
    pub change_summary: Option<String>,
    /// The new version's policy content, validated for the policy's action.
    #[schema(required = true, value_type = Object)]
    pub content: Option<serde_json::Value>,
}

/// Add a version to a policy; the current version does not change.
#[utoipa::path(
    post, path = "/api/policies/{policyId}/versions", tag = "policies", operation_id = "policies.versions.create",
    params(path_params::PolicyId, crate::openapi::OptionalIdempotencyKey),
    request_body = VersionIn,
    responses(
        (status = 201, description = "The version record, numbered after the highest; serve it with PUT current-version. Location is the policy's versions list (no endpoint reads a single version)", body = VersionOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED with details (see POST /api/policies), or policyId not a UUID", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchPolicy,
        (status = 409, description = "POLICY_ARCHIVED: an archived policy's versions are frozen; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_version(call: OptionalKeyWrite<PathId>, body: JsonBody<VersionIn>) -> ApiResult<Response> {
    let (id, value) = (call.path.0, body.value);
    let change_summary = optional_text("changeSummary", value.change_summary, TEXT_MAX)?;
    let content = required("content", value.content)?;
    call.run(&policies::CREATE_VERSION, &body.document, async |app, w| {
        let v = app.policies.add_version(w, id, change_summary, content).await?;
        // No endpoint reads one version: Location names the list that holds it.
        Reply::created(&v, format!("/api/policies/{}/versions", v.policy_id))
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentVersionIn {
    /// An existing version number of the policy.
    #[schema(required = true, value_type = u32, minimum = 1)]
    pub version_number: Option<i64>,
}

/// Choose the version a policy serves (an earlier number rolls back).
#[utoipa::path(
    put, path = "/api/policies/{policyId}/current-version", tag = "policies", operation_id = "policies.currentVersion.set",
    params(path_params::PolicyId, crate::openapi::OptionalIdempotencyKey),
    request_body = CurrentVersionIn,
    responses(
        (status = 200, description = "The policy with version set, and that version's content", body = PolicyOut),
        (status = 400, description = "versionNumber missing or not a positive integer, or policyId not a UUID", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation, or no such version number", body = crate::openapi::ErrorBody),
        (status = 409, description = "POLICY_ARCHIVED: an archived policy's current version does not change; or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn set_current_version(call: OptionalKeyWrite<PathId>, body: JsonBody<CurrentVersionIn>) -> ApiResult<Response> {
    let id = call.path.0;
    let number = version_number("versionNumber", required("versionNumber", body.value.version_number)?)?;
    call.run(&policies::SET_CURRENT_VERSION, &body.document, async |app, w| {
        Reply::ok(&app.policies.set_current_version(w, id, number).await?)
    })
    .await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SimulationIn {
    /// The policy whose version is simulated; give either policyId or content.
    #[schema(value_type = Option<String>, format = Uuid)]
    pub policy_id: Option<String>,
    /// With policyId: the version to simulate (any stored one, a DRAFT's included); default
    /// the policy's current version.
    #[schema(value_type = Option<u32>, minimum = 1)]
    pub version_number: Option<i64>,
    /// With content: the template a policy of this content would be created from (it gives the
    /// action the content is validated for, as on POST /api/policies).
    #[schema(pattern = r"\S", max_length = 100)]
    pub template_key: Option<String>,
    /// Policy content not saved yet; give either policyId or content.
    #[schema(value_type = Option<Object>)]
    pub content: Option<serde_json::Value>,
    /// ISO 8601; operations submitted at or after it.
    #[schema(required = true, value_type = String, format = DateTime)]
    pub from: Option<String>,
    /// ISO 8601; operations submitted before it. At most 31 days after from.
    #[schema(required = true, value_type = String, format = DateTime)]
    pub to: Option<String>,
}

fn instant(field: &str, value: Option<String>) -> Result<Timestamp, Error> {
    let text = required(field, value)?;
    Timestamp::parse_iso8601(&text).map_err(|e| Error::invalid_field(field, e))
}

/// The simulated source the body names: a policy's version, or content with its template.
fn simulation_source(value: &mut SimulationIn) -> Result<SimulationSource, Error> {
    match (value.policy_id.take(), value.content.take()) {
        (Some(_), Some(_)) => Err(Error::invalid_field("policyId", "give either policyId or content, not both")),
        (None, None) => Err(Error::invalid_field("policyId", "give either policyId or content")),
        (Some(id), None) => {
            if value.template_key.is_some() {
                return Err(Error::invalid_field("templateKey", "goes with content, not with policyId"));
            }
            let policy_id = Uuid::parse_str(&id).map_err(|_| Error::invalid_field("policyId", "must be a UUID"))?;
            let version_number = value.version_number.map(|n| version_number("versionNumber", n)).transpose()?;
            Ok(SimulationSource::Version { policy_id, version_number })
        }
        (None, Some(content)) => {
            if value.version_number.is_some() {
                return Err(Error::invalid_field("versionNumber", "goes with policyId, not with content"));
            }
            let template_key = text("templateKey", value.template_key.take(), KEY_MAX)?;
            Ok(SimulationSource::Content { template_key, content })
        }
    }
}

/// Simulate a policy version, or unsaved content, over the organisation's past operations.
///
/// Beyond the spec: risk officers see what a rule would have done before activating it. The
/// body names either a stored version of a policy (`policyId`, optional `versionNumber`,
/// default the current one; a DRAFT's or an ARCHIVED policy's too) or `content` with the
/// `templateKey` a policy would be created from (validated exactly as POST /api/policies
/// validates it). The examined operations are those submitted in `[from, to)` (at most 31
/// days), newest first, at most 1,000: `truncated` says the window held more
/// (`operationsInWindow`). Each is evaluated by the same engine and with the same inputs as the
/// settlement pipeline's policy step, against the ACTIVE policies of its own action as they
/// are now, the simulated content taking part in those of its action: a version of an ACTIVE
/// policy replaces that policy's current content (`mode` REPLACES); a version of a policy that
/// is not ACTIVE, or content sent alone, joins the ACTIVE policies (JOINS). `wouldGet` does not
/// resolve approvers (a group that cannot be resolved would refuse the operation at run time).
///
/// `got` is derived from what is stored: REQUIRE_APPROVAL when a policy raised an approval
/// request for the operation (whatever came of it); REJECT for FAILED VALIDATION_REJECTED;
/// NOT_GOVERNED for RELEASE and CANCEL (no policy action); UNDECIDED for an operation not
/// evaluated yet (SUBMITTED) or failed before a decision (UNPROCESSABLE, POLICY_TIMEOUT);
/// otherwise APPROVE (the store does not say whether a policy governed the action then, so
/// an operation no policy governed is APPROVE too). `wouldGet` is APPROVE, REQUIRE_APPROVAL,
/// REJECT (a REJECT rule, or a rule naming a field the operation lacks, which the pipeline
/// refuses), or NOT_GOVERNED (no policy action, or no ACTIVE policy for it). `counts` has one
/// entry per (got, wouldGet) pair that occurs.
///
/// Read-only: nothing is written, no event, no audit record; an Idempotency-Key is ignored.
/// It needs policy:read, the permission of every other policy read.
#[utoipa::path(
    post, path = "/api/policies/simulations", tag = "policies", operation_id = "policies.simulate",
    request_body = SimulationIn,
    responses(
        (status = 200, description = "The examined operations, newest first, each with the decision it got and the one it would get, and the count of each (got, wouldGet) pair", body = SimulationOut),
        (status = 400, description = "VALIDATION_FAILED with details: neither or both of policyId and content, templateKey missing with content, versionNumber not a positive integer, policyId not a UUID, from or to missing or not ISO 8601, from not before to, a window longer than 31 days, or content that breaks a rule (as on POST /api/policies)", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such policy in the organisation, no such version of it, or (with content) no visible template with that key", body = crate::openapi::ErrorBody),
    )
)]
async fn simulate_policy(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    body: JsonBody<SimulationIn>,
) -> ApiResult<Response> {
    let mut value = body.value;
    let source = simulation_source(&mut value)?;
    let simulation = Simulation { source, from: instant("from", value.from)?, to: instant("to", value.to)? };
    let out: SimulationOut = state.app.policies.simulate(scope.tenant, simulation).await?;
    Ok(axum::Json(out).into_response())
}

// The limits the document states, kept in step with the service's.
const _: () = assert!(MAX_WINDOW_DAYS == 31 && MAX_OPERATIONS == 1000);
