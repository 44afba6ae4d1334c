//! Positions on PostgreSQL: `PositionStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{Position, PositionStore, StoreResult};

#[async_trait]
impl PositionStore for PostgresTx {
    async fn apply(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        total_delta: i64,
        held_delta: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        // A sum beyond the BIGINT range fails ("bigint out of range") rather than wrapping.
        self.execute(
            sqlx::query(
                "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = positions.total + excluded.total,
                                                                held = positions.held + excluded.held,
                                                                updated_at = excluded.updated_at",
            )
            .bind(tenant.as_uuid())
            .bind(account_ref.as_str())
            .bind(total_delta)
            .bind(held_delta)
            .bind(now.as_micros()),
        )
        .await?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position> {
        let query = sqlx::query("SELECT total, held FROM positions WHERE tenant_id = $1 AND account_ref = $2")
            .bind(tenant.as_uuid())
            .bind(account_ref.as_str());
        let position = self
            .fetch_optional(query, |row| {
                Ok(Position { total: codec::get(row, "total")?, held: codec::get(row, "held")? })
            })
            .await?;
        Ok(position.unwrap_or_default())
    }
}
