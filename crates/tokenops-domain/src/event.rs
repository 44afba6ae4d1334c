//! Outbox events: the spec's event types and the event record every write emits through the
//! outbox, and the criteria of the event list.

use crate::{TenantId, Timestamp};
use serde::Serialize;
use uuid::Uuid;

/// The event types of the spec's Events section. The set is open for later additions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    TransactionConfirmed,
    TransactionFailed,
    TransactionRejected,
    TransactionCancelled,
    TransactionAwaitingApproval,
    AccountProvisioned,
    AccountProvisioningFailed,
    AccountStatusChanged,
    CustomerStatusChanged,
    ApprovalRequested,
    ApprovalGranted,
    ApprovalRejected,
    ApprovalExpired,
    WebhookTest,
}

impl EventType {
    pub const ALL: [EventType; 14] = [
        EventType::TransactionConfirmed,
        EventType::TransactionFailed,
        EventType::TransactionRejected,
        EventType::TransactionCancelled,
        EventType::TransactionAwaitingApproval,
        EventType::AccountProvisioned,
        EventType::AccountProvisioningFailed,
        EventType::AccountStatusChanged,
        EventType::CustomerStatusChanged,
        EventType::ApprovalRequested,
        EventType::ApprovalGranted,
        EventType::ApprovalRejected,
        EventType::ApprovalExpired,
        EventType::WebhookTest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventType::TransactionConfirmed => "transaction.confirmed",
            EventType::TransactionFailed => "transaction.failed",
            EventType::TransactionRejected => "transaction.rejected",
            EventType::TransactionCancelled => "transaction.cancelled",
            EventType::TransactionAwaitingApproval => "transaction.awaiting_approval",
            EventType::AccountProvisioned => "account.provisioned",
            EventType::AccountProvisioningFailed => "account.provisioning_failed",
            EventType::AccountStatusChanged => "account.status_changed",
            EventType::CustomerStatusChanged => "customer.status_changed",
            EventType::ApprovalRequested => "approval.requested",
            EventType::ApprovalGranted => "approval.granted",
            EventType::ApprovalRejected => "approval.rejected",
            EventType::ApprovalExpired => "approval.expired",
            EventType::WebhookTest => "webhook.test",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == text)
    }
}

/// What an event is about: the spec's `resource {type, id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResourceRef {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: String,
}

impl ResourceRef {
    pub fn new(kind: impl Into<String>, id: impl Into<String>) -> Self {
        Self { kind: kind.into(), id: id.into() }
    }
}

/// An event as stored in the outbox, with the spec's event body fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub event_type: String,
    pub occurred_at: Timestamp,
    pub correlation_id: Option<String>,
    pub idempotency_key: Option<String>,
    pub resource: ResourceRef,
    pub data: serde_json::Value,
    /// When the dispatcher handed the event on to its subscribers; `None` while waiting.
    pub dispatched_at: Option<Timestamp>,
}

/// Which events a list shows.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    pub event_type: Option<String>,
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
    /// Events with a delivery whose latest generation (per registration) has this status.
    pub delivery_status: Option<String>,
    /// Events with a delivery to this registration (combined with `delivery_status`, the same
    /// delivery).
    pub webhook_id: Option<Uuid>,
}
