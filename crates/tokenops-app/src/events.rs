//! The outbox: publishing an event (appended with the job that dispatches it, inside the
//! caller's transaction), and reading the event history as integrators see it under webhook
//! events.

use crate::error::{AppResult, Error};
use crate::jobs::kinds;
use std::sync::Arc;
use tokenops_domain::event::{Event, EventFilter};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{NewJob, Store, Tx};
use uuid::Uuid;

/// Appends `event` to the outbox with its `event.dispatch` job, in `tx`: the event exists
/// exactly when the change that caused it commits. Request writes (`Write::emit`) and job
/// handlers both publish through here.
pub async fn publish(tx: &mut dyn Tx, event: &Event, max_attempts: u32, now: Timestamp) -> AppResult<()> {
    tx.events().append(event).await?;
    let job = NewJob {
        kind: kinds::EVENT_DISPATCH.to_owned(),
        tenant_id: Some(event.tenant_id),
        payload: crate::trace::stamp(serde_json::json!({ "eventId": event.id })),
        run_at: now,
        max_attempts,
        dedupe_key: None,
    };
    tx.jobs().enqueue(&job, now).await?;
    Ok(())
}

pub struct EventHistory {
    store: Arc<dyn Store>,
}

impl EventHistory {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Newest first; up to `window.limit` events after the window's position.
    pub async fn list(&self, tenant: TenantId, filter: &EventFilter, window: KeysetRequest) -> AppResult<Vec<Event>> {
        let mut tx = self.store.read().await?;
        Ok(tx.events().list(tenant, filter, window).await?)
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<Event> {
        let mut tx = self.store.read().await?;
        tx.events().get(tenant, id).await?.ok_or_else(|| Error::not_found(format!("Event {id} not found")))
    }
}
