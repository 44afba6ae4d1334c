//! Custody keys on PostgreSQL: one row per wallet, the key sealed by the keystore before it
//! gets here (this module never sees a plain key).

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::Timestamp;
use tokenops_store::rows;
use tokenops_store::rows::CUSTODY_KEY_COLUMNS;
use tokenops_store::{CustodyKeyRecord, CustodyKeyStore, StoreResult};

fn decode(row: &PgRow) -> StoreResult<CustodyKeyRecord> {
    rows::custody_key(&codec::Cols(row))
}

#[async_trait]
impl CustodyKeyStore for PostgresTx {
    async fn get(&mut self, address: &str) -> StoreResult<Option<CustodyKeyRecord>> {
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {CUSTODY_KEY_COLUMNS} FROM custody_keys WHERE address = $1"
            )))
            .bind(address),
            decode,
        )
        .await
    }

    async fn disable(&mut self, address: &str, now: Timestamp) -> StoreResult<bool> {
        let updated = self.execute(sqlx::query(
            "UPDATE custody_keys SET status = 'DISABLED', disabled_at = COALESCE(disabled_at, $2) WHERE address = $1",
        )
        .bind(address)
        .bind(now.as_micros())).await?;
        Ok(updated > 0)
    }
}
