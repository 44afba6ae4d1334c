//! Organisations as read from either backend.

use super::Columns;
use crate::{StoreResult, TenantRecord};

pub fn tenant(row: &impl Columns) -> StoreResult<TenantRecord> {
    Ok(TenantRecord {
        id: row.tenant("id")?,
        name: row.text("name")?,
        owner_user_id: row.uuid("owner_user_id")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}
