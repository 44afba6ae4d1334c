//! Automation executions on PostgreSQL: `ExecutionStore`.

use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::automation::Execution;
use tokenops_store::encode;
use tokenops_store::rows;
use tokenops_store::{ExecutionStore, StoreResult};

/// Binds an execution's values in `EXECUTION_COLUMNS` order: the insert binds them all, the
/// update the columns it may change, each by its place in that list.
fn bind_execution<'q>(query: PgQuery<'q>, e: &'q Execution) -> PgQuery<'q> {
    let (log, submitted) = encode::execution_lists(e);
    query
        .bind(e.id)
        .bind(e.tenant_id.as_uuid())
        .bind(e.automation_id)
        .bind(e.trigger.as_str())
        .bind(e.status.as_str())
        .bind(&e.parameters)
        .bind(e.scheduled_for.map(|t| t.as_micros()))
        .bind(e.event_id)
        .bind(log)
        .bind(submitted)
        .bind(&e.error)
        .bind(codec::saturating_int4(e.attempts))
        .bind(e.created_at.as_micros())
        .bind(e.started_at.map(|t| t.as_micros()))
        .bind(e.finished_at.map(|t| t.as_micros()))
}

#[async_trait]
impl ExecutionStore for PostgresTx {
    async fn insert(&mut self, e: &Execution) -> StoreResult<()> {
        self.insert_new(bind_execution(query::insert(&rows::EXECUTIONS), e), "the automation's run").await
    }

    async fn update(&mut self, e: &Execution) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE automation_executions SET status = $5, log = $9, submitted = $10, error = $11, attempts = $12,
                    started_at = $14, finished_at = $15
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_execution(query, e)).await?;
        Ok(())
    }
}
