//! Automation executions on SQLite: `ExecutionStore`.

use crate::clause::Clause;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::TenantId;
use tokenops_domain::automation::{Execution, ExecutionFilter};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::{self, EXECUTION_COLUMNS};
use tokenops_store::{ExecutionStore, StoreError, StoreResult, keyset};
use tokenops_store::{conditions, encode};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Execution> {
    rows::execution(&codec::Cols(row))
}

#[async_trait]
impl ExecutionStore for SqliteTx {
    async fn insert(&mut self, e: &Execution) -> StoreResult<()> {
        let (log, submitted) = encode::execution_lists(e);
        let inserted = self.execute(
            &format!(
                "INSERT INTO automation_executions ({EXECUTION_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
                 ON CONFLICT DO NOTHING"
            ),
            params![
                codec::id_text(e.id),
                codec::id_text(e.tenant_id.as_uuid()),
                codec::id_text(e.automation_id),
                e.trigger.as_str(),
                e.status.as_str(),
                codec::json_text(&e.parameters),
                e.scheduled_for.map(|t| t.as_micros()),
                e.event_id.map(codec::id_text),
                log,
                submitted,
                &e.error,
                i64::from(e.attempts),
                e.created_at.as_micros(),
                e.started_at.map(|t| t.as_micros()),
                e.finished_at.map(|t| t.as_micros()),
            ],
        )?;
        if inserted == 0 {
            return Err(StoreError::Conflict("the automation already has this run".into()));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        self.fetch_optional(
            &format!("SELECT {EXECUTION_COLUMNS} FROM automation_executions WHERE tenant_id = ?1 AND id = ?2"),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
            decode,
        )
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading an execution for update")?;
        ExecutionStore::get(self, tenant, id).await
    }

    async fn update(&mut self, e: &Execution) -> StoreResult<()> {
        let (log, submitted) = encode::execution_lists(e);
        self.execute(
            "UPDATE automation_executions SET status = ?1, log = ?2, submitted = ?3, error = ?4, attempts = ?5,
                    started_at = ?6, finished_at = ?7
             WHERE tenant_id = ?8 AND id = ?9",
            params![
                e.status.as_str(),
                log,
                submitted,
                &e.error,
                i64::from(e.attempts),
                e.started_at.map(|t| t.as_micros()),
                e.finished_at.map(|t| t.as_micros()),
                codec::id_text(e.tenant_id.as_uuid()),
                codec::id_text(e.id),
            ],
        )?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        automation_id: Uuid,
        filter: &ExecutionFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<Execution>> {
        let clause = Clause::of(conditions::executions(automation_id, filter));
        let order = keyset::order_by(&keyset::plain(sort));
        clause.page(self, tenant, "automation_executions", EXECUTION_COLUMNS, &order, page, decode)
    }
}
