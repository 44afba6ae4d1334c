//! Idempotency records on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use tokenops_domain::Timestamp;
use tokenops_store::{
    IdempotencyRecord, IdempotencyScope, IdempotencyState, IdempotencyStore, StoreError, StoreResult, StoredResponse,
};
use uuid::Uuid;

#[async_trait]
impl IdempotencyStore for SqliteTx {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>> {
        let row = sqlx::query(
            "SELECT request_hash, state, lease_token, lease_until, response_status, response_body, response_headers, created_at
             FROM idempotency_records WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3",
        )
        .bind(codec::tenant_text(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        let state: String = row.try_get("state").map_err(codec::backend)?;
        let state = match state.as_str() {
            "IN_FLIGHT" => IdempotencyState::InFlight {
                token: codec::opt_uuid(row.try_get("lease_token").map_err(codec::backend)?)?
                    .ok_or_else(|| StoreError::Corrupt("in-flight idempotency record without token".into()))?,
                lease_until: codec::ts(
                    row.try_get::<Option<i64>, _>("lease_until").map_err(codec::backend)?.unwrap_or(0),
                ),
            },
            "COMPLETED" => {
                let status: i64 =
                    row.try_get::<Option<i64>, _>("response_status").map_err(codec::backend)?.unwrap_or(500);
                let body: Option<String> = row.try_get("response_body").map_err(codec::backend)?;
                let headers: Option<String> = row.try_get("response_headers").map_err(codec::backend)?;
                IdempotencyState::Completed(StoredResponse {
                    status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
                    body: codec::json(body.as_deref().unwrap_or("null"))?,
                    headers: serde_json::from_str(headers.as_deref().unwrap_or("[]"))
                        .map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?,
                })
            }
            other => return Err(StoreError::Corrupt(format!("idempotency state {other:?}"))),
        };
        Ok(Some(IdempotencyRecord {
            scope: scope.clone(),
            request_hash: row.try_get("request_hash").map_err(codec::backend)?,
            state,
            created_at: codec::ts(row.try_get("created_at").map_err(codec::backend)?),
        }))
    }

    async fn insert_claim(
        &mut self,
        scope: &IdempotencyScope,
        request_hash: &str,
        token: Uuid,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, lease_until, created_at)
             VALUES ($1, $2, $3, $4, 'IN_FLIGHT', $5, $6, $7)",
        )
        .bind(codec::tenant_text(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(request_hash)
        .bind(codec::id_text(token))
        .bind(lease_until.as_micros())
        .bind(now.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn complete(
        &mut self,
        scope: &IdempotencyScope,
        token: Uuid,
        response: &StoredResponse,
        now: Timestamp,
    ) -> StoreResult<bool> {
        let headers = serde_json::to_string(&response.headers).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let done = sqlx::query(
            "UPDATE idempotency_records
             SET state = 'COMPLETED', lease_token = NULL, lease_until = NULL,
                 response_status = $1, response_body = $2, response_headers = $3, completed_at = $4
             WHERE tenant_id = $5 AND operation = $6 AND idempotency_key = $7 AND state = 'IN_FLIGHT' AND lease_token = $8",
        )
        .bind(i64::from(response.status))
        .bind(codec::json_text(&response.body))
        .bind(headers)
        .bind(now.as_micros())
        .bind(codec::tenant_text(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(codec::id_text(token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn release(&mut self, scope: &IdempotencyScope, token: Uuid) -> StoreResult<()> {
        sqlx::query(
            "DELETE FROM idempotency_records
             WHERE tenant_id = $1 AND operation = $2 AND idempotency_key = $3 AND state = 'IN_FLIGHT' AND lease_token = $4",
        )
        .bind(codec::tenant_text(scope.tenant))
        .bind(&scope.operation)
        .bind(&scope.key)
        .bind(codec::id_text(token))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn prune(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query(
            "DELETE FROM idempotency_records
             WHERE (state = 'COMPLETED' AND created_at < $1) OR (state = 'IN_FLIGHT' AND lease_until < $1)",
        )
        .bind(cutoff.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}
