//! Sign-in challenge sessions on SQLite: `ChallengeStore`.

use crate::codec::{int, text};
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::{ChallengeRecord, ChallengeStore, StoreResult};

#[async_trait]
impl ChallengeStore for SqliteTx {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO challenges (session_hash, user_id, expires_at) VALUES (?1, ?2, ?3)",
            params![&challenge.session_hash, codec::id_text(challenge.user_id), challenge.expires_at.as_micros()],
        )?;
        Ok(())
    }

    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>> {
        // An expired challenge is deleted too: it can never be used again.
        let challenge = self.fetch_optional(
            "DELETE FROM challenges WHERE session_hash = ?1 RETURNING session_hash, user_id, expires_at",
            params![session_hash],
            |row| {
                Ok(ChallengeRecord {
                    session_hash: text(row, "session_hash")?,
                    user_id: codec::uuid(&text(row, "user_id")?)?,
                    expires_at: codec::ts(int(row, "expires_at")?),
                })
            },
        )?;
        let Some(challenge) = challenge else { return Ok(None) };
        Ok((now < challenge.expires_at).then_some(challenge))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM challenges WHERE expires_at < ?1", params![now.as_micros()])?;
        Ok(done as u64)
    }
}
