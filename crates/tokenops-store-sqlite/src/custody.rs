//! Custody keys on SQLite: one row per wallet, the key sealed by the keystore before it gets
//! here (this module never sees a plain key).

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::Timestamp;
use tokenops_store::{CustodyKeyRecord, CustodyKeyStatus, CustodyKeyStore, StoreError, StoreResult};

fn decode(row: &SqliteRow) -> StoreResult<CustodyKeyRecord> {
    let status: String = row.try_get("status").map_err(codec::backend)?;
    Ok(CustodyKeyRecord {
        address: row.try_get("address").map_err(codec::backend)?,
        label: row.try_get("label").map_err(codec::backend)?,
        sealed_key: row.try_get("sealed_key").map_err(codec::backend)?,
        status: CustodyKeyStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("custody key status {status:?}")))?,
        created_at: codec::ts(row.try_get("created_at").map_err(codec::backend)?),
        disabled_at: row.try_get::<Option<i64>, _>("disabled_at").map_err(codec::backend)?.map(codec::ts),
    })
}

#[async_trait]
impl CustodyKeyStore for SqliteTx {
    async fn insert(&mut self, key: &CustodyKeyRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO custody_keys (address, label, sealed_key, status, created_at, disabled_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&key.address)
        .bind(&key.label)
        .bind(&key.sealed_key)
        .bind(key.status.as_str())
        .bind(key.created_at.as_micros())
        .bind(key.disabled_at.map(Timestamp::as_micros))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, address: &str) -> StoreResult<Option<CustodyKeyRecord>> {
        let row = sqlx::query(
            "SELECT address, label, sealed_key, status, created_at, disabled_at FROM custody_keys WHERE address = $1",
        )
        .bind(address)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        row.as_ref().map(decode).transpose()
    }

    async fn disable(&mut self, address: &str, now: Timestamp) -> StoreResult<bool> {
        self.require_write("disabling a custody key")?;
        let updated = sqlx::query(
            "UPDATE custody_keys SET status = 'DISABLED', disabled_at = COALESCE(disabled_at, $2) WHERE address = $1",
        )
        .bind(address)
        .bind(now.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(updated.rows_affected() > 0)
    }
}
