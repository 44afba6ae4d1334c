//! Custody keys on SQLite: one row per wallet, the key sealed by the keystore before it gets
//! here (this module never sees a plain key).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::Timestamp;
use tokenops_store::rows;
use tokenops_store::{CustodyKeyRecord, CustodyKeyStore, StoreResult};

fn decode(row: &Row<'_>) -> StoreResult<CustodyKeyRecord> {
    rows::custody_key(&codec::Cols(row))
}

#[async_trait]
impl CustodyKeyStore for SqliteTx {
    async fn insert(&mut self, key: &CustodyKeyRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO custody_keys (address, label, sealed_key, status, created_at, disabled_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                &key.address,
                &key.label,
                &key.sealed_key,
                key.status.as_str(),
                key.created_at.as_micros(),
                key.disabled_at.map(Timestamp::as_micros),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, address: &str) -> StoreResult<Option<CustodyKeyRecord>> {
        self.fetch_optional(
            "SELECT address, label, sealed_key, status, created_at, disabled_at FROM custody_keys WHERE address = ?1",
            params![address],
            decode,
        )
    }

    async fn disable(&mut self, address: &str, now: Timestamp) -> StoreResult<bool> {
        self.require_write("disabling a custody key")?;
        let updated = self.execute(
            "UPDATE custody_keys SET status = 'DISABLED', disabled_at = COALESCE(disabled_at, ?2) WHERE address = ?1",
            params![address, now.as_micros()],
        )?;
        Ok(updated > 0)
    }
}
