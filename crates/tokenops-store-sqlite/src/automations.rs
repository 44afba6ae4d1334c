//! Automations on SQLite: `AutomationStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::automation::Automation;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, AUTOMATION_COLUMNS};
use tokenops_store::{AutomationStore, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Automation> {
    rows::automation(&codec::Cols(row))
}

#[async_trait]
impl AutomationStore for SqliteTx {
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
