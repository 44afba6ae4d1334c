//! Policies and their versions as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use crate::encode::saturating_int4;
use tokenops_domain::policy::{Policy, PolicyAction, PolicyStatus, PolicyVersion, RuleType};

pub const POLICY_COLUMNS: &str = "id, tenant_id, status, rule_type, action, template_key, version, name, description, created_by, created_at, updated_at";
pub const POLICY_VERSION_COLUMNS: &str =
    "id, tenant_id, policy_id, version_number, content, change_summary, created_by, created_at";

pub const POLICIES: Table = Table { name: "policies", columns: POLICY_COLUMNS, key: "id" };
pub const POLICY_VERSIONS: Table = Table { name: "policy_versions", columns: POLICY_VERSION_COLUMNS, key: "id" };

/// Joins each policy `p` with its current version `v`.
pub const CURRENT_POLICY_VERSION: &str =
    "JOIN policy_versions v ON v.policy_id = p.id AND v.version_number = p.version";

/// The policy columns of a join with `policies p`, then the version columns of
/// `policy_versions v` prefixed `v_`, as `policy_with_version` reads them.
pub fn policy_with_version_columns() -> String {
    let p = POLICY_COLUMNS.split(", ").map(|c| format!("p.{c} AS {c}"));
    let v = POLICY_VERSION_COLUMNS.split(", ").map(|c| format!("v.{c} AS v_{c}"));
    p.chain(v).collect::<Vec<_>>().join(", ")
}

pub fn policy(row: &impl Columns) -> StoreResult<Policy> {
    Ok(Policy {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        status: row.parsed("status", "policy status", PolicyStatus::parse)?,
        rule_type: row.parsed("rule_type", "policy rule type", RuleType::parse)?,
        action: row.parsed("action", "policy action", PolicyAction::parse)?,
        template_key: row.text("template_key")?,
        version: row.narrow("version", "version")?,
        name: row.opt_text("name")?,
        description: row.opt_text("description")?,
        created_by: row.text("created_by")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

pub fn policy_version(row: &impl Columns) -> StoreResult<PolicyVersion> {
    version_prefixed(row, "")
}

/// A policy joined with one of its versions, whose columns are selected with the prefix `v_`.
pub fn policy_with_version(row: &impl Columns) -> StoreResult<(Policy, PolicyVersion)> {
    Ok((policy(row)?, version_prefixed(row, "v_")?))
}

fn version_prefixed(row: &impl Columns, prefix: &str) -> StoreResult<PolicyVersion> {
    let col = |name: &str| format!("{prefix}{name}");
    Ok(PolicyVersion {
        id: row.uuid(&col("id"))?,
        tenant_id: row.tenant(&col("tenant_id"))?,
        policy_id: row.uuid(&col("policy_id"))?,
        version_number: row.narrow(&col("version_number"), &col("version_number"))?,
        content: row.text(&col("content"))?,
        change_summary: row.opt_text(&col("change_summary"))?,
        created_by: row.text(&col("created_by"))?,
        created_at: row.timestamp(&col("created_at"))?,
    })
}

impl Encode for Policy {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.status.as_str().into(),
            self.rule_type.as_str().into(),
            self.action.as_str().into(),
            (&self.template_key).into(),
            saturating_int4(self.version).into(),
            self.name.as_ref().into(),
            self.description.as_ref().into(),
            (&self.created_by).into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}

impl Encode for PolicyVersion {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.policy_id.into(),
            saturating_int4(self.version_number).into(),
            (&self.content).into(),
            self.change_summary.as_ref().into(),
            (&self.created_by).into(),
            self.created_at.into(),
        ])
    }
}
