//! Idempotency records on PostgreSQL. The platform scope is the nil UUID in `tenant_id`.

use crate::deferred::Completion;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_store::rows::{self, IDEMPOTENCY_COLUMNS};
use tokenops_store::{IdempotencyRecord, IdempotencyScope, IdempotencyStore, StoreError, StoreResult, StoredResponse};
use uuid::Uuid;

/// The class of the keys' advisory locks: neither the migrations', the roles' nor the replay
/// turns'.
const KEY_LOCK_CLASS: i32 = crate::ADVISORY_LOCK_CLASS + 3;

#[async_trait]
impl IdempotencyStore for PostgresTx {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>> {
        let sql = format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency_records
             WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3"
        );
        let query = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::tenant_key(scope.tenant))
            .bind(&scope.operation)
            .bind(&scope.key);
        self.fetch_optional(query, |row| rows::idempotency_record(&codec::Cols(row), scope)).await
    }

    async fn insert_claim(
        &mut self,
        scope: &IdempotencyScope,
        request_hash: &str,
        token: Uuid,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<()> {
        // ON CONFLICT keeps the transaction usable when the key exists (a unique violation would
        // abort it), so the caller can read the existing record in the same transaction.
        // Every claimant first tries the key's transaction-scoped advisory lock: while another
        // transaction holds it (its request still running), nothing is inserted and the
        // caller's read finds no committed record: the 409 of a key in flight, at once, rather
        // than waiting on the other transaction's uncommitted row until it ends.
        self.insert_new(sqlx::query(
            "INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, lease_until, created_at)
             SELECT $1, $2, $3, $4, 'IN_FLIGHT', $5, $6, $7
             WHERE pg_try_advisory_xact_lock($8, hashtext(concat_ws('/', current_schema(), $1::text, $2, $3)))
             ON CONFLICT DO NOTHING",
        )
        .bind(codec::tenant_key(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(request_hash)
        .bind(token)
        .bind(lease_until.as_micros())
        .bind(now.as_micros())
        .bind(KEY_LOCK_CLASS), "idempotency key").await
    }

    async fn complete(
        &mut self,
        scope: &IdempotencyScope,
        token: Uuid,
        response: &StoredResponse,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let headers = serde_json::to_value(&response.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // Sent with the rows the write held back: the accept path's last statement before COMMIT.
        self.hold_back()?.completion(Completion {
            scope: scope.clone(),
            token,
            status: i32::from(response.status),
            body: response.body.to_string(),
            headers,
            resource_id: response.resource_id.clone(),
            now,
        });
        Ok(self.flush_written().await?.is_some_and(|written| written.completed == 1))
    }

    async fn release(&mut self, scope: &IdempotencyScope, token: Uuid) -> StoreResult<()> {
        self.execute(sqlx::query(
            "DELETE FROM idempotency_records
             WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'IN_FLIGHT' AND lease_token = $4",
        )
        .bind(codec::tenant_key(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(token)).await?;
        Ok(())
    }

    async fn prune(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        self.execute(
            sqlx::query(
                "DELETE FROM idempotency_records
             WHERE (state = 'COMPLETED' AND created_at < $1) OR (state = 'IN_FLIGHT' AND lease_until < $1)",
            )
            .bind(cutoff.as_micros()),
        )
        .await
    }
}
