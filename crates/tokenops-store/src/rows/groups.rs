//! Approval groups as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::encode::folded;
use crate::{GroupRecord, StoreResult};
use tokenops_domain::identity::GroupStatus;

/// `key_folded` is written beside the key (`encode::folded`) and carries its uniqueness; a group
/// is read from its other columns.
pub const GROUP_COLUMNS: &str = "id, tenant_id, group_key, key_folded, name, status, created_at, updated_at";

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

impl Encode for GroupRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            (&self.key).into(),
            folded(&self.key).into(),
            (&self.name).into(),
            self.status.as_str().into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
