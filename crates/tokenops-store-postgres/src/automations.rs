//! Automations on PostgreSQL: `AutomationStore`.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::automation::Automation;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, AUTOMATION_COLUMNS};
use tokenops_store::{AutomationStore, StoreResult};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Automation> {
    rows::automation(&codec::Cols(row))
}

#[async_trait]
impl AutomationStore for PostgresTx {
    async fn count_active_for_script(&mut self, tenant: TenantId, script_id: Uuid) -> StoreResult<u64> {
        let count: i64 = self
            .scalar(
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM automations WHERE tenant_id = $1 AND script_id = $2 AND status = 'ACTIVE'",
                )
                .bind(tenant.as_uuid())
                .bind(script_id),
            )
            .await?;
        Ok(codec::count(count))
    }

    async fn due(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Automation>> {
        let sql = format!(
            "SELECT {AUTOMATION_COLUMNS} FROM automations
             WHERE status = 'ACTIVE' AND trigger_type = 'SCHEDULED' AND next_run_at <= $1
             ORDER BY next_run_at, id LIMIT $2 FOR UPDATE"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now.as_micros()).bind(i64::from(limit)), decode).await
    }

    async fn for_event(&mut self, tenant: TenantId, event_type: &str) -> StoreResult<Vec<Automation>> {
        let sql = format!(
            "SELECT {AUTOMATION_COLUMNS} FROM automations
             WHERE tenant_id = $1 AND event_type = $2 AND status = 'ACTIVE' AND trigger_type = 'EVENT'
             ORDER BY created_at, id"
        );
        self.fetch_all(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(event_type), decode).await
    }
}
