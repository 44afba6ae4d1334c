//! Automation executions on SQLite: `ExecutionStore`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::Params;
use tokenops_domain::automation::Execution;
use tokenops_store::encode;
use tokenops_store::rows;
use tokenops_store::{ExecutionStore, StoreError, StoreResult};

/// An execution's values in `EXECUTION_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn execution_values(e: &Execution) -> impl Params + '_ {
    let (log, submitted) = encode::execution_lists(e);
    (
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
    )
}

#[async_trait]
impl ExecutionStore for SqliteTx {
    async fn insert(&mut self, e: &Execution) -> StoreResult<()> {
        let inserted = self.insert_new_row(&rows::EXECUTIONS, execution_values(e))?;
        if !inserted {
            return Err(StoreError::Conflict("the automation already has this run".into()));
        }
        Ok(())
    }

    async fn update(&mut self, e: &Execution) -> StoreResult<()> {
        self.execute(
            "UPDATE automation_executions SET status = ?5, log = ?9, submitted = ?10, error = ?11, attempts = ?12,
                    started_at = ?14, finished_at = ?15
             WHERE tenant_id = ?2 AND id = ?1",
            execution_values(e),
        )?;
        Ok(())
    }
}
