//! Approval requests and tasks as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use crate::encode::{int4, names_text};
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

impl Encode for ApprovalRequest {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.status.as_str().into(),
            self.source.as_str().into(),
            (&self.action).into(),
            self.resource_type.as_ref().into(),
            self.resource_id.as_ref().into(),
            (&self.initiator).into(),
            self.title.as_ref().into(),
            self.description.as_ref().into(),
            self.expires_at.into(),
            self.resolved_at.into(),
            self.acted_by.as_ref().into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}

/// The approvers as the JSON text the table keeps on both backends.
impl Encode for ApprovalTask {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.request_id.into(),
            int4(self.step, "approval task step")?.into(),
            names_text(&self.approvers).into(),
            self.state.as_str().into(),
            self.acted_by.as_ref().into(),
            self.acted_at.into(),
            self.comment.as_ref().into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
