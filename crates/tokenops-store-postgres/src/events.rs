//! The events outbox on PostgreSQL.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::event::{Event, EventFilter};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, EVENT_COLUMNS};
use tokenops_store::{EventStore, StoreResult};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Event> {
    rows::event(&codec::Cols(row))
}

#[async_trait]
impl EventStore for PostgresTx {
    /// Held back and written with the transaction's next statement (`deferred`).
    async fn append(&mut self, event: &Event) -> StoreResult<()> {
        self.hold_back()?.event(event)
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Event>> {
        self.fetch_by_key(&rows::EVENTS, tenant, id, "", decode).await
    }

    async fn list(&mut self, tenant: TenantId, filter: &EventFilter, window: KeysetRequest) -> StoreResult<Vec<Event>> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events
             WHERE tenant_id = $1
               AND ($2::text IS NULL OR event_type = $2)
               AND ($3::bigint IS NULL OR occurred_at >= $3)
               AND ($4::bigint IS NULL OR occurred_at < $4)
               AND ($5::bigint IS NULL OR (occurred_at, id) < ($5, $6::uuid))
               AND (($8::text IS NULL AND $9::uuid IS NULL) OR EXISTS (
                    SELECT 1 FROM webhook_deliveries d
                    WHERE d.event_id = events.id AND ($8::text IS NULL OR d.status = $8)
                      AND ($9::uuid IS NULL OR d.webhook_id = $9)
                      AND NOT EXISTS (SELECT 1 FROM webhook_deliveries n
                                      WHERE n.event_id = d.event_id AND n.webhook_id = d.webhook_id
                                        AND n.generation > d.generation)))
             ORDER BY occurred_at DESC, id DESC
             LIMIT $7"
        );
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(tenant.as_uuid())
                .bind(filter.event_type.as_deref())
                .bind(filter.from.map(Timestamp::as_micros))
                .bind(filter.to.map(Timestamp::as_micros))
                .bind(window.after.map(|p| p.at_micros))
                .bind(window.after.map(|p| p.id))
                .bind(i64::from(window.limit))
                .bind(filter.delivery_status.clone())
                .bind(filter.webhook_id),
            decode,
        )
        .await
    }

    async fn mark_dispatched(&mut self, ids: &[(TenantId, Uuid)], now: Timestamp) -> StoreResult<Vec<Event>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "UPDATE events SET dispatched_at = $1
             FROM UNNEST($2::uuid[], $3::uuid[]) AS asked(tenant_id, id)
             WHERE events.tenant_id = asked.tenant_id AND events.id = asked.id AND events.dispatched_at IS NULL
             RETURNING {}",
            EVENT_COLUMNS.split(", ").map(|c| format!("events.{c}")).collect::<Vec<_>>().join(", ")
        );
        let tenants: Vec<Uuid> = ids.iter().map(|(tenant, _)| tenant.as_uuid()).collect();
        let event_ids: Vec<Uuid> = ids.iter().map(|(_, id)| *id).collect();
        let mut marked = self
            .fetch_all(
                sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now.as_micros()).bind(tenants).bind(event_ids),
                decode,
            )
            .await?;
        // RETURNING has no order of its own.
        let position: std::collections::HashMap<Uuid, usize> =
            ids.iter().enumerate().map(|(at, (_, id))| (*id, at)).collect();
        marked.sort_by_key(|event| position.get(&event.id).copied());
        Ok(marked)
    }
}
