//! The events outbox on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::event::{Event, EventFilter};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, EVENT_COLUMNS};
use tokenops_store::{EventStore, StoreResult};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Event> {
    rows::event(&codec::Cols(row))
}

#[async_trait]
impl EventStore for SqliteTx {
    async fn append(&mut self, event: &Event) -> StoreResult<()> {
        self.insert_params(
            &rows::EVENTS,
            params![
                codec::id_text(event.id),
                codec::id_text(event.tenant_id.as_uuid()),
                &event.event_type,
                event.occurred_at.as_micros(),
                event.correlation_id.as_deref(),
                event.idempotency_key.as_deref(),
                &event.resource.kind,
                &event.resource.id,
                codec::json_text(&event.data),
                event.dispatched_at.map(Timestamp::as_micros),
            ],
        )
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Event>> {
        self.fetch_by_key(&rows::EVENTS, tenant, codec::id_text(id), decode)
    }

    async fn list(&mut self, tenant: TenantId, filter: &EventFilter, window: KeysetRequest) -> StoreResult<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events
             WHERE tenant_id = ?1
               AND (?2 IS NULL OR event_type = ?2)
               AND (?3 IS NULL OR occurred_at >= ?3)
               AND (?4 IS NULL OR occurred_at < ?4)
               AND (?5 IS NULL OR occurred_at < ?5 OR (occurred_at = ?5 AND id < ?6))
               AND ((?8 IS NULL AND ?9 IS NULL) OR EXISTS (
                    SELECT 1 FROM webhook_deliveries d
                    WHERE d.event_id = events.id AND (?8 IS NULL OR d.status = ?8) AND (?9 IS NULL OR d.webhook_id = ?9)
                      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries n
                                      WHERE n.event_id = d.event_id AND n.webhook_id = d.webhook_id
                                        AND n.generation > d.generation)))
             ORDER BY occurred_at DESC, id DESC
             LIMIT ?7"
        );
        self.fetch_all(
            &sql,
            params![
                codec::id_text(tenant.as_uuid()),
                filter.event_type.as_deref(),
                filter.from.map(Timestamp::as_micros),
                filter.to.map(Timestamp::as_micros),
                window.after.map(|p| p.at_micros),
                window.after.map(|p| codec::id_text(p.id)),
                i64::from(window.limit),
                filter.delivery_status.as_deref(),
                filter.webhook_id.map(codec::id_text),
            ],
            decode,
        )
    }

    async fn mark_dispatched(&mut self, ids: &[(TenantId, Uuid)], now: Timestamp) -> StoreResult<Vec<Event>> {
        let sql = format!(
            "UPDATE events SET dispatched_at = ?1 WHERE tenant_id = ?2 AND id = ?3 AND dispatched_at IS NULL
             RETURNING {EVENT_COLUMNS}"
        );
        let mut marked = Vec::new();
        for (tenant, id) in ids {
            let params = params![now.as_micros(), codec::id_text(tenant.as_uuid()), codec::id_text(*id)];
            marked.extend(self.fetch_optional(&sql, params, decode)?);
        }
        Ok(marked)
    }
}
