//! Locks on SQLite: `LockStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_domain::operation::Lock;
use tokenops_store::rows::LOCK_COLUMNS;
use tokenops_store::{LockStore, StoreResult};

#[async_trait]
impl LockStore for SqliteTx {
    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Lock>> {
        // The predicate of the partial index `locks_expiring`, spelled as it is there.
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks
             WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL AND expires_at <= ?1
             ORDER BY expires_at ASC, id ASC LIMIT ?2"
        );
        self.fetch_all(&sql, params![now.as_micros(), i64::from(limit)], codec::decoded)
    }
}
