//! Idempotency records on PostgreSQL. The platform scope is the nil UUID in `tenant_id`.

use crate::deferred::Completion;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use tokenops_domain::Timestamp;
use tokenops_store::rows::{self, IDEMPOTENCY_COLUMNS};
use tokenops_store::{IdempotencyRecord, IdempotencyScope, IdempotencyStore, StoreError, StoreResult, StoredResponse};
use uuid::Uuid;

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
        // Every claimant first tries the key's transaction-scoped advisory lock (a 64-bit hash
        // of schema, organisation, scope and key): while another transaction holds it (its
        // request still running, or taking an expired claim over), nothing is inserted and the
        // claim is `Busy` at once, rather than waiting on the other transaction's uncommitted
        // row until it ends.
        let query = sqlx::query(
            "WITH key_lock AS (
                 SELECT pg_try_advisory_xact_lock(hashtextextended(concat_ws('/', current_schema(), $1::text, $2, $3), 0)) AS held
             ), claimed AS (
                 INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, lease_until, created_at)
                 SELECT $1, $2, $3, $4, 'IN_FLIGHT', $5, $6, $7 FROM key_lock WHERE held
                 ON CONFLICT DO NOTHING
                 RETURNING 1
             )
             SELECT (SELECT held FROM key_lock), (SELECT COUNT(*) FROM claimed)",
        )
        .bind(codec::tenant_key(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(request_hash)
        .bind(token)
        .bind(lease_until.as_micros())
        .bind(now.as_micros());
        let (held, inserted) = self
            .fetch_one(query, |row| {
                let held: bool = row.try_get(0).map_err(codec::backend)?;
                let inserted: i64 = row.try_get(1).map_err(codec::backend)?;
                Ok((held, inserted))
            })
            .await?;
        match (held, inserted) {
            (false, _) => Err(StoreError::Busy("idempotency key held by a running request".into())),
            (true, 0) => Err(codec::conflict("idempotency key")),
            (true, _) => Ok(()),
        }
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
