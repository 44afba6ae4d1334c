//! Refresh tokens on SQLite: `RefreshTokenStore`.

use crate::codec::{int, opt_ts, text};
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::{RefreshTokenRecord, RefreshTokenStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl RefreshTokenStore for SqliteTx {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO refresh_tokens (token_hash, user_id, tenant_id, expires_at, revoked_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                &token.token_hash,
                codec::id_text(token.user_id),
                codec::id_text(token.tenant_id.as_uuid()),
                token.expires_at.as_micros(),
                token.revoked_at.map(Timestamp::as_micros),
                token.created_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>> {
        self.fetch_optional(
            "SELECT token_hash, user_id, tenant_id, expires_at, revoked_at, created_at
             FROM refresh_tokens WHERE token_hash = ?1",
            params![token_hash],
            |row| {
                Ok(RefreshTokenRecord {
                    token_hash: text(row, "token_hash")?,
                    user_id: codec::uuid(&text(row, "user_id")?)?,
                    tenant_id: codec::tenant(&text(row, "tenant_id")?)?,
                    expires_at: codec::ts(int(row, "expires_at")?),
                    revoked_at: opt_ts(row, "revoked_at")?,
                    created_at: codec::ts(int(row, "created_at")?),
                })
            },
        )
    }

    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute(
            "UPDATE refresh_tokens SET revoked_at = ?1 WHERE user_id = ?2 AND revoked_at IS NULL",
            params![now.as_micros(), codec::id_text(user_id)],
        )?;
        Ok(done as u64)
    }

    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM refresh_tokens WHERE expires_at < ?1", params![cutoff.as_micros()])?;
        Ok(done as u64)
    }
}
