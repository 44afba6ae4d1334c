//! Organisations as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{StoreResult, TenantRecord};

pub const TENANT_COLUMNS: &str = "id, name, owner_user_id, created_at, updated_at";

pub const TENANTS: Table = Table { name: "tenants", columns: TENANT_COLUMNS, key: "id" };

pub fn tenant(row: &impl Columns) -> StoreResult<TenantRecord> {
    Ok(TenantRecord {
        id: row.tenant("id")?,
        name: row.text("name")?,
        owner_user_id: row.uuid("owner_user_id")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for TenantRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            (&self.name).into(),
            self.owner_user_id.into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
