//! One-time secret reveals as read from either backend.

use super::Columns;
use crate::{SecretRevealRecord, StoreResult};

pub const SECRET_REVEAL_COLUMNS: &str = "token_hash, client_id, sealed_secret, expires_at, created_at";

pub fn secret_reveal(row: &impl Columns) -> StoreResult<SecretRevealRecord> {
    Ok(SecretRevealRecord {
        token_hash: row.text("token_hash")?,
        client_id: row.uuid("client_id")?,
        sealed_secret: row.text("sealed_secret")?,
        expires_at: row.timestamp("expires_at")?,
        created_at: row.timestamp("created_at")?,
    })
}
