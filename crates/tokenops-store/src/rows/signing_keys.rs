//! The embedded provider's signing keys as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{SigningKeyRecord, StoreResult};

/// Not an organisation's: read whole, in order, and written by `kid`.
pub const SIGNING_KEYS: Table =
    Table { name: "signing_keys", columns: "kid, sealed_key, created_at, retire_at", key: "kid" };

pub fn signing_key(row: &impl Columns) -> StoreResult<SigningKeyRecord> {
    Ok(SigningKeyRecord {
        kid: row.text("kid")?,
        sealed_key: row.text("sealed_key")?,
        created_at: row.timestamp("created_at")?,
        retire_at: row.opt_timestamp("retire_at")?,
    })
}

impl Encode for SigningKeyRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![(&self.kid).into(), (&self.sealed_key).into(), self.created_at.into(), self.retire_at.into()])
    }
}
