//! Custody keys on SQLite: one row per wallet, the key sealed by the keystore before it gets
//! here (this module never sees a plain key).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::Timestamp;
use tokenops_store::rows;
use tokenops_store::rows::CUSTODY_KEY_COLUMNS;
use tokenops_store::{CustodyKeyRecord, CustodyKeyStore, StoreResult};

fn decode(row: &Row<'_>) -> StoreResult<CustodyKeyRecord> {
    rows::custody_key(&codec::Cols(row))
}

#[async_trait]
impl CustodyKeyStore for SqliteTx {
    async fn get(&mut self, address: &str) -> StoreResult<Option<CustodyKeyRecord>> {
        self.fetch_optional(
            &format!("SELECT {CUSTODY_KEY_COLUMNS} FROM custody_keys WHERE address = ?1"),
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
