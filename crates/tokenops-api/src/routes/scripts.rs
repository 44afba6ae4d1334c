//! `/api/scripts`: Rhai scripts (paging style A, newest first), one script, creation (compiled,
//! parameters extracted from the source), PATCH of name, description, code and status, DELETE,
//! the code as a file (download), clones, and dry runs (beyond the spec). Writes need an
//! Idempotency-Key.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::scripts::dry_run::{DryRunOut, DryRunRequest};
use tokenops_app::scripts::{self, CloneRequest, NewScript, Override, ScriptChange, ScriptOut};
use tokenops_domain::paging::{SortDirection, SortKey};
use tokenops_domain::script::{ScriptFilter, ScriptStatus};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{optional_text, required, text, version_number};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageA, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathId, PathParam, QueryParams, TenantCall, TenantScope};
use crate::openapi::path_params;
use crate::write::{self, Reply, RequiredKeyWrite};

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    super::optional_bodies(
        OpenApiRouter::new()
            .routes(routes!(list_scripts, create_script))
            .routes(routes!(get_script, update_script, delete_script))
            .routes(routes!(download_script))
            .routes(routes!(clone_script))
            .routes(routes!(dry_run_script)),
    )
}

// The documented maxLength of a name and of a description.
const _: () = assert!(scripts::NAME_MAX == 100 && scripts::DESCRIPTION_MAX == 1000);

/// A page of scripts (style A).
pub type ScriptPage = PageA<ScriptOut>;

const SORTABLE: &[(&str, &str)] =
    &[("createdAt", "created_at"), ("updatedAt", "updated_at"), ("name", "name"), ("status", "status")];
const NEWEST_FIRST: &[SortKey] = &[SortKey { column: "created_at", direction: SortDirection::Desc }];

/// A new script.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScriptIn {
    /// 1 to 100 characters of letters, digits, `-`, `_` and `.`: what other scripts import
    /// (`import "name" as alias;`). Unique among the organisation's scripts that are not deleted.
    #[schema(required = true, value_type = String, pattern = r"^\s*[A-Za-z0-9._-]{1,100}\s*$")]
    pub name: Option<String>,
    /// Optional, 1 to 1000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 1000)]
    pub description: Option<String>,
    /// The Rhai source, not blank. Parameters are declared in it, one per line:
    /// `// @param NAME: TYPE [= DEFAULT] [-- DESCRIPTION]`, TYPE one of string, integer, decimal,
    /// boolean (a decimal's default quoted, as "1000.00"). Also taken as `code`, the spec's
    /// word for it (one of the two, not both).
    #[serde(alias = "code")]
    #[schema(required = true, value_type = String, pattern = r"\S")]
    pub source: Option<String>,
}

/// A change: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct ScriptPatch {
    /// As a new script's.
    #[schema(min_length = 1, max_length = 100, pattern = r"^[A-Za-z0-9._-]{1,100}$")]
    pub name: Option<String>,
    /// A text (1 to 1000 characters, not blank), or null to clear it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = r"\S", max_length = 1000)]
    pub description: Option<Option<String>>,
    /// New code (not blank): compiled, a new version. Also taken as `code`.
    #[serde(alias = "code")]
    #[schema(pattern = r"\S")]
    pub source: Option<String>,
    /// DRAFT (unpublish), PUBLISHED or DEPRECATED.
    #[schema(value_type = Option<SettableScriptStatus>)]
    pub status: Option<String>,
}

/// The statuses a PATCH may ask for (OUTDATED is the service's to set; deletion is DELETE).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
enum SettableScriptStatus {
    Draft,
    Published,
    Deprecated,
}

/// A field that may be sent as null: `Some(None)`; absent: `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// One parameter value: of a run (overrides), of an automation, or a clone's new default.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
pub struct OverrideIn {
    /// The declared parameter's name; not blank.
    #[schema(required = true, value_type = String, pattern = r"\S")]
    pub key: Option<String>,
    /// A JSON string, number or boolean fitting the type (a DECIMAL as a string of digits).
    #[schema(required = true, schema_with = override_value_schema)]
    pub value: Option<Value>,
    /// STRING, INTEGER, DECIMAL or BOOLEAN: the declared type; not blank.
    #[serde(rename = "type")]
    #[schema(required = true, value_type = String, pattern = r"\S")]
    pub kind: Option<String>,
}

fn override_value_schema() -> utoipa::openapi::schema::Object {
    scripts::scalar_value_schema("A JSON string, number or boolean fitting the type (a DECIMAL as a string of digits).")
}

/// Overrides as the app takes them: 400 for a blank key or a missing value or type.
pub fn overrides(field: &str, items: Vec<OverrideIn>) -> Result<Vec<Override>, Error> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, o)| {
            let at = |name: &str| format!("{field}[{i}].{name}");
            let key = o
                .key
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| Error::invalid_field(&at("key"), "must not be blank"))?;
            let value =
                o.value.filter(|v| !v.is_null()).ok_or_else(|| Error::invalid_field(&at("value"), "is required"))?;
            let kind = o
                .kind
                .filter(|k| !k.trim().is_empty())
                .ok_or_else(|| Error::invalid_field(&at("type"), "is required"))?;
            Ok(Override { key, value, kind })
        })
        .collect()
}

/// A clone of a script.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneIn {
    /// The clone's name (as a script's).
    #[schema(required = true, value_type = String, pattern = r"^\s*[A-Za-z0-9._-]{1,100}\s*$")]
    pub name: Option<String>,
    /// Optional, 1 to 1000 characters, not blank; the source's by default.
    #[schema(pattern = r"\S", max_length = 1000)]
    pub description: Option<String>,
    /// New defaults for some of the source's parameters.
    #[serde(default)]
    pub overrides: Vec<OverrideIn>,
}

/// List the organisation's scripts (paging style A). Beyond the spec, which names no list.
#[utoipa::path(
    get, path = "/api/scripts", tag = "scripts", operation_id = "scripts.list",
    params(
        ("status" = Option<ScriptStatus>, Query, description = "DRAFT, PUBLISHED, OUTDATED, DEPRECATED or DELETED; deleted scripts are listed only when asked for"),
        ("name" = Option<String>, Query, description = "Exact name"),
        ("sort" = Option<Vec<String>>, Query, description = "createdAt, updatedAt, name or status, with ,asc or ,desc; default createdAt,desc"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of scripts", body = ScriptPage),
        (status = 400, description = "Invalid paging, sort or status", body = crate::openapi::ErrorBody),
    )
)]
async fn list_scripts(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let filter = ScriptFilter {
        status: params.one_of("status", &ScriptStatus::ALL, ScriptStatus::as_str)?,
        name: params.one("name")?.map(str::to_owned),
    };
    let sort = paging::sort_keys(&params, SORTABLE, NEWEST_FIRST)?;
    paging::list(&params, STRICT_SIZE, Style::A, |page| {
        call.state.app.scripts.list(call.scope.tenant, &filter, &sort, page)
    })
    .await
}

/// Create a script: a DRAFT at version 1, compiled.
#[utoipa::path(
    post, path = "/api/scripts", tag = "scripts", operation_id = "scripts.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = ScriptIn,
    responses(
        (status = 201, description = "Created: DRAFT, version 1, its parameters extracted from the source", body = ScriptOut, headers(("Location" = String))),
        (status = 400, description = "A field missing or invalid; the source does not compile (the compiler's message, with line and column in details and as members); a duplicate name; an import that names no script; Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::KeyConflicts,
    )
)]
async fn create_script(call: RequiredKeyWrite, body: JsonBody<ScriptIn>) -> ApiResult<Response> {
    let value = body.value;
    let new = NewScript {
        name: text("name", value.name, scripts::NAME_MAX)?,
        description: optional_text("description", value.description, scripts::DESCRIPTION_MAX)?,
        source: required("source", value.source)?,
    };
    call.run(&scripts::CREATE, &body.document, async |app, w| {
        let s = app.scripts.create(w, new).await?;
        Reply::created(&s, format!("/api/scripts/{}", s.script_id))
    })
    .await
}

/// Read one script.
#[utoipa::path(
    get, path = "/api/scripts/{scriptId}", tag = "scripts", operation_id = "scripts.get",
    params(path_params::ScriptId),
    responses(
        (status = 200, description = "The script (its code through download)", body = ScriptOut),
        crate::openapi::NotAUuid<path_params::ScriptId>,
        crate::openapi::NoSuchScriptOrDeleted,
    )
)]
async fn get_script(call: TenantCall<PathId>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(id)| app.scripts.get(tenant, id).await).await
}

/// Change a script's name, description, code or status.
///
/// The status machine: DRAFT → PUBLISHED (every import PUBLISHED, resolved to its current
/// version); PUBLISHED or OUTDATED → DRAFT (409 while a published script imports it), →
/// DEPRECATED; OUTDATED or DEPRECATED → PUBLISHED (imports resolved anew). New code for a
/// PUBLISHED script is published at once as the next version, and its published dependants
/// become OUTDATED; code for an OUTDATED or DEPRECATED script is 409. A script others import
/// cannot be renamed (409).
#[utoipa::path(
    patch, path = "/api/scripts/{scriptId}", tag = "scripts", operation_id = "scripts.update",
    params(path_params::ScriptId, crate::openapi::RequiredIdempotencyKey),
    request_body = ScriptPatch,
    responses(
        (status = 200, description = "The script after the change", body = ScriptOut),
        (status = 400, description = "No field given, an invalid name or description, a duplicate name, an unsupported status, code that does not compile, Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchScriptOrDeleted,
        (status = 409, description = "Unpublishing a script another published script depends on, or that an ACTIVE automation runs; code sent for an OUTDATED or DEPRECATED script; publishing with an import not published; renaming an imported script; the status already; the key in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn update_script(call: RequiredKeyWrite<PathId>, body: JsonBody<ScriptPatch>) -> ApiResult<Response> {
    let id = call.path.0;
    let value = body.value;
    let status = match value.status {
        None => None,
        Some(text) => Some(ScriptStatus::parse(&text).ok_or_else(|| {
            Error::invalid_field("status", format!("{text:?} is not a status; one of DRAFT, PUBLISHED, DEPRECATED"))
        })?),
    };
    let change = ScriptChange {
        name: value.name,
        description: match value.description {
            None => None,
            Some(None) => Some(None),
            Some(text) => Some(optional_text("description", text, scripts::DESCRIPTION_MAX)?),
        },
        source: value.source,
        status,
    };
    call.run(&scripts::UPDATE, &body.document, async |app, w| Reply::ok(&app.scripts.update(w, id, change).await?))
        .await
}

/// Delete a script that is not PUBLISHED.
#[utoipa::path(
    delete, path = "/api/scripts/{scriptId}", tag = "scripts", operation_id = "scripts.delete",
    params(path_params::ScriptId, crate::openapi::RequiredIdempotencyKey),
    responses(
        (status = 204, description = "Deleted: its name is free again"),
        crate::openapi::NotAUuidOrNoKey<path_params::ScriptId>,
        crate::openapi::NoSuchScriptOrDeleted,
        (status = 409, description = "The script is PUBLISHED, has ACTIVE automations, or is imported by another script; or the key in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn delete_script(call: RequiredKeyWrite<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    call.run_no_content(&scripts::DELETE, async |app, w| app.scripts.delete(w, id).await).await
}

/// Download a script's code.
#[utoipa::path(
    get, path = "/api/scripts/{scriptId}/download", tag = "scripts", operation_id = "scripts.download",
    params(path_params::ScriptId),
    responses(
        (status = 200, description = "The Rhai source as a file, `{name}.rhai`", content_type = "text/plain", body = String),
        crate::openapi::NotAUuid<path_params::ScriptId>,
        crate::openapi::NoSuchScript,
        (status = 409, description = "The script is deleted", body = crate::openapi::ErrorBody),
    )
)]
async fn download_script(call: TenantCall<PathId>) -> ApiResult<Response> {
    let id = call.path.0;
    let (name, source) = call.state.app.scripts.download(call.scope.tenant, id).await?;
    let disposition = format!("attachment; filename=\"{name}.rhai\"");
    Ok((
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()), (header::CONTENT_DISPOSITION, disposition)],
        source,
    )
        .into_response())
}

/// Clone a script under a new name, with new defaults for some parameters.
#[utoipa::path(
    post, path = "/api/scripts/{scriptId}/clone", tag = "scripts", operation_id = "scripts.clone",
    params(path_params::ScriptId, crate::openapi::RequiredIdempotencyKey),
    request_body = CloneIn,
    responses(
        (status = 201, description = "The clone: a DRAFT at version 1 with the source's code, rootScriptId the source's root", body = ScriptOut, headers(("Location" = String))),
        (status = 400, description = "An override that names no parameter or does not fit its type, a duplicate name, a source that no longer compiles, Idempotency-Key missing", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchScript,
        (status = 409, description = "The source is deleted, or the key in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn clone_script(call: RequiredKeyWrite<PathId>, body: JsonBody<CloneIn>) -> ApiResult<Response> {
    let (id, value) = (call.path.0, body.value);
    let clone = CloneRequest {
        name: text("name", value.name, scripts::NAME_MAX)?,
        description: optional_text("description", value.description, scripts::DESCRIPTION_MAX)?,
        overrides: overrides("overrides", value.overrides)?,
    };
    let request = call.request(&scripts::CLONE, &body.document).about_what_it_makes();
    write::run(&call.state, request, async |app, w| {
        let s = app.scripts.clone_script(w, id, clone).await?;
        Reply::created(&s, format!("/api/scripts/{}", s.script_id))
    })
    .await
}

/// A dry run.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct DryRunIn {
    /// The version to run (any stored one, a DRAFT's included); default the current one.
    #[schema(value_type = Option<u32>, minimum = 1)]
    pub version: Option<i64>,
    /// Values over the declared defaults (`{key, value, type}`), as a run on demand takes them.
    #[serde(default)]
    pub overrides: Vec<OverrideIn>,
    /// For a script written for an EVENT trigger: the event it reads as `event` (a webhook
    /// event body); absent, `event` is unit.
    #[schema(value_type = Option<Object>)]
    pub event: Option<Value>,
}

/// Run a script now without effect: a dry run (beyond the spec).
///
/// The version (default the current one; a DRAFT runs too, so a script is tried before it is
/// published) runs in the same sandbox and with the same limits as an automation's run, its
/// reads (`balance`, `account`, `operation`, `operations`, `locks`) served live from the
/// organisation as the caller, each needing the caller's own read permission as a run needs
/// its user's. Each `submit` is checked as a run's would be by every rule that needs no store
/// (the caller needs transaction:submit, and transaction:mint for a MINT or BURN; the fields, the
/// asset's code, the amount at its minor unit, the references' form; the contracts, accounts and
/// locks named are not looked up) and captured instead of made: the script gets the
/// request back with `transactionId` `dry-run-N` and `state` DRY_RUN. The current version's
/// imports resolve as a run's do (the versions its publication resolved; a DRAFT's, the
/// imported scripts' current code); an older version's, to the imported scripts' current code.
///
/// Nothing is written: no operation, no execution in any history, no audit record (reads are
/// not audited, and a dry run is a read), no idempotency record (a key sent is ignored). A
/// script that fails is still a 200, with status FAILED and the error a run would record. At
/// most four dry runs run at once per node; more wait for a turn. Needs automation:execute,
/// the permission that runs scripts.
#[utoipa::path(
    post, path = "/api/scripts/{scriptId}/dry-runs", tag = "scripts", operation_id = "scripts.dryRun",
    params(path_params::ScriptId),
    request_body = Option<DryRunIn>,
    responses(
        (status = 200, description = "What the run did: status, the parameters' values, the bodies it would have submitted, its log and its error", body = DryRunOut),
        (status = 400, description = "scriptId not a UUID; version not a positive integer; an override's key blank or its value or type missing; event not an object", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such script, or no such version of it", body = crate::openapi::ErrorBody),
        (status = 409, description = "The script is deleted, or a dependency its publication resolved is gone", body = crate::openapi::ErrorBody),
        (status = 422, description = "An override does not fit the version's declared parameters (each reason in details)", body = crate::openapi::ErrorBody),
    )
)]
async fn dry_run_script(
    State(state): State<Arc<ApiState>>,
    scope: TenantScope,
    PathParam(id): PathId,
    body: Option<JsonBody<DryRunIn>>,
) -> ApiResult<Response> {
    let value = JsonBody::or_default(body).value;
    let version = value.version.map(|n| version_number("version", n)).transpose()?;
    if value.event.as_ref().is_some_and(|e| !e.is_object()) {
        return Err(Error::invalid_field("event", "must be an object").into());
    }
    let request = DryRunRequest { version, overrides: overrides("overrides", value.overrides)?, event: value.event };
    let out: DryRunOut = state.app.dry_runs.run(scope.tenant, scope.context.caller, id, request).await?;
    Ok(axum::Json(out).into_response())
}
