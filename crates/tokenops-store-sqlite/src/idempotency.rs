//! Idempotency records on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::Timestamp;
use tokenops_store::rows::{self, IDEMPOTENCY_COLUMNS};
use tokenops_store::{IdempotencyRecord, IdempotencyScope, IdempotencyStore, StoreError, StoreResult, StoredResponse};
use uuid::Uuid;

#[async_trait]
impl IdempotencyStore for SqliteTx {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>> {
        let sql = format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency_records
             WHERE tenant_id = ?1 AND operation = ?2 AND idempotency_key = ?3"
        );
        self.fetch_optional(&sql, params![codec::tenant_text(scope.tenant), &scope.operation, &scope.key], |row| {
            rows::idempotency_record(&codec::Cols(row), scope)
        })
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
