//! Policy templates: the SYSTEM ones shipped in code merged with the organisation's own
//! (TENANT) ones; creating, changing and deprecating the organisation's. A tenant template's
//! default content is kept as sent, unvalidated: it is only a suggestion, and a policy's content
//! is validated when the policy is created.

use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokenops_domain::policy::{
    PolicyAction, RuleType, SystemTemplate, TemplateScope, TemplateStatus, TenantTemplate, system_templates,
};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{Store, StoreError, Tx};

use crate::error::{AppResult, Code, Error, OrConflict};
use crate::write::{AuditAction, AuditResource, Write};

const TEMPLATE: AuditResource = AuditResource { category: "POLICIES", resource_type: "template" };
pub const CREATE: AuditAction = TEMPLATE.action("template.create");
pub const UPDATE: AuditAction = TEMPLATE.action("template.update");
pub const DEPRECATE: AuditAction = TEMPLATE.action("template.deprecate");

/// The prefix of SYSTEM template keys, reserved for them.
pub const SYSTEM_PREFIX: &str = "system.";

/// A policy template as the API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TemplateOut {
    pub key: String,
    pub scope: TemplateScope,
    /// 1 when created; each change adds one.
    pub template_version: u32,
    pub name: String,
    pub description: String,
    pub action: PolicyAction,
    pub status: TemplateStatus,
    /// A suggested rule document, shown to the caller; never copied into a policy.
    #[schema(value_type = Object)]
    pub default_content: Value,
    /// TENANT templates only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub created_at: Option<Timestamp>,
    /// TENANT templates only.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub updated_at: Option<Timestamp>,
}

impl From<SystemTemplate> for TemplateOut {
    fn from(t: SystemTemplate) -> Self {
        Self {
            key: t.key,
            scope: t.scope,
            template_version: t.template_version,
            name: t.name,
            description: t.description,
            action: t.action,
            status: t.status,
            default_content: t.default_content,
            created_at: None,
            updated_at: None,
        }
    }
}

impl TryFrom<&TenantTemplate> for TemplateOut {
    type Error = Error;

    fn try_from(t: &TenantTemplate) -> AppResult<Self> {
        Ok(Self {
            key: t.key.clone(),
            scope: TemplateScope::Tenant,
            template_version: t.template_version,
            name: t.name.clone(),
            description: t.description.clone(),
            action: t.action,
            status: t.status,
            default_content: stored_json(&t.default_content)?,
            created_at: Some(t.created_at),
            updated_at: Some(t.updated_at),
        })
    }
}

/// A JSON document the store kept as text: one that does not parse is corrupt stored data.
pub(crate) fn stored_json(text: &str) -> AppResult<Value> {
    serde_json::from_str(text).map_err(|e| Error::internal(StoreError::Corrupt(format!("stored JSON: {e}"))))
}

pub(crate) fn json_text(value: &Value) -> String {
    // Serializing a parsed document cannot fail; the map keeps the order it was sent in.
    serde_json::to_string(value).unwrap_or_default()
}

/// What a policy may be created from: a template the organisation sees and may still use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableTemplate {
    pub key: String,
    pub action: PolicyAction,
    pub rule_type: RuleType,
}

fn system(key: &str) -> Option<SystemTemplate> {
    system_templates().into_iter().find(|t| t.key == key)
}

pub fn not_found(key: &str) -> Error {
    Error::not_found(format!("No template with key {key} in scope")).with_code(Code::TemplateNotFound)
}

/// The ACTIVE template with this key the organisation sees (a SYSTEM one or its own), or 404:
/// a deprecated template is hidden, so no new policy starts from it.
pub async fn usable_template(tx: &mut dyn Tx, tenant: TenantId, key: &str) -> AppResult<UsableTemplate> {
    if let Some(t) = system(key) {
        if t.status == TemplateStatus::Active {
            return Ok(UsableTemplate { key: t.key, action: t.action, rule_type: t.rule_type });
        }
        return Err(not_found(key));
    }
    match tx.policy_templates().get(tenant, key).await? {
        Some(t) if t.status == TemplateStatus::Active => {
            Ok(UsableTemplate { key: t.key, action: t.action, rule_type: RuleType::Approval })
        }
        _ => Err(not_found(key)),
    }
}

/// A new tenant template, its shape checked.
#[derive(Debug, Clone)]
pub struct NewTemplate {
    pub key: String,
    pub name: String,
    pub description: String,
    pub action: PolicyAction,
    pub default_content: Value,
}

/// A validated template change; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct TemplateChange {
    pub name: Option<String>,
    pub description: Option<String>,
    pub default_content: Option<Value>,
}

pub struct Templates {
    store: Arc<dyn Store>,
}

impl Templates {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// SYSTEM templates first, then the organisation's, each by key ascending; deprecated ones
    /// only when asked.
    pub async fn list(&self, tenant: TenantId, include_deprecated: bool) -> AppResult<Vec<TemplateOut>> {
        let mut all: Vec<TemplateOut> = system_templates()
            .into_iter()
            .filter(|t| include_deprecated || t.status == TemplateStatus::Active)
            .map(TemplateOut::from)
            .collect();
        let mut tx = self.store.read().await?;
        for t in tx.policy_templates().list(tenant, include_deprecated).await? {
            all.push(TemplateOut::try_from(&t)?);
        }
        Ok(all)
    }

    /// The template with this key the organisation sees: a SYSTEM one or its own, deprecated
    /// ones included (a deprecated template stays in the organisation's scope: it is listed
    /// with includeDeprecated and can still be changed; only new policies cannot start from
    /// it). Another organisation's is not in scope: 404, as for no template at all.
    pub async fn get(&self, tenant: TenantId, key: &str) -> AppResult<TemplateOut> {
        if let Some(t) = system(key) {
            return Ok(TemplateOut::from(t));
        }
        let mut tx = self.store.read().await?;
        let t = tx.policy_templates().get(tenant, key).await?.ok_or_else(|| not_found(key))?;
        TemplateOut::try_from(&t)
    }

    pub async fn create(&self, w: &mut Write, new: NewTemplate) -> AppResult<TemplateOut> {
        let tenant = w.tenant()?;
        let now = w.now();
        let exists = || Error::conflict(format!("Template key {} exists", new.key)).with_code(Code::TemplateKeyExists);
        if system(&new.key).is_some() {
            return Err(exists());
        }
        let record = TenantTemplate {
            tenant_id: tenant,
            key: new.key.clone(),
            template_version: 1,
            name: new.name.clone(),
            description: new.description.clone(),
            action: new.action,
            status: TemplateStatus::Active,
            default_content: json_text(&new.default_content),
            created_by: w.context().caller.subject.clone(),
            created_at: now,
            updated_at: now,
        };
        w.tx().policy_templates().insert(&record).await.or_conflict(exists)?;
        let out = TemplateOut::try_from(&record)?;
        w.set_resource_id(record.key.clone());
        w.set_audit_detail(serde_json::json!({ "after": out }));
        Ok(out)
    }

    /// Changes name, description or default content of the organisation's own template, one
    /// template version up. A SYSTEM template is not in the organisation's scope: 404.
    pub async fn update(&self, w: &mut Write, key: &str, change: TemplateChange) -> AppResult<TemplateOut> {
        let tenant = w.tenant()?;
        let mut t = w.tx().policy_templates().get_for_update(tenant, key).await?.ok_or_else(|| not_found(key))?;
        let before = TemplateOut::try_from(&t)?;
        if let Some(name) = change.name {
            t.name = name;
        }
        if let Some(description) = change.description {
            t.description = description;
        }
        if let Some(content) = change.default_content {
            t.default_content = json_text(&content);
        }
        t.template_version += 1;
        t.updated_at = w.now();
        w.tx().policy_templates().update(&t).await?;
        let after = TemplateOut::try_from(&t)?;
        w.set_audit_detail(serde_json::json!({ "before": before, "after": after }));
        Ok(after)
    }

    /// Deprecates the organisation's own template: hidden from listings unless asked for, and
    /// no new policy starts from it; policies created from it are unchanged. Deprecating a
    /// deprecated template changes nothing.
    pub async fn deprecate(&self, w: &mut Write, key: &str) -> AppResult<TemplateOut> {
        let tenant = w.tenant()?;
        let mut t = w.tx().policy_templates().get_for_update(tenant, key).await?.ok_or_else(|| not_found(key))?;
        if t.status != TemplateStatus::Deprecated {
            t.status = TemplateStatus::Deprecated;
            t.updated_at = w.now();
            w.tx().policy_templates().update(&t).await?;
        }
        let after = TemplateOut::try_from(&t)?;
        w.set_audit_detail(serde_json::json!({ "after": after }));
        Ok(after)
    }
}
