//! Policies and their versions as read from and written to either backend.

use super::{Columns, Prefixed, SaturatingInt};
use crate::StoreResult;
use tokenops_domain::policy::{Policy, PolicyVersion};

stored_table! {
    columns POLICY_COLUMNS of "policies";
    table POLICIES by id;
    decode policy -> Policy, encode;
    {
        id, tenant_id, status, rule_type, action, template_key,
        version: SaturatingInt,
        name, description, created_by, created_at, updated_at,
    }
}

stored_table! {
    columns POLICY_VERSION_COLUMNS of "policy_versions";
    table POLICY_VERSIONS by id;
    decode policy_version -> PolicyVersion, encode;
    {
        id, tenant_id, policy_id,
        version_number: SaturatingInt,
        content, change_summary, created_by, created_at,
    }
}

/// Joins each policy `p` with its current version `v`.
pub const CURRENT_POLICY_VERSION: &str =
    "JOIN policy_versions v ON v.policy_id = p.id AND v.version_number = p.version";

/// The version columns' prefix in a join of a policy with one of its versions.
const VERSION_PREFIX: &str = "v_";

/// The policy columns of a join with `policies p`, then the version columns of
/// `policy_versions v` prefixed, as `policy_with_version` reads them.
pub fn policy_with_version_columns() -> String {
    let p = POLICY_COLUMNS.split(", ").map(|c| format!("p.{c} AS {c}"));
    let v = POLICY_VERSION_COLUMNS.split(", ").map(|c| format!("v.{c} AS {VERSION_PREFIX}{c}"));
    p.chain(v).collect::<Vec<_>>().join(", ")
}

/// A policy joined with one of its versions, whose columns are selected with the prefix.
pub fn policy_with_version(row: &impl Columns) -> StoreResult<(Policy, PolicyVersion)> {
    Ok((policy(row)?, policy_version(&Prefixed { row, prefix: VERSION_PREFIX })?))
}
