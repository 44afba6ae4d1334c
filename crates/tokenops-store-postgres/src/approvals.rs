//! Approval requests and their tasks on PostgreSQL: `ApprovalStore`. A task's approvers are a
//! JSON array of expressions kept as text (as on SQLite), matched by the approver filter as jsonb.

use crate::clause::{Bind, Clause};
use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask, ApprovalTaskFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::conditions;
use tokenops_store::rows::{self, APPROVAL_REQUEST_COLUMNS, APPROVAL_TASK_COLUMNS};
use tokenops_store::{ApprovalStore, StoreError, StoreResult};
use uuid::Uuid;

fn step_value(step: u32) -> StoreResult<i32> {
    i32::try_from(step).map_err(|_| StoreError::Corrupt(format!("approval task step {step} out of range")))
}

fn opt_micros(at: Option<Timestamp>) -> Option<i64> {
    at.map(Timestamp::as_micros)
}

/// Binds a request's values in `APPROVAL_REQUEST_COLUMNS` order: the insert binds them all, the
/// update the columns it may change, each by its place in that list.
fn bind_request<'q>(query: PgQuery<'q>, r: &'q ApprovalRequest) -> PgQuery<'q> {
    query
        .bind(r.id)
        .bind(r.tenant_id.as_uuid())
        .bind(r.status.as_str())
        .bind(r.source.as_str())
        .bind(&r.action)
        .bind(&r.resource_type)
        .bind(&r.resource_id)
        .bind(&r.initiator)
        .bind(&r.title)
        .bind(&r.description)
        .bind(r.expires_at.as_micros())
        .bind(opt_micros(r.resolved_at))
        .bind(&r.acted_by)
        .bind(r.created_at.as_micros())
        .bind(r.updated_at.as_micros())
}

/// Binds a task's values in `APPROVAL_TASK_COLUMNS` order, as `bind_request` (the approvers as
/// the JSON text the table keeps).
fn bind_task<'q>(query: PgQuery<'q>, t: &'q ApprovalTask) -> StoreResult<PgQuery<'q>> {
    Ok(query
        .bind(t.id)
        .bind(t.tenant_id.as_uuid())
        .bind(t.request_id)
        .bind(step_value(t.step)?)
        .bind(codec::names_text(&t.approvers))
        .bind(t.state.as_str())
        .bind(&t.acted_by)
        .bind(opt_micros(t.acted_at))
        .bind(&t.comment)
        .bind(t.created_at.as_micros())
        .bind(t.updated_at.as_micros()))
}

#[async_trait]
impl ApprovalStore for PostgresTx {
    async fn insert_request(&mut self, r: &ApprovalRequest) -> StoreResult<()> {
        self.execute(bind_request(query::insert_row(&rows::APPROVAL_REQUESTS), r)).await?;
        Ok(())
    }

    async fn update_request(&mut self, r: &ApprovalRequest) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE approval_requests SET status = $3, resolved_at = $12, acted_by = $13, updated_at = $15
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_request(query, r)).await?;
        Ok(())
    }

    async fn pending_summary(&mut self) -> StoreResult<(u64, Option<Timestamp>)> {
        let query = sqlx::query(
            "SELECT COUNT(*)::BIGINT AS waiting, MIN(created_at) AS oldest FROM approval_requests
             WHERE status = 'PENDING'",
        );
        self.fetch_one(query, |row| {
            let oldest: Option<i64> = codec::get(row, "oldest")?;
            Ok((codec::count(codec::get(row, "waiting")?), oldest.map(codec::ts)))
        })
        .await
    }

    async fn pending_past_expiry(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<ApprovalRequest>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {APPROVAL_REQUEST_COLUMNS} FROM approval_requests WHERE status = 'PENDING' AND expires_at <= $1
                 ORDER BY expires_at ASC, id ASC LIMIT $2"
            )))
            .bind(now.as_micros())
            .bind(i64::from(limit)),
            codec::decoded,
        )
        .await
    }

    async fn requests_for_resources(
        &mut self,
        tenant: TenantId,
        resource_type: &str,
        resource_ids: &[String],
    ) -> StoreResult<Vec<ApprovalRequest>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {APPROVAL_REQUEST_COLUMNS} FROM approval_requests
                 WHERE tenant_id = $1 AND resource_type = $2 AND resource_id = ANY($3)"
            )))
            .bind(tenant.as_uuid())
            .bind(resource_type)
            .bind(resource_ids),
            codec::decoded,
        )
        .await
    }

    async fn insert_task(&mut self, t: &ApprovalTask) -> StoreResult<()> {
        self.execute(bind_task(query::insert_row(&rows::APPROVAL_TASKS), t)?).await?;
        Ok(())
    }

    async fn update_task(&mut self, t: &ApprovalTask) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE approval_tasks SET approvers = $5, state = $6, acted_by = $7, acted_at = $8, comment = $9,
                    updated_at = $11
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_task(query, t)?).await?;
        Ok(())
    }

    async fn tasks_of(
        &mut self,
        tenant: TenantId,
        request_id: Uuid,
        for_update: bool,
    ) -> StoreResult<Vec<ApprovalTask>> {
        let lock = if for_update { " FOR UPDATE" } else { "" };
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {APPROVAL_TASK_COLUMNS} FROM approval_tasks WHERE tenant_id = $1 AND request_id = $2
                 ORDER BY step ASC, created_at ASC, id ASC{lock}"
            )))
            .bind(tenant.as_uuid())
            .bind(request_id),
            codec::decoded,
        )
        .await
    }

    async fn list_tasks(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalTask>> {
        let mut clause = Clause::of(conditions::approval_tasks(filter));
        if let Some(approver) = &filter.approver {
            let p = clause.param(Bind::Text(approver.clone()));
            clause.and(&format!("approvers::jsonb @> jsonb_build_array(CAST({p} AS text))"));
        }
        self.page_of(&clause, tenant, &rows::APPROVAL_TASKS, "created_at DESC, id DESC", page, codec::decoded).await
    }
}
