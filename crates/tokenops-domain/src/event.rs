//! Outbox events: the spec's event types and the event record every write emits through the
//! outbox, and the criteria of the event list.

use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use serde::Serialize;
use uuid::Uuid;

wire_enum! {
    /// The event types of the spec's Events section, and two beyond it (`webhook.failing`,
    /// `webhook.suspended`: a registration's own health, told to the organisation's other
    /// registrations). The set is open for later additions.
    EventType {
        TransactionConfirmed => "transaction.confirmed",
        TransactionFailed => "transaction.failed",
        TransactionRejected => "transaction.rejected",
        TransactionCancelled => "transaction.cancelled",
        TransactionAwaitingApproval => "transaction.awaiting_approval",
        AccountProvisioned => "account.provisioned",
        AccountProvisioningFailed => "account.provisioning_failed",
        AccountStatusChanged => "account.status_changed",
        CustomerStatusChanged => "customer.status_changed",
        ApprovalRequested => "approval.requested",
        ApprovalGranted => "approval.granted",
        ApprovalRejected => "approval.rejected",
        ApprovalExpired => "approval.expired",
        WebhookTest => "webhook.test",
        /// Beyond the spec: a registration reached `webhook::FAILING_AFTER_FAILURES` failed
        /// attempts in a row.
        WebhookFailing => "webhook.failing",
        /// Beyond the spec: a registration was suspended (`webhook::SUSPEND_AFTER_FAILURES`).
        WebhookSuspended => "webhook.suspended",
    }
}

impl EventType {
    /// Whether an event of this type is about the registration it names (`resource`), which
    /// is then never sent to that registration itself: a failing endpoint would not hear it,
    /// and each attempt to tell it would count one more failure.
    pub fn about_a_registration_health(self) -> bool {
        matches!(self, EventType::WebhookFailing | EventType::WebhookSuspended)
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
