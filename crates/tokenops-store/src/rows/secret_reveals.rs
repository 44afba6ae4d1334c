//! One-time secret reveals as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{SecretRevealRecord, StoreResult};

pub const SECRET_REVEAL_COLUMNS: &str = "token_hash, client_id, sealed_secret, expires_at, created_at";

pub const SECRET_REVEALS: Table = Table { name: "secret_reveals", columns: SECRET_REVEAL_COLUMNS, key: "token_hash" };

pub fn secret_reveal(row: &impl Columns) -> StoreResult<SecretRevealRecord> {
    Ok(SecretRevealRecord {
        token_hash: row.text("token_hash")?,
        client_id: row.uuid("client_id")?,
        sealed_secret: row.text("sealed_secret")?,
        expires_at: row.timestamp("expires_at")?,
        created_at: row.timestamp("created_at")?,
    })
}

impl Encode for SecretRevealRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            (&self.token_hash).into(),
            self.client_id.into(),
            (&self.sealed_secret).into(),
            self.expires_at.into(),
            self.created_at.into(),
        ])
    }
}
