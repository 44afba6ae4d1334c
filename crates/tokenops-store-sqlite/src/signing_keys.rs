//! The embedded provider's signing keys on SQLite: `SigningKeyStore`.

use crate::codec::{int, opt_ts, text};
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
            |row| {
                Ok(SigningKeyRecord {
                    kid: text(row, "kid")?,
                    sealed_key: text(row, "sealed_key")?,
                    created_at: codec::ts(int(row, "created_at")?),
                    retire_at: opt_ts(row, "retire_at")?,
                })
            },
        )
    }

    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO signing_keys (kid, sealed_key, created_at, retire_at) VALUES (?1, ?2, ?3, ?4)",
            params![&key.kid, &key.sealed_key, key.created_at.as_micros(), key.retire_at.map(Timestamp::as_micros)],
        )?;
        Ok(())
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
