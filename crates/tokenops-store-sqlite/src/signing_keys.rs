//! The embedded provider's signing keys on SQLite: `SigningKeyStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::{SigningKeyRecord, SigningKeyStore, StoreResult};

#[async_trait]
impl SigningKeyStore for SqliteTx {
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>> {
        self.fetch_all(
            "SELECT kid, sealed_key, created_at, retire_at FROM signing_keys ORDER BY created_at ASC, kid ASC",
            [],
            codec::decoded,
        )
    }

    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()> {
        self.execute("UPDATE signing_keys SET retire_at = ?1 WHERE kid = ?2", params![retire_at.as_micros(), kid])?;
        Ok(())
    }

    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = self.execute(
            "DELETE FROM signing_keys WHERE retire_at IS NOT NULL AND retire_at < ?1",
            params![cutoff.as_micros()],
        )?;
        Ok(done as u64)
    }
}
