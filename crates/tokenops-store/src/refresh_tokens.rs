//! Refresh tokens (opaque; stored as SHA-256 hex): `RefreshTokenRecord` and `RefreshTokenStore`.

use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshTokenRecord {
    pub token_hash: String,
    pub user_id: Uuid,
    pub tenant_id: TenantId,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait RefreshTokenStore: Send {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()>;
    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>>;
    /// Revokes every live refresh token of the user (suspension, removal); returns how many.
    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64>;
    /// Removes tokens that expired before `cutoff`; returns how many.
    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
}
