//! Approval groups as read from either backend.

use super::{Columns, Table};
use crate::{GroupRecord, StoreResult};
use tokenops_domain::identity::GroupStatus;

pub const GROUP_COLUMNS: &str = "id, tenant_id, group_key, name, status, created_at, updated_at";

pub const GROUPS: Table = Table { name: "approval_groups", columns: GROUP_COLUMNS, key: "id" };

/// The groups found by key, compared case-insensitively through the folded copy
/// (`encode::folded`) that carries the uniqueness.
pub const GROUPS_BY_KEY: Table = Table { key: "key_folded", ..GROUPS };

pub fn group(row: &impl Columns) -> StoreResult<GroupRecord> {
    Ok(GroupRecord {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        key: row.text("group_key")?,
        name: row.text("name")?,
        status: row.parsed("status", "group status", GroupStatus::parse)?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}
