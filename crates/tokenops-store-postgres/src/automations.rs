//! Automations on PostgreSQL: `AutomationStore`.

use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::automation::Automation;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::encode;
use tokenops_store::rows::{self, AUTOMATION_COLUMNS};
use tokenops_store::{AutomationStore, StoreResult};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Automation> {
    rows::automation(&codec::Cols(row))
}

/// Binds an automation's values in `AUTOMATION_COLUMNS` order: the insert binds them all, the
/// update the columns it may change, each by its place in that list.
fn bind_automation<'q>(query: PgQuery<'q>, a: &'q Automation) -> PgQuery<'q> {
    let (cron, time_zone, event_type) = encode::trigger_columns(&a.trigger);
    query
        .bind(a.id)
        .bind(a.tenant_id.as_uuid())
        .bind(&a.name)
        .bind(a.script_id)
        .bind(a.root_script_id)
        .bind(&a.user_id)
        .bind(serde_json::Value::from(a.creator_permissions.clone()).to_string())
        .bind(a.trigger.kind().as_str())
        .bind(cron)
        .bind(time_zone)
        .bind(event_type)
        .bind(a.status.as_str())
        .bind(&a.parameters)
        .bind(codec::saturating_int4(a.consecutive_failures))
        .bind(a.next_run_at.map(|t| t.as_micros()))
        .bind(a.created_at.as_micros())
        .bind(a.updated_at.as_micros())
}

#[async_trait]
impl AutomationStore for PostgresTx {
    async fn insert(&mut self, a: &Automation) -> StoreResult<()> {
        self.execute(bind_automation(query::insert_row(&rows::AUTOMATIONS), a)).await?;
        Ok(())
    }

    async fn update(&mut self, a: &Automation) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE automations SET name = $3, status = $12, parameters = $13, consecutive_failures = $14,
                    next_run_at = $15, updated_at = $17
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_automation(query, a)).await?;
        Ok(())
    }

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
             ORDER BY next_run_at, id LIMIT $2"
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
