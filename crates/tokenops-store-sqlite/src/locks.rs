//! Locks on SQLite: `LockStore`.

use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::Lock;
use tokenops_store::rows::{self, LOCK_COLUMNS};
use tokenops_store::{LockStore, StoreResult};

#[async_trait]
impl LockStore for SqliteTx {
    async fn insert(&mut self, lock: &Lock) -> StoreResult<()> {
        self.insert_row(
            &rows::LOCKS,
            params![
                codec::id_text(lock.id),
                codec::id_text(lock.tenant_id.as_uuid()),
                lock.account_ref.as_str(),
                lock.counterparty_ref.as_ref().map(AccountRef::as_str),
                asset_text(lock.asset_id),
                lock.amount.as_i64(),
                lock.expires_at.map(Timestamp::as_micros),
                lock.status.as_str(),
                lock.completed_by.map(codec::id_text),
                lock.created_at.as_micros(),
                lock.updated_at.as_micros(),
            ],
        )
    }

    async fn update(&mut self, lock: &Lock) -> StoreResult<()> {
        self.execute(
            "UPDATE locks SET status = ?1, completed_by = ?2, updated_at = ?3
             WHERE tenant_id = ?4 AND id = ?5",
            params![
                lock.status.as_str(),
                lock.completed_by.map(codec::id_text),
                lock.updated_at.as_micros(),
                codec::id_text(lock.tenant_id.as_uuid()),
                codec::id_text(lock.id),
            ],
        )?;
        Ok(())
    }

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
