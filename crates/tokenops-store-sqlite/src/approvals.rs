//! Approval requests and their tasks on SQLite: `ApprovalStore`. A task's approvers are a JSON
//! array of expressions, matched by the approver filter through `json_each`.

use crate::clause::Clause;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use rusqlite::types::Value;
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask, ApprovalTaskFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::conditions;
use tokenops_store::rows::{self, APPROVAL_REQUEST_COLUMNS};
use tokenops_store::{ApprovalStore, StoreResult};

#[async_trait]
impl ApprovalStore for SqliteTx {
    async fn pending_summary(&mut self) -> StoreResult<(u64, Option<Timestamp>)> {
        self.fetch_one(
            "SELECT COUNT(*) AS waiting, MIN(created_at) AS oldest FROM approval_requests WHERE status = 'PENDING'",
            params![],
            |row| {
                let oldest: Option<i64> = codec::get(row, "oldest")?;
                Ok((u64::try_from(codec::get::<i64>(row, "waiting")?).unwrap_or(0), oldest.map(codec::ts)))
            },
        )
    }

    async fn pending_past_expiry(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<ApprovalRequest>> {
        self.fetch_all(
            &format!(
                "SELECT {APPROVAL_REQUEST_COLUMNS} FROM approval_requests WHERE status = 'PENDING' AND expires_at <= ?1
                 ORDER BY expires_at ASC, id ASC LIMIT ?2"
            ),
            params![now.as_micros(), i64::from(limit)],
            codec::decoded,
        )
    }

    async fn requests_for_resources(
        &mut self,
        tenant: TenantId,
        resource_type: &str,
        resource_ids: &[String],
    ) -> StoreResult<Vec<ApprovalRequest>> {
        // The ids travel as one JSON array, so one fixed statement serves any number of them.
        let ids = serde_json::Value::from(resource_ids.to_vec()).to_string();
        self.fetch_all(
            &format!(
                "SELECT {APPROVAL_REQUEST_COLUMNS} FROM approval_requests
                 WHERE tenant_id = ?1 AND resource_type = ?2 AND resource_id IN (SELECT value FROM json_each(?3))"
            ),
            params![codec::id_text(tenant.as_uuid()), resource_type, ids],
            codec::decoded,
        )
    }

    async fn list_tasks(
        &mut self,
        tenant: TenantId,
        filter: &ApprovalTaskFilter,
        page: PageRequest,
    ) -> StoreResult<Page<ApprovalTask>> {
        let mut clause = Clause::of(conditions::approval_tasks(filter));
        if let Some(approver) = &filter.approver {
            let p = clause.param(Value::Text(approver.clone()));
            clause.and(&format!("EXISTS (SELECT 1 FROM json_each(approvers) WHERE json_each.value = {p})"));
        }
        self.page_of(&clause, tenant, &rows::APPROVAL_TASKS, "created_at DESC, id DESC", page, codec::decoded)
    }
}
