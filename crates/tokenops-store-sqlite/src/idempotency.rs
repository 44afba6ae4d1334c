//! Idempotency records on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::{
    IdempotencyRecord, IdempotencyScope, IdempotencyState, IdempotencyStore, StoreError, StoreResult, StoredResponse,
};
use uuid::Uuid;

#[async_trait]
impl IdempotencyStore for SqliteTx {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>> {
        self.fetch_optional(
            "SELECT request_hash, state, lease_token, lease_until, response_status, response_body, response_headers, resource_id, created_at
             FROM idempotency_records WHERE tenant_id = ?1 AND operation = ?2 AND idempotency_key = ?3",
            params![codec::tenant_text(scope.tenant), &scope.operation, &scope.key],
            |row| {
                let state: String = codec::get(row, "state")?;
                let state = match state.as_str() {
                    "IN_FLIGHT" => IdempotencyState::InFlight {
                        token: codec::opt_uuid(codec::get(row, "lease_token")?)?
                            .ok_or_else(|| StoreError::Corrupt("in-flight idempotency record without token".into()))?,
                        lease_until: codec::ts(codec::get::<Option<i64>>(row, "lease_until")?.unwrap_or(0)),
                    },
                    "COMPLETED" => {
                        let status: i64 = codec::get::<Option<i64>>(row, "response_status")?.unwrap_or(500);
                        let body: Option<String> = codec::get(row, "response_body")?;
                        let headers: Option<String> = codec::get(row, "response_headers")?;
                        IdempotencyState::Completed(StoredResponse {
                            status: u16::try_from(status)
                                .map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
                            body: codec::json(body.as_deref().unwrap_or("null"))?,
                            headers: serde_json::from_str(headers.as_deref().unwrap_or("[]"))
                                .map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?,
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
            },
        )
    }

    async fn insert_claim(
        &mut self,
        scope: &IdempotencyScope,
        request_hash: &str,
        token: Uuid,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.execute(
            "INSERT INTO idempotency_records (tenant_id, operation, idempotency_key, request_hash, state, lease_token, lease_until, created_at)
             VALUES (?1, ?2, ?3, ?4, 'IN_FLIGHT', ?5, ?6, ?7)",
            params![
                codec::tenant_text(scope.tenant),
                &scope.operation,
                &scope.key,
                request_hash,
                codec::id_text(token),
                lease_until.as_micros(),
                now.as_micros(),
            ],
        )?;
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
        let done = self.execute(
            "UPDATE idempotency_records
             SET state = 'COMPLETED', lease_token = NULL, lease_until = NULL,
                 response_status = ?1, response_body = ?2, response_headers = ?3, completed_at = ?4, resource_id = ?9
             WHERE tenant_id = ?5 AND operation = ?6 AND idempotency_key = ?7 AND state = 'IN_FLIGHT' AND lease_token = ?8",
            params![
                i64::from(response.status),
                codec::json_text(&response.body),
                headers,
                now.as_micros(),
                codec::tenant_text(scope.tenant),
                &scope.operation,
                &scope.key,
                codec::id_text(token),
                response.resource_id.as_deref(),
            ],
        )?;
        Ok(done == 1)
    }

    async fn release(&mut self, scope: &IdempotencyScope, token: Uuid) -> StoreResult<()> {
        self.execute(
            "DELETE FROM idempotency_records
             WHERE tenant_id = ?1 AND operation = ?2 AND idempotency_key = ?3 AND state = 'IN_FLIGHT' AND lease_token = ?4",
            params![codec::tenant_text(scope.tenant), &scope.operation, &scope.key, codec::id_text(token)],
        )?;
        Ok(())
    }

    async fn prune(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = self.execute(
            "DELETE FROM idempotency_records
             WHERE (state = 'COMPLETED' AND created_at < ?1) OR (state = 'IN_FLIGHT' AND lease_until < ?1)",
            params![cutoff.as_micros()],
        )?;
        Ok(u64::try_from(done).unwrap_or(u64::MAX))
    }
}
