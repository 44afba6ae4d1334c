//! Events (the outbox): `EventStore`.

use async_trait::async_trait;
use tokenops_domain::event::{Event, EventFilter};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

#[async_trait]
pub trait EventStore: Send {
    async fn append(&mut self, event: &Event) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Event>>;
    /// Newest first by `occurredAt`, then id; up to `window.limit` items after the position.
    async fn list(&mut self, tenant: TenantId, filter: &EventFilter, window: KeysetRequest) -> StoreResult<Vec<Event>>;
    /// Marks each of the events (organisation and id) dispatched unless it already is; returns
    /// those this call marked, as they now stand, in the order asked. One statement for a batch
    /// of `event.dispatch` jobs where the store can.
    async fn mark_dispatched(&mut self, ids: &[(TenantId, Uuid)], now: Timestamp) -> StoreResult<Vec<Event>>;
}
