//! Idempotency records on PostgreSQL. The platform scope is the nil UUID in `tenant_id`.

use crate::deferred::Completion;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::Timestamp;
use tokenops_store::{
    IdempotencyRecord, IdempotencyScope, IdempotencyState, IdempotencyStore, StoreError, StoreResult, StoredResponse,
};
use uuid::Uuid;

#[async_trait]
impl IdempotencyStore for PostgresTx {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>> {
        self.fetch_optional(sqlx::query(
            "SELECT request_hash, state, lease_token, lease_until, response_status, response_body, response_headers, resource_id, created_at
             FROM idempotency_records WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3",
        )
        .bind(codec::tenant_key(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key), |row| {
        let state: String = codec::get(row, "state")?;
        let state = match state.as_str() {
            "IN_FLIGHT" => IdempotencyState::InFlight {
                token: codec::get::<Option<Uuid>>(row, "lease_token")?
                    .ok_or_else(|| StoreError::Corrupt("in-flight idempotency record without token".into()))?,
                lease_until: codec::ts(codec::get::<Option<i64>>(row, "lease_until")?.unwrap_or(0)),
            },
            "COMPLETED" => {
                let status: i32 = codec::get::<Option<i32>>(row, "response_status")?.unwrap_or(500);
                // Text, not jsonb: a replay must return the bytes of the original response, and
                // jsonb would reorder the keys.
                let body: Option<String> = codec::get(row, "response_body")?;
                let headers: Option<serde_json::Value> = codec::get(row, "response_headers")?;
                IdempotencyState::Completed(StoredResponse {
                    status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
                    body: match body {
                        Some(text) => {
                            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("body: {e}")))?
                        }
                        None => serde_json::Value::Null,
                    },
                    headers: match headers {
                        Some(headers) => {
                            serde_json::from_value(headers).map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?
                        }
                        None => Vec::new(),
                    },
                    resource_id: codec::get(row, "resource_id")?,
                })
            }
            other => return Err(StoreError::Corrupt(format!("idempotency state {other:?}"))),
        };
        Ok(IdempotencyRecord {
            scope: scope.clone(),
            request_hash: codec::get(row, "request_hash")?,
            state,
            created_at: codec::ts(codec::get(row, "created_at")?),
        })
}).await
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
        self.insert_new(sqlx::query(
            "INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, lease_until, created_at)
             VALUES ($1, $2, $3, $4, 'IN_FLIGHT', $5, $6, $7)
             ON CONFLICT DO NOTHING",
        )
        .bind(codec::tenant_key(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(request_hash)
        .bind(token)
        .bind(lease_until.as_micros())
        .bind(now.as_micros()), "idempotency key").await
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
