//! Outbox events as read from either backend.

use super::{Columns, Table};
use crate::StoreResult;
use tokenops_domain::event::{Event, ResourceRef};

pub const EVENT_COLUMNS: &str = "id, tenant_id, event_type, occurred_at, correlation_id, idempotency_key, resource_type, resource_id, data, dispatched_at";

pub const EVENTS: Table = Table { name: "events", columns: EVENT_COLUMNS, key: "id" };

pub fn event(row: &impl Columns) -> StoreResult<Event> {
    Ok(Event {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        event_type: row.text("event_type")?,
        occurred_at: row.timestamp("occurred_at")?,
        correlation_id: row.opt_text("correlation_id")?,
        idempotency_key: row.opt_text("idempotency_key")?,
        resource: ResourceRef { kind: row.text("resource_type")?, id: row.text("resource_id")? },
        data: row.json("data")?,
        dispatched_at: row.opt_timestamp("dispatched_at")?,
    })
}
