//! Scripts: create (compiled, parameters extracted, imports checked), change (name,
//! description, code, status under the domain's machine), delete, download and clone; and the
//! sources a script imports, for compiling and for runs. The status machine is
//! `tokenops_domain::script`; the Rhai sandbox is `tokenops_scripting`. Dry runs are
//! `dry_run`.

pub mod dry_run;

use serde::Serialize;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::script::{
    ResolvedDependency, Script, ScriptFilter, ScriptRefusal, ScriptStatus, check_code_change, check_delete,
    check_status_change,
};
use tokenops_domain::{TenantId, Timestamp, new_id};
pub use tokenops_scripting::Override;
use tokenops_scripting::{Compiled, Compiler, ParamDecl, ParamKind, ParamValue, ScriptError};
use tokenops_store::{Store, Tx};
use uuid::Uuid;

use crate::error::{AppResult, Code, Error, FieldError, OrConflict};
use crate::write::{AuditAction, AuditResource, Write};

const SCRIPT: AuditResource = AuditResource { category: "SCRIPTS", resource_type: "script" };
pub const CREATE: AuditAction = SCRIPT.action("script.create");
pub const UPDATE: AuditAction = SCRIPT.action("script.update");
pub const DELETE: AuditAction = SCRIPT.action("script.delete");
pub const CLONE: AuditAction = SCRIPT.action("script.clone");

pub const NAME_MAX: usize = 100;
pub const DESCRIPTION_MAX: usize = 1_000;
/// Source text of one script, in bytes.
pub const SOURCE_MAX: usize = 256 * 1024;

/// A declared parameter as the API shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ParameterOut {
    pub name: String,
    /// STRING, INTEGER, DECIMAL or BOOLEAN.
    #[serde(rename = "type")]
    pub kind: String,
    /// The default value (a DECIMAL as a string); absent when the parameter is required.
    #[schema(schema_with = default_schema)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    pub required: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// A parameter value as JSON carries it: a string (STRING, and DECIMAL so that no digit is lost),
/// a number (INTEGER) or a boolean; never an object, an array or null. `description` is the
/// field's: a `schema_with` schema does not take the doc comment.
pub fn scalar_value_schema(description: &str) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, SchemaType, Type};
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Number, Type::Boolean]))
        .description(Some(description))
        .build()
}

fn default_schema() -> utoipa::openapi::schema::Object {
    scalar_value_schema("The default value (a DECIMAL as a string); absent when the parameter is required.")
}

/// A script as the API returns it (its code through `GET /api/scripts/{id}/download`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScriptOut {
    pub script_id: Uuid,
    pub name: String,
    pub description: Option<String>,
    /// DRAFT, PUBLISHED, OUTDATED, DEPRECATED or DELETED.
    pub status: String,
    /// The code's version: 1 at creation, one more at each change of code.
    pub version: u32,
    pub parameters: Vec<ParameterOut>,
    /// The scripts its code imports, by name.
    pub imports: Vec<String>,
    /// The imports as resolved at its last publication (empty before).
    #[schema(value_type = Vec<Object>)]
    pub dependencies: Vec<ResolvedDependency>,
    pub root_script_id: Uuid,
    pub cloned_from: Option<Uuid>,
    pub created_by: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub published_at: Option<Timestamp>,
}

impl ScriptOut {
    pub fn new(s: &Script) -> AppResult<Self> {
        let parameters = declarations(&s.parameters)?
            .into_iter()
            .map(|d| ParameterOut {
                name: d.name.clone(),
                kind: d.kind.as_str().to_owned(),
                default: d.default.as_ref().map(ParamValue::to_json),
                required: d.required(),
                description: d.description.clone(),
            })
            .collect();
        Ok(Self {
            script_id: s.id,
            name: s.name.clone(),
            description: s.description.clone(),
            status: s.status.as_str().to_owned(),
            version: s.version,
            parameters,
            imports: s.imports.clone(),
            dependencies: s.dependencies.clone(),
            root_script_id: s.root_script_id,
            cloned_from: s.cloned_from,
            created_by: s.created_by.clone(),
            created_at: s.created_at,
            updated_at: s.updated_at,
            published_at: s.published_at,
        })
    }
}

/// A new script as the caller sends it.
#[derive(Debug, Clone)]
pub struct NewScript {
    pub name: String,
    pub description: Option<String>,
    pub source: String,
}

/// A PATCH: at least one field. `description: Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct ScriptChange {
    pub name: Option<String>,
    pub description: Option<Option<String>>,
    pub source: Option<String>,
    pub status: Option<ScriptStatus>,
}

/// A clone: a new name, and new defaults for some of the source's parameters.
#[derive(Debug, Clone)]
pub struct CloneRequest {
    pub name: String,
    pub description: Option<String>,
    pub overrides: Vec<Override>,
}

/// The stored declarations of a script, as `ParamDecl`s.
pub fn declarations(stored: &Value) -> AppResult<Vec<ParamDecl>> {
    let corrupt = |what: &str| Error::internal(format!("stored script parameters: {what}"));
    let items = stored.as_array().ok_or_else(|| corrupt("not an array"))?;
    items
        .iter()
        .map(|item| {
            let name = item["name"].as_str().ok_or_else(|| corrupt("a parameter without a name"))?.to_owned();
            let kind = item["type"].as_str().and_then(ParamKind::parse).ok_or_else(|| corrupt("an unknown type"))?;
            let default = match item.get("default") {
                None | Some(Value::Null) => None,
                Some(value) => Some(value_of(kind, value).ok_or_else(|| corrupt("a default of another type"))?),
            };
            let description = item["description"].as_str().map(str::to_owned);
            Ok(ParamDecl { name, kind, default, description })
        })
        .collect()
}

/// `value` (as `ParamValue::to_json` wrote it) read back as a value of `kind`.
fn value_of(kind: ParamKind, value: &Value) -> Option<ParamValue> {
    match kind {
        ParamKind::String => value.as_str().map(|s| ParamValue::String(s.to_owned())),
        ParamKind::Integer => value.as_i64().map(ParamValue::Integer),
        ParamKind::Decimal => value.as_str().map(|s| ParamValue::Decimal(s.to_owned())),
        ParamKind::Boolean => value.as_bool().map(ParamValue::Boolean),
    }
}

/// The declarations as the store keeps them.
pub fn stored_declarations(decls: &[ParamDecl]) -> Value {
    Value::Array(
        decls
            .iter()
            .map(|d| {
                json!({
                    "name": d.name,
                    "type": d.kind.as_str(),
                    "default": d.default.as_ref().map(ParamValue::to_json),
                    "description": d.description,
                })
            })
            .collect(),
    )
}

/// The names `source` imports (`import "name"`), in order of appearance, each once. The compiler
/// checks them for good; this only says which sources to load for it.
pub fn imported_names(source: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("import") {
        rest = &rest[at + "import".len()..];
        let after = rest.trim_start();
        if let Some(quoted) = after.strip_prefix('"')
            && let Some(end) = quoted.find('"')
        {
            let name = &quoted[..end];
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
    }
    names
}

/// The current sources of the scripts `source` imports, directly or not, by name: what the
/// compiler resolves imports against (a missing one it reports itself).
pub(crate) async fn import_sources(
    tx: &mut dyn Tx,
    tenant: TenantId,
    source: &str,
) -> AppResult<HashMap<String, String>> {
    let mut sources = HashMap::new();
    let mut queue: VecDeque<String> = imported_names(source).into();
    while let Some(name) = queue.pop_front() {
        if sources.contains_key(&name) {
            continue;
        }
        if let Some(script) = tx.scripts().by_name(tenant, &name).await? {
            queue.extend(imported_names(&script.source));
            sources.insert(name, script.source);
        }
    }
    Ok(sources)
}

/// 400 with the compiler's message and position in `details` (field `source`).
fn compile_failure(error: ScriptError) -> Error {
    let position = match (error.line, error.column) {
        (Some(line), Some(column)) => format!(" at line {line}, column {column}"),
        _ => String::new(),
    };
    Error::bad_request(format!("The script does not compile{position}: {}", error.message))
        .with_details(vec![FieldError { field: "source".into(), message: error.to_string() }])
        .with_extra("line", error.line.map(|l| l as u64))
        .with_extra("column", error.column.map(|c| c as u64))
}

fn refused(refusal: ScriptRefusal) -> Error {
    match refusal {
        ScriptRefusal::Invalid(message) => Error::invalid_field("status", message),
        ScriptRefusal::Conflict(message) => Error::conflict(message).with_code(Code::ScriptStateConflict),
    }
}

pub(crate) fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Script {id} not found")).with_code(Code::ScriptNotFound)
}

fn duplicate_name(name: &str) -> Error {
    Error::invalid_field("name", format!("a script named {name:?} exists")).with_code(Code::ScriptNameExists)
}

/// A name: 1 to `NAME_MAX` characters of letters, digits, `-`, `_` and `.` (it is what other
/// scripts import).
pub fn check_name(name: &str) -> AppResult<()> {
    let ok = !name.is_empty()
        && name.chars().count() <= NAME_MAX
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !ok {
        return Err(Error::invalid_field(
            "name",
            format!("must be 1 to {NAME_MAX} characters of letters, digits, '-', '_' and '.'"),
        ));
    }
    Ok(())
}

pub fn check_description(description: Option<&str>) -> AppResult<()> {
    if description.is_some_and(|d| d.trim().is_empty() || d.chars().count() > DESCRIPTION_MAX) {
        return Err(Error::invalid_field(
            "description",
            format!("must be 1 to {DESCRIPTION_MAX} characters, not blank"),
        ));
    }
    Ok(())
}

fn check_source(source: &str) -> AppResult<()> {
    if source.trim().is_empty() || source.len() > SOURCE_MAX {
        return Err(Error::invalid_field("source", format!("must be 1 to {SOURCE_MAX} bytes of code, not blank")));
    }
    Ok(())
}

pub struct Scripts {
    store: Arc<dyn Store>,
    compiler: Arc<Compiler>,
}

impl Scripts {
    pub fn new(store: Arc<dyn Store>, compiler: Arc<Compiler>) -> Self {
        Self { store, compiler }
    }

    /// Compiles `source` as the script `name` against its imports' current sources.
    async fn compile(&self, tx: &mut dyn Tx, tenant: TenantId, name: &str, source: &str) -> AppResult<Compiled> {
        let sources = import_sources(tx, tenant, source).await?;
        self.compiler.compile(name, source, &sources).map_err(compile_failure)
    }

    pub async fn list(
        &self,
        tenant: TenantId,
        filter: &ScriptFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<ScriptOut>> {
        let mut tx = self.store.read().await?;
        let found = tx.scripts().list(tenant, filter, sort, page).await?;
        let items = found.items.iter().map(ScriptOut::new).collect::<AppResult<Vec<_>>>()?;
        Ok(Page { items, total: found.total })
    }

    /// 404 for an unknown or deleted script.
    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<ScriptOut> {
        let mut tx = self.store.read().await?;
        let script = tx.scripts().get(tenant, id).await?.filter(|s| s.status != ScriptStatus::Deleted);
        ScriptOut::new(&script.ok_or_else(|| not_found(id))?)
    }

    /// The script's name and code; 409 for a deleted script, 404 for an unknown one.
    pub async fn download(&self, tenant: TenantId, id: Uuid) -> AppResult<(String, String)> {
        let mut tx = self.store.read().await?;
        let script = tx.scripts().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if script.status == ScriptStatus::Deleted {
            return Err(Error::conflict(format!("Script {id} is deleted")).with_code(Code::ScriptStateConflict));
        }
        Ok((script.name, script.source))
    }

    /// A DRAFT at version 1: compiled (400 with the compiler's message and position), its
    /// name free (400), every import existing (400).
    pub async fn create(&self, w: &mut Write, new: NewScript) -> AppResult<ScriptOut> {
        let tenant = w.tenant()?;
        check_name(&new.name)?;
        check_description(new.description.as_deref())?;
        check_source(&new.source)?;
        w.tx().scripts().take_scripts_turn(tenant).await?;
        if w.tx().scripts().by_name(tenant, &new.name).await?.is_some() {
            return Err(duplicate_name(&new.name));
        }
        let compiled = self.compile(w.tx(), tenant, &new.name, &new.source).await?;
        let now = w.now();
        let id = new_id();
        let script = Script {
            id,
            tenant_id: tenant,
            name: new.name,
            description: new.description,
            status: ScriptStatus::Draft,
            version: 1,
            source: new.source,
            parameters: stored_declarations(&compiled.params),
            imports: compiled.imports,
            dependencies: Vec::new(),
            root_script_id: id,
            cloned_from: None,
            created_by: w.context().caller.subject.clone(),
            created_at: now,
            updated_at: now,
            published_at: None,
        };
        self.insert(w, &script).await
    }

    async fn insert(&self, w: &mut Write, script: &Script) -> AppResult<ScriptOut> {
        w.tx().scripts().insert(script).await.or_conflict(|| duplicate_name(&script.name))?;
        w.tx().scripts().insert_version(&script.current_version()).await?;
        let out = ScriptOut::new(script)?;
        w.set_resource_id(script.id.to_string());
        w.set_audit_detail(json!({ "after": out }));
        Ok(out)
    }

    /// A PATCH: 400 without a field, for an invalid name, description or status, a taken name,
    /// or code that does not compile; 409 for the machine's conflicts (code for an OUTDATED or
    /// DEPRECATED script, unpublishing under dependants, publishing with an unpublished import,
    /// renaming a script others import).
    pub async fn update(&self, w: &mut Write, id: Uuid, change: ScriptChange) -> AppResult<ScriptOut> {
        let tenant = w.tenant()?;
        if change.name.is_none() && change.description.is_none() && change.source.is_none() && change.status.is_none() {
            return Err(Error::nothing_to_change("give name, description, source or status"));
        }
        if let Some(name) = &change.name {
            check_name(name)?;
        }
        if let Some(description) = &change.description {
            check_description(description.as_deref())?;
        }
        if let Some(source) = &change.source {
            check_source(source)?;
        }
        if let Some(status) = change.status
            && !ScriptStatus::REQUESTABLE.contains(&status)
        {
            return Err(refused(ScriptRefusal::Invalid(format!(
                "status {} cannot be requested; one of DRAFT, PUBLISHED, DEPRECATED",
                status.as_str()
            ))));
        }
        w.tx().scripts().take_scripts_turn(tenant).await?;
        let mut script = w.tx().scripts().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if script.status == ScriptStatus::Deleted {
            return Err(not_found(id));
        }
        let before = ScriptOut::new(&script)?;
        let now = w.now();
        let importers = w.tx().scripts().importers(tenant, &script.name).await?;
        if let Some(name) = change.name.filter(|n| *n != script.name) {
            if !importers.is_empty() {
                return Err(Error::conflict(format!(
                    "{} script(s) import {:?}: it cannot be renamed",
                    importers.len(),
                    script.name
                ))
                .with_code(Code::ScriptStateConflict));
            }
            if w.tx().scripts().by_name(tenant, &name).await?.is_some() {
                return Err(duplicate_name(&name));
            }
            script.name = name;
        }
        if let Some(description) = change.description {
            script.description = description;
        }
        let mut new_code = false;
        // Code sent for an OUTDATED or DEPRECATED script is refused even when it is the code the
        // script has: the spec's rule is about sending code, not about changing it.
        if change.source.is_some() {
            check_code_change(script.status).map_err(refused)?;
        }
        if let Some(source) = change.source.filter(|s| *s != script.source) {
            let compiled = self.compile(w.tx(), tenant, &script.name, &source).await?;
            script.source = source;
            script.parameters = stored_declarations(&compiled.params);
            script.imports = compiled.imports;
            script.version += 1;
            new_code = true;
        }
        if let Some(status) = change.status {
            let published_dependants = importers.iter().filter(|s| s.status.is_published()).count();
            check_status_change(script.status, status, published_dependants).map_err(refused)?;
            if status == ScriptStatus::Draft && script.status != ScriptStatus::Draft {
                // A DRAFT's code changes without publication: an automation must not run it.
                let active = w.tx().automations().count_active_for_script(tenant, id).await?;
                if active > 0 {
                    return Err(Error::conflict(format!(
                        "{active} ACTIVE automation(s) run script {id}: set them INACTIVE before unpublishing it"
                    ))
                    .with_code(Code::ScriptStateConflict));
                }
            }
            if status == ScriptStatus::Published {
                script.dependencies = self.resolve(w.tx(), tenant, &script).await?;
                script.published_at = Some(now);
            }
            script.status = status;
        } else if new_code && script.status == ScriptStatus::Published {
            // New code of a published script is published with its imports as they are now.
            script.dependencies = self.resolve(w.tx(), tenant, &script).await?;
            script.published_at = Some(now);
        }
        script.updated_at = now;
        w.tx().scripts().update(&script).await.or_conflict(|| duplicate_name(&script.name))?;
        if new_code {
            w.tx().scripts().insert_version(&script.current_version()).await?;
            if script.status == ScriptStatus::Published {
                outdate_dependants(w, &script, &importers).await?;
            }
        }
        let out = ScriptOut::new(&script)?;
        w.set_resource_id(script.id.to_string());
        w.set_audit_detail(json!({ "before": before, "after": out }));
        Ok(out)
    }

    /// Each import resolved to its script's current version; 409 when one is not published.
    async fn resolve(&self, tx: &mut dyn Tx, tenant: TenantId, script: &Script) -> AppResult<Vec<ResolvedDependency>> {
        let mut resolved = Vec::with_capacity(script.imports.len());
        for name in &script.imports {
            let dependency = tx.scripts().by_name(tenant, name).await?;
            match dependency {
                Some(d) if d.status.is_published() => {
                    resolved.push(ResolvedDependency { name: name.clone(), script_id: d.id, version: d.version })
                }
                Some(d) => {
                    return Err(Error::conflict(format!(
                        "the imported script {name:?} is {}: publish it first",
                        d.status.as_str()
                    ))
                    .with_code(Code::ScriptStateConflict));
                }
                None => {
                    return Err(Error::conflict(format!("the imported script {name:?} no longer exists"))
                        .with_code(Code::ScriptStateConflict));
                }
            }
        }
        Ok(resolved)
    }

    /// 409 while the script is PUBLISHED, run by an ACTIVE automation, or imported.
    pub async fn delete(&self, w: &mut Write, id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        w.tx().scripts().take_scripts_turn(tenant).await?;
        let mut script = w.tx().scripts().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if script.status == ScriptStatus::Deleted {
            return Err(not_found(id));
        }
        let active = w.tx().automations().count_active_for_script(tenant, id).await?;
        let importers = w.tx().scripts().importers(tenant, &script.name).await?;
        check_delete(script.status, usize::try_from(active).unwrap_or(usize::MAX), importers.len()).map_err(refused)?;
        let before = ScriptOut::new(&script)?;
        script.status = ScriptStatus::Deleted;
        script.updated_at = w.now();
        w.tx().scripts().update(&script).await?;
        w.set_resource_id(id.to_string());
        w.set_audit_detail(json!({ "before": before }));
        Ok(())
    }

    /// A DRAFT copy of the script's code under a new name, with new defaults for the
    /// parameters the overrides name: 400 for an override that does not fit a declaration, a
    /// taken name, or a source that no longer compiles (an import gone); 409 for a deleted
    /// source; 404 for an unknown one.
    pub async fn clone_script(&self, w: &mut Write, id: Uuid, request: CloneRequest) -> AppResult<ScriptOut> {
        let tenant = w.tenant()?;
        check_name(&request.name)?;
        check_description(request.description.as_deref())?;
        w.tx().scripts().take_scripts_turn(tenant).await?;
        let source = w.tx().scripts().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if source.status == ScriptStatus::Deleted {
            return Err(Error::conflict(format!("Script {id} is deleted")).with_code(Code::ScriptStateConflict));
        }
        if w.tx().scripts().by_name(tenant, &request.name).await?.is_some() {
            return Err(duplicate_name(&request.name));
        }
        let compiled = self.compile(w.tx(), tenant, &request.name, &source.source).await?;
        let mut decls = declarations(&source.parameters)?;
        let defaults = new_defaults(&decls, &request.overrides)?;
        for decl in &mut decls {
            if let Some(value) = defaults.get(&decl.name) {
                decl.default = Some(value.clone());
            }
        }
        let now = w.now();
        let script = Script {
            id: new_id(),
            tenant_id: tenant,
            name: request.name,
            description: request.description.or(source.description.clone()),
            status: ScriptStatus::Draft,
            version: 1,
            source: source.source.clone(),
            parameters: stored_declarations(&decls),
            imports: compiled.imports,
            dependencies: Vec::new(),
            root_script_id: source.root_script_id,
            cloned_from: Some(source.id),
            created_by: w.context().caller.subject.clone(),
            created_at: now,
            updated_at: now,
            published_at: None,
        };
        self.insert(w, &script).await
    }
}

/// Marks OUTDATED the published scripts that resolved an older version of `script`.
async fn outdate_dependants(w: &mut Write, script: &Script, importers: &[Script]) -> AppResult<()> {
    for importer in importers.iter().filter(|s| s.status == ScriptStatus::Published) {
        let stale = importer.dependencies.iter().any(|d| d.script_id == script.id && d.version < script.version);
        if stale {
            let mut outdated = importer.clone();
            outdated.status = ScriptStatus::Outdated;
            outdated.updated_at = w.now();
            w.tx().scripts().update(&outdated).await?;
        }
    }
    Ok(())
}

/// The error for values that do not fit a script's declarations (`fit`'s problems), one
/// detail per problem under `field`; `make` gives the status (400 on save, 422 for a run).
pub fn not_fitting(make: fn(String) -> Error, field: &str, problems: Vec<String>) -> Error {
    let message = format!("The {field} do not fit the script's parameters ({} problem(s))", problems.len());
    make(message)
        .with_details(problems.into_iter().map(|message| FieldError { field: field.into(), message }).collect())
}

/// The overrides of a clone as new defaults: each must name a declared parameter and fit its
/// type (400 naming each that does not).
fn new_defaults(decls: &[ParamDecl], overrides: &[Override]) -> AppResult<BTreeMap<String, ParamValue>> {
    // A required parameter need not be overridden here: give every one a stand-in default so
    // that only the overrides' own problems are reported.
    let stand_ins: Vec<ParamDecl> = decls
        .iter()
        .map(|d| ParamDecl {
            default: d.default.clone().or_else(|| {
                Some(match d.kind {
                    ParamKind::String => ParamValue::String(String::new()),
                    ParamKind::Integer => ParamValue::Integer(0),
                    ParamKind::Decimal => ParamValue::Decimal("0".into()),
                    ParamKind::Boolean => ParamValue::Boolean(false),
                })
            }),
            ..d.clone()
        })
        .collect();
    let fitted = tokenops_scripting::params::fit(&stand_ins, overrides)
        .map_err(|problems| not_fitting(Error::bad_request, "overrides", problems))?;
    Ok(fitted.into_iter().filter(|(name, _)| overrides.iter().any(|o| o.key == *name)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imported_names_are_read_in_order_once() {
        let source = "import \"lib\" as l;\nimport  \"fx.rates\" as r; import \"lib\" as again;\nlet x = \"import\";";
        assert_eq!(imported_names(source), ["lib", "fx.rates"]);
    }

    #[test]
    fn names_are_what_an_import_can_spell() {
        assert!(check_name("treasury.sweep-v2_1").is_ok());
        for bad in ["", "has space", "quote\"", &"x".repeat(NAME_MAX + 1)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn declarations_round_trip_through_the_store_form() {
        let decls = vec![
            ParamDecl {
                name: "target".into(),
                kind: ParamKind::Decimal,
                default: Some(ParamValue::Decimal("10.5".into())),
                description: Some("floor".into()),
            },
            ParamDecl { name: "account".into(), kind: ParamKind::String, default: None, description: None },
            ParamDecl {
                name: "dry".into(),
                kind: ParamKind::Boolean,
                default: Some(ParamValue::Boolean(true)),
                description: None,
            },
            ParamDecl {
                name: "n".into(),
                kind: ParamKind::Integer,
                default: Some(ParamValue::Integer(-3)),
                description: None,
            },
        ];
        assert_eq!(declarations(&stored_declarations(&decls)).expect("reads back"), decls);
    }
}
