//! Approval requests and their tasks on PostgreSQL: `ApprovalStore`. A task's approvers are a
//! JSON array of expressions kept as text (as on SQLite), matched by the approver filter as jsonb.

use crate::clause::Clause;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask, ApprovalTaskFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::conditions;
use tokenops_store::rows::{self, APPROVAL_REQUEST_COLUMNS};
use tokenops_store::{ApprovalStore, StoreResult};

#[async_trait]
impl ApprovalStore for PostgresTx {
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

    async fn list_tasks(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalTask>> {
        let mut clause = Clause::of(conditions::approval_tasks(filter));
        if let Some(approver) = &filter.approver {
            let p = clause.param(approver.clone().into());
            clause.and(&format!("approvers::jsonb @> jsonb_build_array(CAST({p} AS text))"));
        }
        self.page_of(&clause, tenant, &rows::APPROVAL_TASKS, "created_at DESC, id DESC", page, codec::decoded).await
    }
}
