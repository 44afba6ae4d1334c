//! Custody keys as read from either backend.

use super::Columns;
use crate::{CustodyKeyRecord, CustodyKeyStatus, StoreResult};

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
