//! Automation executions (the history of runs): `ExecutionStore`.

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::automation::{Execution, ExecutionFilter};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use uuid::Uuid;

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{TableRows, TableWrites, conditions, keyset, rows};

#[async_trait]
pub trait ExecutionStore: Send + TableRows<Execution> + TableWrites {
    /// `StoreError::Conflict` when the automation already has a run for the same planned
    /// instant or event.
    async fn insert(&mut self, execution: &Execution) -> StoreResult<()> {
        self.insert_row(&rows::EXECUTIONS, execution.values()?, "the automation's run").await
    }
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        self.row_by_key(tenant, &rows::EXECUTIONS, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        self.row_by_key(tenant, &rows::EXECUTIONS, KeyValue::Id(id), true).await
    }
    /// Replaces status, log, submitted, error, attempts and the timings.
    async fn update(&mut self, execution: &Execution) -> StoreResult<()> {
        let set = ["status", "log", "submitted", "error", "attempts", "started_at", "finished_at"];
        self.update_row(&rows::EXECUTIONS, execution.values()?, &set).await.map(drop)
    }
    /// One automation's runs, in `sort` order (then id, descending).
    async fn list(
        &mut self,
        tenant: TenantId,
        automation_id: Uuid,
        filter: &ExecutionFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<Execution>> {
        let order = keyset::order_by(&keyset::plain(sort));
        self.page_rows(tenant, &rows::EXECUTIONS, conditions::executions(automation_id, filter), &order, page).await
    }
}
