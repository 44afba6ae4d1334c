//! An organisation's policy templates as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use crate::encode::saturating_int4;
use tokenops_domain::policy::{PolicyAction, TemplateStatus, TenantTemplate};

pub const TEMPLATE_COLUMNS: &str = "tenant_id, template_key, template_version, name, description, action, status, \
     default_content, created_by, created_at, updated_at";

pub const TEMPLATES: Table = Table { name: "policy_templates", columns: TEMPLATE_COLUMNS, key: "template_key" };

pub fn tenant_template(row: &impl Columns) -> StoreResult<TenantTemplate> {
    Ok(TenantTemplate {
        tenant_id: row.tenant("tenant_id")?,
        key: row.text("template_key")?,
        template_version: row.narrow("template_version", "template version")?,
        name: row.text("name")?,
        description: row.text("description")?,
        action: row.parsed("action", "template action", PolicyAction::parse)?,
        status: row.parsed("status", "template status", TemplateStatus::parse)?,
        default_content: row.text("default_content")?,
        created_by: row.text("created_by")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for TenantTemplate {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.tenant_id.into(),
            (&self.key).into(),
            saturating_int4(self.template_version).into(),
            (&self.name).into(),
            (&self.description).into(),
            self.action.as_str().into(),
            self.status.as_str().into(),
            (&self.default_content).into(),
            (&self.created_by).into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
