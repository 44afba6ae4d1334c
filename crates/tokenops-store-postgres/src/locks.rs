//! Locks on PostgreSQL: `LockStore`. Inserts use `ON CONFLICT DO NOTHING` (see `codec::conflict`).

use crate::codec::asset_text;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::Lock;
use tokenops_store::rows::{self, LOCK_COLUMNS};
use tokenops_store::{LockStore, StoreResult};

#[async_trait]
impl LockStore for PostgresTx {
    async fn insert(&mut self, lock: &Lock) -> StoreResult<()> {
        self.insert_new(
            query::insert(&rows::LOCKS)
                .bind(lock.id)
                .bind(lock.tenant_id.as_uuid())
                .bind(lock.account_ref.as_str())
                .bind(lock.counterparty_ref.as_ref().map(AccountRef::as_str))
                .bind(asset_text(lock.asset_id))
                .bind(lock.amount.as_i64())
                .bind(lock.expires_at.map(Timestamp::as_micros))
                .bind(lock.status.as_str())
                .bind(lock.completed_by)
                .bind(lock.created_at.as_micros())
                .bind(lock.updated_at.as_micros()),
            "lock id",
        )
        .await
    }

    async fn update(&mut self, lock: &Lock) -> StoreResult<()> {
        self.execute(
            sqlx::query(
                "UPDATE locks SET status = $1, completed_by = $2, updated_at = $3
             WHERE tenant_id = $4 AND id = $5",
            )
            .bind(lock.status.as_str())
            .bind(lock.completed_by)
            .bind(lock.updated_at.as_micros())
            .bind(lock.tenant_id.as_uuid())
            .bind(lock.id),
        )
        .await?;
        Ok(())
    }

    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Lock>> {
        // The predicate of the partial index `locks_expiring`, spelled as it is there.
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks
             WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL AND expires_at <= $1
             ORDER BY expires_at ASC, id ASC LIMIT $2"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now.as_micros()).bind(i64::from(limit)),
            codec::decoded,
        )
        .await
    }
}
