//! Positions on SQLite: `PositionStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::account::AccountRef;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::saturating_sum_sql;
use tokenops_store::{Position, PositionStore, StoreResult};

#[async_trait]
impl PositionStore for SqliteTx {
    async fn apply(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        total_delta: i64,
        held_delta: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        // Kept within range (see `tokenops_store::positions`): an overflowing sum would become a
        // REAL, which the STRICT INTEGER column refuses.
        let sql = format!(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = {}, held = {},
                                                                updated_at = excluded.updated_at",
            saturating_sum_sql("total", "excluded.total"),
            saturating_sum_sql("held", "excluded.held"),
        );
        self.execute(
            &sql,
            params![codec::id_text(tenant.as_uuid()), account_ref.as_str(), total_delta, held_delta, now.as_micros()],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position> {
        let position = self.fetch_optional(
            "SELECT total, held FROM positions WHERE tenant_id = ?1 AND account_ref = ?2",
            params![codec::id_text(tenant.as_uuid()), account_ref.as_str()],
            |row| Ok(Position { total: codec::get(row, "total")?, held: codec::get(row, "held")? }),
        )?;
        Ok(position.unwrap_or_default())
    }
}
