//! Automations on SQLite: `AutomationStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::automation::Automation;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::encode;
use tokenops_store::rows::{self, AUTOMATION_COLUMNS};
use tokenops_store::{AutomationStore, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Automation> {
    rows::automation(&codec::Cols(row))
}

#[async_trait]
impl AutomationStore for SqliteTx {
    async fn insert(&mut self, a: &Automation) -> StoreResult<()> {
        let (cron, time_zone, event_type) = encode::trigger_columns(&a.trigger);
        self.insert_row(
            &rows::AUTOMATIONS,
            params![
                codec::id_text(a.id),
                codec::id_text(a.tenant_id.as_uuid()),
                &a.name,
                codec::id_text(a.script_id),
                codec::id_text(a.root_script_id),
                &a.user_id,
                serde_json::Value::from(a.creator_permissions.clone()).to_string(),
                a.trigger.kind().as_str(),
                cron,
                time_zone,
                event_type,
                a.status.as_str(),
                codec::json_text(&a.parameters),
                i64::from(a.consecutive_failures),
                a.next_run_at.map(|t| t.as_micros()),
                a.created_at.as_micros(),
                a.updated_at.as_micros(),
            ],
        )
    }

    async fn update(&mut self, a: &Automation) -> StoreResult<()> {
        self.execute(
            "UPDATE automations SET name = ?1, status = ?2, parameters = ?3, consecutive_failures = ?4, next_run_at = ?5,
                    updated_at = ?6
             WHERE tenant_id = ?7 AND id = ?8",
            params![
                &a.name,
                a.status.as_str(),
                codec::json_text(&a.parameters),
                i64::from(a.consecutive_failures),
                a.next_run_at.map(|t| t.as_micros()),
                a.updated_at.as_micros(),
                codec::id_text(a.tenant_id.as_uuid()),
                codec::id_text(a.id),
            ],
        )?;
        Ok(())
    }

    async fn count_active_for_script(&mut self, tenant: TenantId, script_id: Uuid) -> StoreResult<u64> {
        let count: i64 = self.scalar(
            "SELECT COUNT(*) FROM automations WHERE tenant_id = ?1 AND script_id = ?2 AND status = 'ACTIVE'",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(script_id)],
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn due(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Automation>> {
        self.fetch_all(
            &format!(
                "SELECT {AUTOMATION_COLUMNS} FROM automations
                 WHERE status = 'ACTIVE' AND trigger_type = 'SCHEDULED' AND next_run_at <= ?1
                 ORDER BY next_run_at, id LIMIT ?2"
            ),
            params![now.as_micros(), i64::from(limit)],
            decode,
        )
    }

    async fn for_event(&mut self, tenant: TenantId, event_type: &str) -> StoreResult<Vec<Automation>> {
        self.fetch_all(
            &format!(
                "SELECT {AUTOMATION_COLUMNS} FROM automations
                 WHERE tenant_id = ?1 AND event_type = ?2 AND status = 'ACTIVE' AND trigger_type = 'EVENT'
                 ORDER BY created_at, id"
            ),
            params![codec::id_text(tenant.as_uuid()), event_type],
            decode,
        )
    }
}
