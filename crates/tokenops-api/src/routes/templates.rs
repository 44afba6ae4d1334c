//! `/api/templates`: the policy templates the organisation sees (SYSTEM first, then its own,
//! each by key; paging style B, or every template in one page with `ignorePaging=true`), and
//! the organisation's own templates created, changed and deprecated.

use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::policies::templates::{self, NewTemplate, SYSTEM_PREFIX, TemplateChange, TemplateOut};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::PolicyAction;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{self, all_fields, optional_text, required, something_to_change, text};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageB, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathParam, PathText, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

const KEY_MAX: usize = 100;
const NAME_MAX: usize = 200;
const DESCRIPTION_MAX: usize = 2000;
// The documented bounds of a key (its pattern's `system.` too), a name and a description.
const _: () = assert!(KEY_MAX == 100 && NAME_MAX == 200 && DESCRIPTION_MAX == 2000);
const _: () = assert!(matches!(SYSTEM_PREFIX.as_bytes(), b"system."));

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_templates, create_template))
        .routes(routes!(get_template, update_template))
        .routes(routes!(deprecate_template))
}

/// A page of policy templates (style B).
pub type TemplatePage = PageB<TemplateOut>;

/// `true` or `false` (absent: `false`).
fn flag(params: &QueryParams, name: &str) -> Result<bool, Error> {
    match params.one(name)? {
        None => Ok(false),
        Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(Error::invalid_field(name, format!("{other:?} must be true or false"))),
    }
}

/// A tenant template key: 1–100 letters, digits, `_`, `-` or `.`, starting with a letter or
/// digit; `system.` starts only the SYSTEM keys.
fn template_key(value: Option<String>) -> Result<String, Error> {
    fields::key("key", value, KEY_MAX)
}

/// A path key that no template can have is simply not found (as for a path reference), and so
/// is one in another spelling than the key's (` k` is not `k`).
fn path_key(text: &str) -> Result<String, Error> {
    template_key(Some(text.to_owned())).ok().filter(|key| key == text).ok_or_else(|| templates::not_found(text))
}

fn action(value: Option<String>) -> Result<PolicyAction, Error> {
    let text = required("action", value)?;
    PolicyAction::parse(&text).ok_or_else(|| {
        let names: Vec<&str> = PolicyAction::ALL.iter().map(|a| a.as_str()).collect();
        Error::invalid_field("action", format!("{text:?} is not a policy action; one of {}", names.join(", ")))
    })
}

/// A default content document: any JSON object (its rules are checked when a policy is made).
fn default_content(value: Option<serde_json::Value>, required: bool) -> Result<Option<serde_json::Value>, Error> {
    match value {
        None if required => Err(Error::invalid_field("defaultContent", "is required")),
        None => Ok(None),
        Some(v) if v.is_object() => Ok(Some(v)),
        Some(_) => Err(Error::invalid_field("defaultContent", "must be a JSON object")),
    }
}

/// List the policy templates the organisation sees (paging style B).
#[utoipa::path(
    get, path = "/api/templates", tag = "policies", operation_id = "templates.list",
    params(
        ("includeDeprecated" = Option<bool>, Query, description = "true shows DEPRECATED templates too; default false"),
        ("ignorePaging" = Option<bool>, Query, description = "true answers every template in one page (page and size are then ignored)"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style B page: SYSTEM templates first, then the organisation's own (TENANT), each by key ascending. The spec does not show page size bounds: this service takes 1 to 100, default 20, and refuses others with 400", body = TemplatePage),
        (status = 400, description = "Invalid paging, or includeDeprecated/ignorePaging not true or false", body = crate::openapi::ErrorBody),
    )
)]
async fn list_templates(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let include_deprecated = flag(&params, "includeDeprecated")?;
    let ignore_paging = flag(&params, "ignorePaging")?;
    let all = call.state.app.templates.list(call.scope.tenant, include_deprecated).await?;
    let total = all.len() as u64;
    let (items, page) = if ignore_paging {
        let size = u32::try_from(all.len()).unwrap_or(u32::MAX).max(1);
        (all, PageRequest { page: 0, size })
    } else {
        let page = paging::page_request(&params, STRICT_SIZE)?;
        let skip = usize::try_from(page.offset()).unwrap_or(usize::MAX);
        (all.into_iter().skip(skip).take(page.size as usize).collect(), page)
    };
    Ok(paging::respond(Style::B, &Page { items, total }, page))
}

/// Read one policy template the organisation sees.
///
/// The spec lists templates but does not show a read of one; this is where a created
/// template's Location points. A deprecated template is still read by its key (it stays in the
/// organisation's scope, listed with includeDeprecated=true); another organisation's is not.
#[utoipa::path(
    get, path = "/api/templates/{key}", tag = "policies", operation_id = "templates.get",
    params(path_params::TemplateKey),
    responses(
        (status = 200, description = "The template: a SYSTEM one, or the organisation's own (TENANT), DEPRECATED ones included", body = TemplateOut),
        crate::openapi::NoSuchTemplate,
    )
)]
async fn get_template(call: TenantCall<PathText>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(key)| app.templates.get(tenant, &path_key(&key)?).await).await
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateIn {
    /// 1 to 100 letters, digits, `_`, `-`, `.`, starting with a letter or digit (white space
    /// around it is trimmed); unique in the organisation; the `system.` keys are the platform's.
    #[schema(
        required = true,
        value_type = String,
        pattern = r"^\s*(?!system\.)[A-Za-z0-9][A-Za-z0-9_.-]{0,99}\s*$"
    )]
    pub key: Option<String>,
    /// 1 to 200 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 200)]
    pub name: Option<String>,
    /// 1 to 2000 characters, not blank; absent is an empty description (the spec does not
    /// require one).
    #[schema(pattern = r"\S", max_length = 2000)]
    pub description: Option<String>,
    /// The policy action policies from this template govern.
    #[schema(required = true, value_type = PolicyAction)]
    pub action: Option<String>,
    /// A suggested rule document (a JSON object), stored as sent and not validated.
    #[schema(required = true, value_type = Object)]
    pub default_content: Option<serde_json::Value>,
}

/// Create one of the organisation's own (TENANT) templates.
#[utoipa::path(
    post, path = "/api/templates", tag = "policies", operation_id = "templates.create",
    params(crate::openapi::OptionalIdempotencyKey),
    request_body = TemplateIn,
    responses(
        (status = 201, description = "Created, ACTIVE, templateVersion 1. defaultContent is not validated against the context catalogue: invalid rules are refused when a policy is created with them", body = TemplateOut, headers(("Location" = String))),
        (status = 400, description = "VALIDATION_FAILED: a field missing, blank or too long (description may be absent), a malformed key, a key starting with system., an unknown action, or defaultContent not an object", body = crate::openapi::ErrorBody),
        (status = 409, description = "The key exists in the organisation, or is a SYSTEM template's; or the Idempotency-Key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_template(call: OptionalKeyWrite, body: JsonBody<TemplateIn>) -> ApiResult<Response> {
    let value = body.value;
    let (template_key, name, description, action, default_content) = all_fields!(
        template_key = template_key(value.key).and_then(|key| {
            let is_system_key = tokenops_domain::policy::system_templates().iter().any(|t| t.key == key);
            if key.starts_with(SYSTEM_PREFIX) && !is_system_key {
                Err(Error::invalid_field("key", format!("the prefix {SYSTEM_PREFIX} is reserved for SYSTEM templates")))
            } else {
                Ok(key)
            }
        }),
        name = text("name", value.name, NAME_MAX),
        description = optional_text("description", value.description, DESCRIPTION_MAX),
        action = action(value.action),
        default_content = default_content(value.default_content, true),
    )?;
    let new = NewTemplate {
        key: template_key,
        name,
        description: description.unwrap_or_default(),
        action,
        default_content: default_content.unwrap_or_default(),
    };
    call.run_about(&templates::CREATE, &body.document, new.key.clone(), async |app, w| {
        let t = app.templates.create(w, new).await?;
        Reply::created(&t, format!("/api/templates/{}", t.key))
    })
    .await
}

/// A change: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct TemplatePatch {
    /// 1 to 200 characters, not blank.
    #[schema(pattern = r"\S", max_length = 200)]
    pub name: Option<String>,
    /// 1 to 2000 characters, not blank.
    #[schema(pattern = r"\S", max_length = 2000)]
    pub description: Option<String>,
    /// A JSON object, stored as sent and not validated.
    #[schema(value_type = Option<Object>)]
    pub default_content: Option<serde_json::Value>,
}

/// Change one of the organisation's own templates.
///
/// The spec names the operation but not its method and path. Changes name, description and/or
/// defaultContent and adds one to templateVersion. Policies created from the template do not
/// change: a policy is a copy. SYSTEM templates belong to the platform and are not in an
/// organisation's scope (404).
#[utoipa::path(
    patch, path = "/api/templates/{key}", tag = "policies", operation_id = "templates.update",
    params(path_params::TemplateKey, crate::openapi::OptionalIdempotencyKey),
    request_body = TemplatePatch,
    responses(
        (status = 200, description = "The template after the change, templateVersion one up", body = TemplateOut),
        (status = 400, description = "VALIDATION_FAILED: nothing to change, a blank or too long field, or defaultContent not an object", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchTemplate,
        crate::openapi::KeyConflicts,
    )
)]
async fn update_template(call: OptionalKeyWrite<PathText>, body: JsonBody<TemplatePatch>) -> ApiResult<Response> {
    let (template_key, value) = (path_key(&call.path.0)?, body.value);
    let (name, description, default_content) = all_fields!(
        name = optional_text("name", value.name, NAME_MAX),
        description = optional_text("description", value.description, DESCRIPTION_MAX),
        default_content = default_content(value.default_content, false),
    )?;
    let change = TemplateChange { name, description, default_content };
    something_to_change(
        &[change.name.is_some(), change.description.is_some(), change.default_content.is_some()],
        "name, description and/or defaultContent",
    )?;
    call.run(&templates::UPDATE, &body.document, async |app, w| {
        Reply::ok(&app.templates.update(w, &template_key, change).await?)
    })
    .await
}

/// Deprecate one of the organisation's own templates.
///
/// The spec names the operation but not its method and path. A DEPRECATED template is hidden
/// from listings unless includeDeprecated=true and no new policy can be created from it (404);
/// policies created from it are unchanged. Deprecating it again changes nothing (200).
#[utoipa::path(
    post, path = "/api/templates/{key}/deprecate", tag = "policies", operation_id = "templates.deprecate",
    params(path_params::TemplateKey, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 200, description = "The template, DEPRECATED", body = TemplateOut),
        crate::openapi::NoSuchTemplate,
        crate::openapi::KeyConflicts,
    )
)]
async fn deprecate_template(call: OptionalKeyWrite<PathText>) -> ApiResult<Response> {
    let template_key = path_key(&call.path.0)?;
    call.run(&templates::DEPRECATE, &serde_json::Value::Null, async |app, w| {
        Reply::ok(&app.templates.deprecate(w, &template_key).await?)
    })
    .await
}
