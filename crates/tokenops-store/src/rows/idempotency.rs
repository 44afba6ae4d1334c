//! Idempotency records as read from either backend.

use super::Columns;
use crate::{IdempotencyRecord, IdempotencyScope, IdempotencyState, StoreError, StoreResult, StoredResponse};
use tokenops_domain::Timestamp;

/// What a record's read selects; its scope is the caller's, the key it was looked up by.
pub const IDEMPOTENCY_COLUMNS: &str = "request_hash, state, lease_token, lease_until, response_status, response_body, response_headers, resource_id, created_at";

pub fn idempotency_record(row: &impl Columns, scope: &IdempotencyScope) -> StoreResult<IdempotencyRecord> {
    let state = match row.text("state")?.as_str() {
        "IN_FLIGHT" => IdempotencyState::InFlight {
            token: row
                .opt_uuid("lease_token")?
                .ok_or_else(|| StoreError::Corrupt("in-flight idempotency record without token".into()))?,
            lease_until: Timestamp::from_micros(row.opt_int("lease_until")?.unwrap_or(0)),
        },
        "COMPLETED" => {
            let status = row.opt_int("response_status")?.unwrap_or(500);
            // Text on both backends, not jsonb: a replay must return the bytes of the original
            // response, and jsonb would reorder the keys.
            let body = match row.opt_text("response_body")? {
                Some(text) => serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("body: {e}")))?,
                None => serde_json::Value::Null,
            };
            let headers = match row.opt_json("response_headers")? {
                Some(headers) => {
                    serde_json::from_value(headers).map_err(|e| StoreError::Corrupt(format!("headers: {e}")))?
                }
                None => Vec::new(),
            };
            IdempotencyState::Completed(StoredResponse {
                status: u16::try_from(status).map_err(|_| StoreError::Corrupt(format!("status {status}")))?,
                body,
                headers,
                resource_id: row.opt_text("resource_id")?,
            })
        }
        other => return Err(StoreError::Corrupt(format!("idempotency state {other:?}"))),
    };
    Ok(IdempotencyRecord {
        scope: scope.clone(),
        request_hash: row.text("request_hash")?,
        state,
        created_at: row.timestamp("created_at")?,
    })
}
