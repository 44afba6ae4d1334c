//! Sign-in challenge sessions on PostgreSQL: `ChallengeStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_store::{ChallengeRecord, ChallengeStore, StoreResult};

#[async_trait]
impl ChallengeStore for PostgresTx {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()> {
        self.insert_new(
            sqlx::query(
                "INSERT INTO challenges (session_hash, user_id, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            )
            .bind(&challenge.session_hash)
            .bind(challenge.user_id)
            .bind(challenge.expires_at.as_micros()),
            "challenge session",
        )
        .await
    }

    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>> {
        // An expired challenge is deleted too: it can never be used again. Two concurrent takes
        // of one session: the second waits for the first's row lock and then deletes nothing.
        let query =
            sqlx::query("DELETE FROM challenges WHERE session_hash = $1 RETURNING session_hash, user_id, expires_at")
                .bind(session_hash);
        let challenge = self
            .fetch_optional(query, |row| {
                Ok(ChallengeRecord {
                    session_hash: codec::get(row, "session_hash")?,
                    user_id: codec::get(row, "user_id")?,
                    expires_at: codec::ts(codec::get(row, "expires_at")?),
                })
            })
            .await?;
        let Some(challenge) = challenge else { return Ok(None) };
        Ok((now < challenge.expires_at).then_some(challenge))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        self.execute(sqlx::query("DELETE FROM challenges WHERE expires_at < $1").bind(now.as_micros())).await
    }
}
