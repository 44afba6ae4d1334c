//! Policies and their versions: create a DRAFT from a visible template with the caller's
//! content (validated for the template's action), activate under the slot rule, archive, add
//! versions and choose the current one; and the read the settlement pipeline evaluates (the
//! ACTIVE policies of an action with their current content). Templates are in `templates`.

pub mod simulation;
pub mod templates;

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::policy::{
    Activation, Policy, PolicyAction, PolicyContent, PolicyFilter, PolicyStatus, PolicyVersion, RuleType, Violation,
};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Store, Tx};
use uuid::Uuid;

use self::templates::{json_text, stored_json, usable_template};
use crate::error::{AppResult, Code, Error, FieldError};
use crate::write::{AuditAction, AuditResource, Write};

const POLICY: AuditResource = AuditResource { category: "POLICIES", resource_type: "policy" };
pub const CREATE: AuditAction = POLICY.action("policy.create");
pub const ACTIVATE: AuditAction = POLICY.action("policy.activate");
pub const ARCHIVE: AuditAction = POLICY.action("policy.archive");
pub const CREATE_VERSION: AuditAction = POLICY.action("policy.version.create");
pub const UPDATE: AuditAction = POLICY.action("policy.update");
pub const SET_CURRENT_VERSION: AuditAction = POLICY.action("policy.current_version.set");

/// A policy as the API returns it, with its current version's content.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyOut {
    pub id: Uuid,
    pub status: PolicyStatus,
    pub rule_type: RuleType,
    pub action: PolicyAction,
    pub template_key: String,
    /// The current version's number.
    pub version: u32,
    pub name: Option<String>,
    pub description: Option<String>,
    /// The caller that created it (a user id, or a machine client's subject).
    pub created_by: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
    /// The current version's content, as it was sent.
    #[schema(value_type = Object)]
    pub content: Value,
}

impl PolicyOut {
    fn new(p: &Policy, current: &PolicyVersion) -> AppResult<Self> {
        Ok(Self {
            id: p.id,
            status: p.status,
            rule_type: p.rule_type,
            action: p.action,
            template_key: p.template_key.clone(),
            version: p.version,
            name: p.name.clone(),
            description: p.description.clone(),
            created_by: p.created_by.clone(),
            created_at: p.created_at,
            updated_at: p.updated_at,
            content: stored_json(&current.content)?,
        })
    }
}

/// A policy version as the API returns it; versions never change.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VersionOut {
    pub id: Uuid,
    pub policy_id: Uuid,
    pub version_number: u32,
    #[schema(value_type = Object)]
    pub content: Value,
    pub change_summary: Option<String>,
    pub created_by: String,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
}

impl TryFrom<&PolicyVersion> for VersionOut {
    type Error = Error;

    fn try_from(v: &PolicyVersion) -> AppResult<Self> {
        Ok(Self {
            id: v.id,
            policy_id: v.policy_id,
            version_number: v.version_number,
            content: stored_json(&v.content)?,
            change_summary: v.change_summary.clone(),
            created_by: v.created_by.clone(),
            created_at: v.created_at,
        })
    }
}

/// A new policy as the caller sends it; its content is validated here, for the template's action.
#[derive(Debug, Clone)]
pub struct NewPolicy {
    pub template_key: String,
    pub content: Value,
    pub name: Option<String>,
    pub description: Option<String>,
    pub change_summary: Option<String>,
}

/// A change of a policy's labels; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct PolicyChange {
    pub name: Option<String>,
    pub description: Option<String>,
}

/// An ACTIVE policy with its current content, validated: what the pipeline evaluates.
#[derive(Debug, Clone)]
pub struct ActivePolicy {
    pub policy: Policy,
    pub content: PolicyContent,
}

/// The organisation's ACTIVE policies governing `action`, each with its current content
/// validated again (stored content that no longer validates is an internal error, never a
/// silent skip): what the settlement pipeline evaluates, in the caller's transaction.
pub async fn active_for_action(
    tx: &mut dyn Tx,
    tenant: TenantId,
    action: PolicyAction,
) -> AppResult<Vec<ActivePolicy>> {
    let mut active = Vec::new();
    for (policy, version) in tx.policies().active_for_action(tenant, action).await? {
        let document = stored_json(&version.content)?;
        let content = PolicyContent::validate(&document, action).map_err(|v| {
            Error::internal(format!(
                "policy {} version {}: stored content is invalid: {v:?}",
                policy.id, version.version_number
            ))
        })?;
        active.push(ActivePolicy { policy, content });
    }
    Ok(active)
}

fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Policy {id} not found")).with_code(Code::PolicyNotFound)
}

fn archived(id: Uuid, what: &str) -> Error {
    Error::conflict(format!("Policy {id} is archived: {what}")).with_code(Code::PolicyArchived)
}

/// 400 VALIDATION_FAILED naming every violation, each under `content`.
fn invalid_content(violations: Vec<Violation>) -> Error {
    let details: Vec<FieldError> = violations
        .into_iter()
        .map(|v| v.under("content"))
        .map(|v| FieldError { field: v.field, message: v.message })
        .collect();
    Error::bad_request(format!("Policy content is invalid ({} problem(s); see details)", details.len()))
        .with_details(details)
}

fn validated(content: &Value, action: PolicyAction) -> AppResult<PolicyContent> {
    PolicyContent::validate(content, action).map_err(invalid_content)
}

/// A policy's current version; its absence is corrupt stored data (every policy has one).
async fn current_version(tx: &mut dyn Tx, p: &Policy) -> AppResult<PolicyVersion> {
    tx.policies()
        .get_version(p.tenant_id, p.id, p.version)
        .await?
        .ok_or_else(|| Error::internal(format!("policy {} has no version {}, its current one", p.id, p.version)))
}

pub struct Policies {
    store: Arc<dyn Store>,
}

impl Policies {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Newest first.
    pub async fn list(&self, tenant: TenantId, filter: PolicyFilter, page: PageRequest) -> AppResult<Page<PolicyOut>> {
        let mut tx = self.store.read().await?;
        let found = tx.policies().list(tenant, filter, page).await?;
        let items = found.items.iter().map(|(p, v)| PolicyOut::new(p, v)).collect::<AppResult<Vec<_>>>()?;
        Ok(Page { items, total: found.total })
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<PolicyOut> {
        let mut tx = self.store.read().await?;
        let policy = tx.policies().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let current = current_version(&mut *tx, &policy).await?;
        PolicyOut::new(&policy, &current)
    }

    /// Newest first; 404 for a policy not in the organisation.
    pub async fn list_versions(&self, tenant: TenantId, id: Uuid, page: PageRequest) -> AppResult<Page<VersionOut>> {
        let mut tx = self.store.read().await?;
        tx.policies().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let found = tx.policies().list_versions(tenant, id, page).await?;
        let items = found.items.iter().map(VersionOut::try_from).collect::<AppResult<Vec<_>>>()?;
        Ok(Page { items, total: found.total })
    }

    /// The organisation's ACTIVE policies governing `action` (see [`active_for_action`]).
    pub async fn active_for_action(
        &self,
        tx: &mut dyn Tx,
        tenant: TenantId,
        action: PolicyAction,
    ) -> AppResult<Vec<ActivePolicy>> {
        active_for_action(tx, tenant, action).await
    }

    /// A DRAFT at version 1 holding the caller's content, from a visible ACTIVE template
    /// (404 otherwise); the content is validated for the template's action (400).
    pub async fn create(&self, w: &mut Write, new: NewPolicy) -> AppResult<PolicyOut> {
        let tenant = w.tenant()?;
        let template = usable_template(w.tx(), tenant, &new.template_key).await?;
        validated(&new.content, template.action)?;
        let now = w.now();
        let created_by = w.context().caller.subject.clone();
        let policy = Policy {
            id: new_id(),
            tenant_id: tenant,
            status: PolicyStatus::INITIAL,
            rule_type: template.rule_type,
            action: template.action,
            template_key: template.key,
            version: 1,
            name: new.name,
            description: new.description,
            created_by: created_by.clone(),
            created_at: now,
            updated_at: now,
        };
        let first = PolicyVersion {
            id: new_id(),
            tenant_id: tenant,
            policy_id: policy.id,
            version_number: 1,
            content: json_text(&new.content),
            change_summary: new.change_summary,
            created_by,
            created_at: now,
        };
        w.tx().policies().insert(&policy, &first).await?;
        let out = PolicyOut::new(&policy, &first)?;
        w.set_resource_id(policy.id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": out }));
        Ok(out)
    }

    /// DRAFT → ACTIVE when no other non-archived policy holds its slot (409); ACTIVE stays
    /// unchanged; ARCHIVED is refused (409).
    pub async fn activate(&self, w: &mut Write, id: Uuid) -> AppResult<PolicyOut> {
        let tenant = w.tenant()?;
        // The slot's fields never change, so an unlocked read finds the slot; its rows are then
        // locked in id order, the only lock an activation takes, so activations and archivals
        // of one slot never wait on each other in a circle. This policy is among the rows
        // unless it is ARCHIVED, a status it never leaves (archived a moment ago, perhaps).
        let slot = w.tx().policies().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let holders = w.tx().policies().lock_slot(tenant, slot.rule_type, slot.action, &slot.template_key).await?;
        let Some(mut policy) = holders.iter().find(|p| p.id == id).cloned() else {
            return Err(archived(id, "it cannot be activated again"));
        };
        match policy.status.activation() {
            Activation::Refused => return Err(archived(id, "it cannot be activated again")),
            Activation::AlreadyActive => {}
            Activation::Activate => {
                if let Some(other) = holders.iter().find(|p| p.id != id) {
                    return Err(Error::conflict(format!(
                        "Policy {} ({}) holds the slot of ruleType {}, action {}, templateKey {}; archive it first",
                        other.id, other.status, policy.rule_type, policy.action, policy.template_key
                    ))
                    .with_code(Code::PolicySlotTaken)
                    .with_extra("conflictingPolicyId", other.id.to_string()));
                }
                policy.status = PolicyStatus::Active;
                policy.updated_at = w.now();
                w.tx().policies().update(&policy).await?;
            }
        }
        let current = current_version(w.tx(), &policy).await?;
        let out = PolicyOut::new(&policy, &current)?;
        w.set_audit_detail(serde_json::json!({ "status": out.status }));
        Ok(out)
    }

    /// Any status → ARCHIVED (an archived policy stays as it is); frees the slot, keeps the
    /// versions.
    pub async fn archive(&self, w: &mut Write, id: Uuid) -> AppResult<PolicyOut> {
        let tenant = w.tenant()?;
        let mut policy = w.tx().policies().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let before = policy.status;
        if policy.status != policy.status.archived() {
            policy.status = policy.status.archived();
            policy.updated_at = w.now();
            w.tx().policies().update(&policy).await?;
        }
        let current = current_version(w.tx(), &policy).await?;
        let out = PolicyOut::new(&policy, &current)?;
        w.set_audit_detail(serde_json::json!({ "before": before, "status": out.status }));
        Ok(out)
    }

    /// Changes the name and/or description of a policy that is not archived (409: an archived
    /// policy is kept as it was when it stopped governing); status, versions and content stay.
    pub async fn update(&self, w: &mut Write, id: Uuid, change: PolicyChange) -> AppResult<PolicyOut> {
        let tenant = w.tenant()?;
        let mut policy = w.tx().policies().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if !policy.status.accepts_versions() {
            return Err(archived(id, "it is kept as it was"));
        }
        let current = current_version(w.tx(), &policy).await?;
        let before = PolicyOut::new(&policy, &current)?;
        if let Some(name) = change.name {
            policy.name = Some(name);
        }
        if let Some(description) = change.description {
            policy.description = Some(description);
        }
        policy.updated_at = w.now();
        w.tx().policies().update(&policy).await?;
        let after = PolicyOut::new(&policy, &current)?;
        w.set_audit_detail(serde_json::json!({
            "before": { "name": before.name, "description": before.description },
            "after": { "name": after.name, "description": after.description },
        }));
        Ok(after)
    }

    /// A new version, numbered after the highest; the current version does not change.
    pub async fn add_version(
        &self,
        w: &mut Write,
        id: Uuid,
        change_summary: Option<String>,
        content: Value,
    ) -> AppResult<VersionOut> {
        let tenant = w.tenant()?;
        let policy = w.tx().policies().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if !policy.status.accepts_versions() {
            return Err(archived(id, "its versions are frozen"));
        }
        validated(&content, policy.action)?;
        let number = w.tx().policies().latest_version_number(tenant, id).await? + 1;
        let version = PolicyVersion {
            id: new_id(),
            tenant_id: tenant,
            policy_id: id,
            version_number: number,
            content: json_text(&content),
            change_summary,
            created_by: w.context().caller.subject.clone(),
            created_at: w.now(),
        };
        w.tx().policies().insert_version(&version).await?;
        let out = VersionOut::try_from(&version)?;
        w.set_audit_detail(serde_json::json!({ "versionNumber": number, "versionId": version.id }));
        Ok(out)
    }

    /// Serves an existing version (an earlier number rolls back); 404 for a missing number.
    pub async fn set_current_version(&self, w: &mut Write, id: Uuid, number: u32) -> AppResult<PolicyOut> {
        let tenant = w.tenant()?;
        let mut policy = w.tx().policies().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let version = w.tx().policies().get_version(tenant, id, number).await?.ok_or_else(|| {
            Error::not_found(format!("Policy {id} has no version {number}")).with_code(Code::PolicyVersionNotFound)
        })?;
        if !policy.status.accepts_versions() {
            return Err(archived(id, "its current version cannot change"));
        }
        let before = policy.version;
        if policy.version != number {
            policy.version = number;
            policy.updated_at = w.now();
            w.tx().policies().update(&policy).await?;
        }
        let out = PolicyOut::new(&policy, &version)?;
        w.set_audit_detail(serde_json::json!({ "before": before, "versionNumber": number }));
        Ok(out)
    }
}
