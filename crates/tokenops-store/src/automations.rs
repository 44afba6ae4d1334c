//! Automations: `AutomationStore`.

use async_trait::async_trait;
use tokenops_domain::automation::{Automation, AutomationFilter};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{TableRows, TableWrites, conditions, keyset, rows};

#[async_trait]
pub trait AutomationStore: Send + TableRows<Automation> + TableWrites {
    async fn insert(&mut self, automation: &Automation) -> StoreResult<()> {
        self.insert_row(&rows::AUTOMATIONS, automation.values()?, "automation id").await
    }
    /// Any status, deleted included.
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Automation>> {
        self.row_by_key(tenant, &rows::AUTOMATIONS, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Automation>> {
        self.row_by_key(tenant, &rows::AUTOMATIONS, KeyValue::Id(id), true).await
    }
    /// Replaces every mutable field.
    async fn update(&mut self, automation: &Automation) -> StoreResult<()> {
        let set = ["name", "status", "parameters", "consecutive_failures", "next_run_at", "updated_at"];
        self.update_row(&rows::AUTOMATIONS, automation.values()?, &set).await.map(drop)
    }
    /// In `sort` order (then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &AutomationFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<Automation>> {
        let order = keyset::order_by(&keyset::plain(sort));
        self.page_rows(tenant, &rows::AUTOMATIONS, conditions::automations(filter), &order, page).await
    }
    /// How many ACTIVE automations run the script.
    async fn count_active_for_script(&mut self, tenant: TenantId, script_id: Uuid) -> StoreResult<u64>;
    /// ACTIVE SCHEDULED automations of every organisation whose next run is due at `now`,
    /// soonest first, at most `limit`, locked for the rest of the transaction (`FOR UPDATE` on
    /// PostgreSQL): the scheduler writes each back, so a status change meanwhile must wait for
    /// it rather than be written over.
    async fn due(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<Automation>>;
    /// The organisation's ACTIVE EVENT automations listening for `event_type`.
    async fn for_event(&mut self, tenant: TenantId, event_type: &str) -> StoreResult<Vec<Automation>>;
}
