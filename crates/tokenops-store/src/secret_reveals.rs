//! One-time reveals of machine-client secrets: `SecretRevealRecord` and `SecretRevealStore`.

use async_trait::async_trait;
use tokenops_domain::Timestamp;
use uuid::Uuid;

use crate::rows::{self, Encode};
use crate::{StoreResult, TableWrites};

/// A client secret waiting to be revealed once through a one-time URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRevealRecord {
    /// SHA-256 hex of the one-time token carried in the URL.
    pub token_hash: String,
    pub client_id: Uuid,
    /// The secret sealed under the master key (associated data names the client).
    pub sealed_secret: String,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait SecretRevealStore: Send + TableWrites {
    async fn insert(&mut self, reveal: &SecretRevealRecord) -> StoreResult<()> {
        self.insert_row(&rows::SECRET_REVEALS, reveal.values()?, "secret reveal").await
    }
    /// Removes and returns the reveal when it exists and has not expired at `now`.
    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>>;
    /// Removes reveals that expired before `now`; returns how many.
    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64>;
}
