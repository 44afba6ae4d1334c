//! Sign-in challenge sessions (opaque; stored as SHA-256 hex): `ChallengeRecord` and `ChallengeStore`.

use async_trait::async_trait;
use tokenops_domain::Timestamp;
use uuid::Uuid;

use crate::StoreResult;

/// A NEW_PASSWORD_REQUIRED challenge handed out by login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeRecord {
    pub session_hash: String,
    pub user_id: Uuid,
    pub expires_at: Timestamp,
}

#[async_trait]
pub trait ChallengeStore: Send {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()>;
    /// Removes and returns the challenge when it exists and has not expired at `now`.
    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>>;
    /// Removes challenges that expired before `now`; returns how many.
    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64>;
}
