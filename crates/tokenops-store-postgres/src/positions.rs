//! Positions on PostgreSQL: `PositionStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::account::AccountRef;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::saturating_sum_sql;
use tokenops_store::{Position, PositionChange, PositionStore, StoreResult};
use uuid::Uuid;

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
        // Kept within the BIGINT range (see `tokenops_store::positions`).
        let sql = format!(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = {}, held = {},
                                                                updated_at = excluded.updated_at",
            saturating_sum_sql("positions.total", "excluded.total"),
            saturating_sum_sql("positions.held", "excluded.held"),
        );
        self.execute(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant.as_uuid())
                .bind(account_ref.as_str())
                .bind(total_delta)
                .bind(held_delta)
                .bind(now.as_micros()),
        )
        .await?;
        Ok(())
    }

    /// One statement for the whole set: a settlement batch moves the positions of many
    /// accounts, and a statement each was a round trip each. Rows are upserted in the given
    /// order (`WITH ORDINALITY`), so concurrent batches lock them alike.
    async fn apply_all(&mut self, changes: &[PositionChange], now: Timestamp) -> StoreResult<()> {
        if changes.is_empty() {
            return Ok(());
        }
        let tenants: Vec<Uuid> = changes.iter().map(|c| c.tenant.as_uuid()).collect();
        let accounts: Vec<&str> = changes.iter().map(|c| c.account_ref.as_str()).collect();
        let totals: Vec<i64> = changes.iter().map(|c| c.total_delta).collect();
        let helds: Vec<i64> = changes.iter().map(|c| c.held_delta).collect();
        // Kept within the BIGINT range (see `tokenops_store::positions`).
        let sql = format!(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at)
             SELECT c.tenant_id, c.account_ref, c.total, c.held, $5
             FROM UNNEST($1::uuid[], $2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY
                  AS c(tenant_id, account_ref, total, held, position)
             ORDER BY c.position
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = {}, held = {},
                                                                updated_at = excluded.updated_at",
            saturating_sum_sql("positions.total", "excluded.total"),
            saturating_sum_sql("positions.held", "excluded.held"),
        );
        self.execute(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(&tenants)
                .bind(&accounts)
                .bind(&totals)
                .bind(&helds)
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
