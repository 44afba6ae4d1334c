//! Approval requests and tasks as read from either backend.

use super::{Columns, Table};
use crate::StoreResult;
use tokenops_domain::approval::{
    ApprovalRequest, ApprovalRequestStatus, ApprovalSource, ApprovalTask, ApprovalTaskState,
};

pub const APPROVAL_REQUEST_COLUMNS: &str = "id, tenant_id, status, source, action, resource_type, resource_id, initiator, title, \
     description, expires_at, resolved_at, acted_by, created_at, updated_at";

pub const APPROVAL_TASK_COLUMNS: &str =
    "id, tenant_id, request_id, step, approvers, state, acted_by, acted_at, comment, created_at, updated_at";

pub const APPROVAL_REQUESTS: Table = Table { name: "approval_requests", columns: APPROVAL_REQUEST_COLUMNS, key: "id" };
pub const APPROVAL_TASKS: Table = Table { name: "approval_tasks", columns: APPROVAL_TASK_COLUMNS, key: "id" };

pub fn approval_request(row: &impl Columns) -> StoreResult<ApprovalRequest> {
    Ok(ApprovalRequest {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        status: row.parsed("status", "approval request status", ApprovalRequestStatus::parse)?,
        source: row.parsed("source", "approval source", ApprovalSource::parse)?,
        action: row.text("action")?,
        resource_type: row.opt_text("resource_type")?,
        resource_id: row.opt_text("resource_id")?,
        initiator: row.text("initiator")?,
        title: row.opt_text("title")?,
        description: row.opt_text("description")?,
        expires_at: row.timestamp("expires_at")?,
        resolved_at: row.opt_timestamp("resolved_at")?,
        acted_by: row.opt_text("acted_by")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

pub fn approval_task(row: &impl Columns) -> StoreResult<ApprovalTask> {
    Ok(ApprovalTask {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        request_id: row.uuid("request_id")?,
        step: row.narrow("step", "approval task step")?,
        approvers: row.names("approvers")?,
        state: row.parsed("state", "approval task state", ApprovalTaskState::parse)?,
        acted_by: row.opt_text("acted_by")?,
        acted_at: row.opt_timestamp("acted_at")?,
        comment: row.opt_text("comment")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}
