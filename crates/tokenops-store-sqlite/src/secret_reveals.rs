//! One-time reveals of machine-client secrets on SQLite: `SecretRevealStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::rows::SECRET_REVEAL_COLUMNS;
use tokenops_store::{SecretRevealRecord, SecretRevealStore, StoreResult};

#[async_trait]
impl SecretRevealStore for SqliteTx {
    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>> {
        // An expired reveal is deleted too: it can never be used again.
        let sql = format!("DELETE FROM secret_reveals WHERE token_hash = ?1 RETURNING {SECRET_REVEAL_COLUMNS}");
        let Some(reveal): Option<SecretRevealRecord> =
            self.fetch_optional(&sql, params![token_hash], codec::decoded)?
        else {
            return Ok(None);
        };
        Ok((now < reveal.expires_at).then_some(reveal))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM secret_reveals WHERE expires_at < ?1", params![now.as_micros()])?;
        Ok(done as u64)
    }
}
