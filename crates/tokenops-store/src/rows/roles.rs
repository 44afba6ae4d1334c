//! Roles as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::encode::folded;
use crate::{RoleRecord, StoreResult};

/// `name_folded` is written beside the name (`encode::folded`) and carries its uniqueness; a
/// role is read from its other columns.
pub const ROLE_COLUMNS: &str = "id, tenant_id, name, name_folded, description, permissions, created_at, updated_at";

/// The platform roles (NULL tenant) are in the table too, but never written through the store.
pub const ROLES: Table = Table { name: "roles", columns: ROLE_COLUMNS, key: "id" };

/// What a role's update replaces: its name (with the folded copy), description, permissions and
/// updated_at.
pub const ROLE_UPDATE_COLUMNS: [&str; 5] = ["name", "name_folded", "description", "permissions", "updated_at"];

pub fn role(row: &impl Columns) -> StoreResult<RoleRecord> {
    Ok(RoleRecord {
        id: row.uuid("id")?,
        tenant_id: row.opt_tenant("tenant_id")?,
        name: row.text("name")?,
        description: row.text("description")?,
        permissions: row.text_list("permissions")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for RoleRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            (&self.name).into(),
            folded(&self.name).into(),
            (&self.description).into(),
            ColumnValue::TextList(Some(self.permissions.clone())),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
