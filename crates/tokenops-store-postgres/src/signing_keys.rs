//! The embedded provider's signing keys on PostgreSQL: `SigningKeyStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_store::{SigningKeyRecord, SigningKeyStore, StoreResult};

#[async_trait]
impl SigningKeyStore for PostgresTx {
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>> {
        self.fetch_all(
            sqlx::query(
                "SELECT kid, sealed_key, created_at, retire_at FROM signing_keys ORDER BY created_at ASC, kid ASC",
            ),
            codec::decoded,
        )
        .await
    }

    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()> {
        self.execute(
            sqlx::query("UPDATE signing_keys SET retire_at = $1 WHERE kid = $2").bind(retire_at.as_micros()).bind(kid),
        )
        .await?;
        Ok(())
    }

    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        self.execute(
            sqlx::query("DELETE FROM signing_keys WHERE retire_at IS NOT NULL AND retire_at < $1")
                .bind(cutoff.as_micros()),
        )
        .await
    }
}
