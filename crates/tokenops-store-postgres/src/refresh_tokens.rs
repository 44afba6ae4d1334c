//! Refresh tokens on PostgreSQL: `RefreshTokenStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{RefreshTokenRecord, RefreshTokenStore, StoreResult};
use uuid::Uuid;

#[async_trait]
impl RefreshTokenStore for PostgresTx {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()> {
        self.insert_new(
            sqlx::query(
                "INSERT INTO refresh_tokens (token_hash, user_id, tenant_id, expires_at, revoked_at, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING",
            )
            .bind(&token.token_hash)
            .bind(token.user_id)
            .bind(token.tenant_id.as_uuid())
            .bind(token.expires_at.as_micros())
            .bind(token.revoked_at.map(Timestamp::as_micros))
            .bind(token.created_at.as_micros()),
            "refresh token",
        )
        .await
    }

    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>> {
        self.fetch_optional(
            sqlx::query(
                "SELECT token_hash, user_id, tenant_id, expires_at, revoked_at, created_at
             FROM refresh_tokens WHERE token_hash = $1",
            )
            .bind(token_hash),
            |row| {
                Ok(RefreshTokenRecord {
                    token_hash: codec::get(row, "token_hash")?,
                    user_id: codec::get(row, "user_id")?,
                    tenant_id: TenantId(codec::get(row, "tenant_id")?),
                    expires_at: codec::ts(codec::get(row, "expires_at")?),
                    revoked_at: codec::opt_ts(codec::get(row, "revoked_at")?),
                    created_at: codec::ts(codec::get(row, "created_at")?),
                })
            },
        )
        .await
    }

    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64> {
        self.execute(
            sqlx::query("UPDATE refresh_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
                .bind(now.as_micros())
                .bind(user_id),
        )
        .await
    }

    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        self.execute(sqlx::query("DELETE FROM refresh_tokens WHERE expires_at < $1").bind(cutoff.as_micros())).await
    }
}
