//! Outbox events as read from either backend.

use super::{Codec, ColumnValue, Columns, Place};
use crate::StoreResult;
use tokenops_domain::event::{Event, ResourceRef};

stored_table! {
    columns EVENT_COLUMNS of "events";
    table EVENTS by id;
    decode event -> Event;
    {
        id, tenant_id, event_type, occurred_at, correlation_id, idempotency_key,
        resource [resource_type, resource_id]: Resource,
        data, dispatched_at,
    }
}

/// The resource an event is about: its type and its id. Its write exists for the `Codec`
/// contract only: events are written by the outbox's own statement.
struct Resource;

impl Codec<ResourceRef, 2> for Resource {
    fn read(row: &impl Columns, at: &Place<2>) -> StoreResult<ResourceRef> {
        let [kind, id] = at.columns;
        Ok(ResourceRef { kind: row.text(kind)?, id: row.text(id)? })
    }

    fn write(resource: &ResourceRef, _: &Place<2>) -> StoreResult<[ColumnValue; 2]> {
        Ok([resource.kind.clone().into(), resource.id.clone().into()])
    }
}
