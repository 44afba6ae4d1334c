//! Reading the event history (the outbox as integrators see it under webhook events).

use crate::error::{AppResult, Error};
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::event::Event;
use tokenops_domain::paging::KeysetRequest;
use tokenops_store::{EventFilter, Store};
use uuid::Uuid;

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
