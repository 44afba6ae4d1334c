//! Machine clients as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{MachineClientRecord, StoreResult};

pub const MACHINE_CLIENT_COLUMNS: &str = "id, tenant_id, name, role_id, secret_hash, active, created_at";

pub const MACHINE_CLIENTS: Table = Table { name: "machine_clients", columns: MACHINE_CLIENT_COLUMNS, key: "id" };

pub fn machine_client(row: &impl Columns) -> StoreResult<MachineClientRecord> {
    Ok(MachineClientRecord {
        id: row.uuid("id")?,
        tenant_id: row.opt_tenant("tenant_id")?,
        name: row.text("name")?,
        role_id: row.opt_uuid("role_id")?,
        secret_hash: row.text("secret_hash")?,
        active: row.bool("active")?,
        created_at: row.timestamp("created_at")?,
    })
}

/// A platform client (no organisation) has a NULL tenant.
impl Encode for MachineClientRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            (&self.name).into(),
            self.role_id.into(),
            (&self.secret_hash).into(),
            self.active.into(),
            self.created_at.into(),
        ])
    }
}
