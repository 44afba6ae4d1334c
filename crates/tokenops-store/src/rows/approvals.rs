//! Approval requests and tasks as read from and written to either backend.

use super::{Int, JsonTextList};
use tokenops_domain::approval::{ApprovalRequest, ApprovalTask};

stored_table! {
    columns APPROVAL_REQUEST_COLUMNS of "approval_requests";
    table APPROVAL_REQUESTS by id;
    decode approval_request -> ApprovalRequest, encode;
    {
        id, tenant_id, status, source, action, resource_type, resource_id, initiator, title,
        description, expires_at, resolved_at, acted_by, created_at, updated_at,
    }
}

stored_table! {
    columns APPROVAL_TASK_COLUMNS of "approval_tasks";
    table APPROVAL_TASKS by id;
    decode approval_task -> ApprovalTask, encode;
    {
        id, tenant_id, request_id,
        step: Int,
        approvers: JsonTextList,
        state, acted_by, acted_at, comment, created_at, updated_at,
    }
}
