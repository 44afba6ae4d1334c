//! Idempotency keys and their stored responses: `IdempotencyScope`, `IdempotencyRecord` and `IdempotencyStore`.

use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

/// The key space of one Idempotency-Key: per organisation (none for platform operations) and
/// per operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyScope {
    pub tenant: Option<TenantId>,
    pub operation: String,
    pub key: String,
}

/// The response stored with a completed key, replayed to every later request with that key.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    pub status: u16,
    pub body: serde_json::Value,
    /// Response headers worth replaying (for example `Location`).
    pub headers: Vec<(String, String)>,
    /// The resource the write named (its audit record's resource id), handed back on a replay so
    /// that no handler reads it out of a header. Not part of the replayed bytes. `None` when the
    /// write named none, and for records completed before the store kept it.
    pub resource_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum IdempotencyState {
    /// A request holds the key until `lease_until`; past it, a crashed holder's key is taken over.
    InFlight {
        token: Uuid,
        lease_until: Timestamp,
    },
    Completed(StoredResponse),
}

#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    pub scope: IdempotencyScope,
    pub request_hash: String,
    pub state: IdempotencyState,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait IdempotencyStore: Send {
    async fn get(&mut self, scope: &IdempotencyScope) -> StoreResult<Option<IdempotencyRecord>>;
    /// Inserts an in-flight claim; `StoreError::Conflict` if the key exists.
    async fn insert_claim(
        &mut self,
        scope: &IdempotencyScope,
        request_hash: &str,
        token: Uuid,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> StoreResult<()>;
    /// Stores the outcome; false when `token` no longer holds the key (fencing).
    async fn complete(
        &mut self,
        scope: &IdempotencyScope,
        token: Uuid,
        response: &StoredResponse,
        now: Timestamp,
    ) -> StoreResult<bool>;
    /// Drops an in-flight claim held by `token`, so the key can be claimed again (after a failure
    /// that changed nothing, or to take over a crashed holder's expired claim).
    async fn release(&mut self, scope: &IdempotencyScope, token: Uuid) -> StoreResult<()>;
    /// Deletes completed records created before `cutoff`, and in-flight claims abandoned (lease
    /// ended) before it; returns how many.
    async fn prune(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
}
