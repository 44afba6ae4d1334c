//! Custody keys as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{CustodyKeyRecord, CustodyKeyStatus, StoreResult};

pub const CUSTODY_KEY_COLUMNS: &str = "address, label, sealed_key, status, created_at, disabled_at";

pub const CUSTODY_KEYS: Table = Table { name: "custody_keys", columns: CUSTODY_KEY_COLUMNS, key: "address" };

pub fn custody_key(row: &impl Columns) -> StoreResult<CustodyKeyRecord> {
    Ok(CustodyKeyRecord {
        address: row.text("address")?,
        label: row.text("label")?,
        sealed_key: row.text("sealed_key")?,
        status: row.parsed("status", "custody key status", CustodyKeyStatus::parse)?,
        created_at: row.timestamp("created_at")?,
        disabled_at: row.opt_timestamp("disabled_at")?,
    })
}

impl Encode for CustodyKeyRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            (&self.address).into(),
            (&self.label).into(),
            (&self.sealed_key).into(),
            self.status.as_str().into(),
            self.created_at.into(),
            self.disabled_at.into(),
        ])
    }
}
