//! Roles as read from either backend.

use super::Columns;
use crate::{RoleRecord, StoreResult};

pub const ROLE_COLUMNS: &str = "id, tenant_id, name, description, permissions, created_at, updated_at";

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
