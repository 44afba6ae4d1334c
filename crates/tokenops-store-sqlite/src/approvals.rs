//! Approval requests and their tasks on SQLite: `ApprovalStore`. A task's approvers are a JSON
//! array of expressions, matched by the approver filter through `json_each`.

use crate::clause::Clause;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Params, params};
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask, ApprovalTaskFilter};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::conditions;
use tokenops_store::rows::{self, APPROVAL_REQUEST_COLUMNS, APPROVAL_TASK_COLUMNS};
use tokenops_store::{ApprovalStore, StoreResult};
use uuid::Uuid;

fn opt_micros(at: Option<Timestamp>) -> Option<i64> {
    at.map(Timestamp::as_micros)
}

/// A request's values in `APPROVAL_REQUEST_COLUMNS` order: the insert binds them all, the update
/// the columns it may change, each by its place in that list.
fn request_values(r: &ApprovalRequest) -> impl Params + '_ {
    (
        codec::id_text(r.id),
        codec::id_text(r.tenant_id.as_uuid()),
        r.status.as_str(),
        r.source.as_str(),
        &r.action,
        &r.resource_type,
        &r.resource_id,
        &r.initiator,
        &r.title,
        &r.description,
        r.expires_at.as_micros(),
        opt_micros(r.resolved_at),
        &r.acted_by,
        r.created_at.as_micros(),
        r.updated_at.as_micros(),
    )
}

/// A task's values in `APPROVAL_TASK_COLUMNS` order, as `request_values`.
fn task_values(t: &ApprovalTask) -> impl Params + '_ {
    (
        codec::id_text(t.id),
        codec::id_text(t.tenant_id.as_uuid()),
        codec::id_text(t.request_id),
        i64::from(t.step),
        codec::names_text(&t.approvers),
        t.state.as_str(),
        &t.acted_by,
        opt_micros(t.acted_at),
        &t.comment,
        t.created_at.as_micros(),
        t.updated_at.as_micros(),
    )
}

#[async_trait]
impl ApprovalStore for SqliteTx {
    async fn insert_request(&mut self, r: &ApprovalRequest) -> StoreResult<()> {
        self.insert_row(&rows::APPROVAL_REQUESTS, request_values(r))
    }

    async fn update_request(&mut self, r: &ApprovalRequest) -> StoreResult<()> {
        self.execute(
            "UPDATE approval_requests SET status = ?3, resolved_at = ?12, acted_by = ?13, updated_at = ?15
             WHERE tenant_id = ?2 AND id = ?1",
            request_values(r),
        )?;
        Ok(())
    }

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

    async fn insert_task(&mut self, t: &ApprovalTask) -> StoreResult<()> {
        self.insert_row(&rows::APPROVAL_TASKS, task_values(t))
    }

    async fn update_task(&mut self, t: &ApprovalTask) -> StoreResult<()> {
        self.execute(
            "UPDATE approval_tasks SET approvers = ?5, state = ?6, acted_by = ?7, acted_at = ?8, comment = ?9,
                    updated_at = ?11
             WHERE tenant_id = ?2 AND id = ?1",
            task_values(t),
        )?;
        Ok(())
    }

    async fn tasks_of(
        &mut self,
        tenant: TenantId,
        request_id: Uuid,
        for_update: bool,
    ) -> StoreResult<Vec<ApprovalTask>> {
        if for_update {
            // The single writer already holds them.
            self.require_write("reading approval tasks for update")?;
        }
        self.fetch_all(
            &format!(
                "SELECT {APPROVAL_TASK_COLUMNS} FROM approval_tasks WHERE tenant_id = ?1 AND request_id = ?2
                 ORDER BY step ASC, created_at ASC, id ASC"
            ),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(request_id)],
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
