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
            |row| {
                Ok(SigningKeyRecord {
                    kid: codec::get(row, "kid")?,
                    sealed_key: codec::get(row, "sealed_key")?,
                    created_at: codec::ts(codec::get(row, "created_at")?),
                    retire_at: codec::opt_ts(codec::get(row, "retire_at")?),
                })
            },
        )
        .await
    }

    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        self.insert_new(
            sqlx::query(
                "INSERT INTO signing_keys (kid, sealed_key, created_at, retire_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
            )
            .bind(&key.kid)
            .bind(&key.sealed_key)
            .bind(key.created_at.as_micros())
            .bind(key.retire_at.map(Timestamp::as_micros)),
            "signing key id",
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
