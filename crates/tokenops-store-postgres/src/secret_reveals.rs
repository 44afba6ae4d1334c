//! One-time reveals of machine-client secrets on PostgreSQL: `SecretRevealStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_store::rows::SECRET_REVEAL_COLUMNS;
use tokenops_store::{SecretRevealRecord, SecretRevealStore, StoreResult};

#[async_trait]
impl SecretRevealStore for PostgresTx {
    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>> {
        // An expired reveal is deleted too: it can never be used again. Two concurrent takes of
        // one reveal: the second waits for the first's row lock and then deletes nothing.
        let sql = format!("DELETE FROM secret_reveals WHERE token_hash = $1 RETURNING {SECRET_REVEAL_COLUMNS}");
        let reveal: Option<SecretRevealRecord> =
            self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(token_hash), codec::decoded).await?;
        let Some(reveal) = reveal else { return Ok(None) };
        Ok((now < reveal.expires_at).then_some(reveal))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        self.execute(sqlx::query("DELETE FROM secret_reveals WHERE expires_at < $1").bind(now.as_micros())).await
    }
}
