//! Automation executions on PostgreSQL: `ExecutionStore`.

use crate::clause::Clause;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::TenantId;
use tokenops_domain::automation::{Execution, ExecutionFilter};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::{self, EXECUTION_COLUMNS};
use tokenops_store::{ExecutionStore, StoreResult, keyset};
use tokenops_store::{conditions, encode};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Execution> {
    rows::execution(&codec::Cols(row))
}

fn to_i32(value: u32) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

impl PostgresTx {
    async fn fetch_execution(&mut self, tenant: TenantId, id: Uuid, lock: &str) -> StoreResult<Option<Execution>> {
        let sql =
            format!("SELECT {EXECUTION_COLUMNS} FROM automation_executions WHERE tenant_id = $1 AND id = $2 {lock}");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(id), decode).await
    }
}

#[async_trait]
impl ExecutionStore for PostgresTx {
    async fn insert(&mut self, e: &Execution) -> StoreResult<()> {
        let (log, submitted) = encode::execution_lists(e);
        let sql = format!(
            "INSERT INTO automation_executions ({EXECUTION_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
             ON CONFLICT DO NOTHING"
        );
        self.insert_new(
            sqlx::query(sqlx::AssertSqlSafe(sql))
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
                .bind(to_i32(e.attempts))
                .bind(e.created_at.as_micros())
                .bind(e.started_at.map(|t| t.as_micros()))
                .bind(e.finished_at.map(|t| t.as_micros())),
            "the automation's run",
        )
        .await
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        self.fetch_execution(tenant, id, "").await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Execution>> {
        self.fetch_execution(tenant, id, "FOR UPDATE").await
    }

    async fn update(&mut self, e: &Execution) -> StoreResult<()> {
        let (log, submitted) = encode::execution_lists(e);
        self.execute(
            sqlx::query(
                "UPDATE automation_executions SET status = $1, log = $2, submitted = $3, error = $4, attempts = $5,
                        started_at = $6, finished_at = $7
                 WHERE tenant_id = $8 AND id = $9",
            )
            .bind(e.status.as_str())
            .bind(log)
            .bind(submitted)
            .bind(&e.error)
            .bind(to_i32(e.attempts))
            .bind(e.started_at.map(|t| t.as_micros()))
            .bind(e.finished_at.map(|t| t.as_micros()))
            .bind(e.tenant_id.as_uuid())
            .bind(e.id),
        )
        .await?;
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
        clause.page(self, tenant, "automation_executions", EXECUTION_COLUMNS, &order, page, decode).await
    }
}
