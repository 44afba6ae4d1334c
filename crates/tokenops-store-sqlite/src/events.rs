//! The events outbox on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::event::{Event, ResourceRef};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{EventFilter, EventStore, StoreResult};
use uuid::Uuid;

const COLUMNS: &str = "id, tenant_id, event_type, occurred_at, correlation_id, idempotency_key, resource_type, resource_id, data, dispatched_at";

fn decode(row: &SqliteRow) -> StoreResult<Event> {
    let get = |name: &str| row.try_get::<Option<String>, _>(name).map_err(codec::backend);
    let data: String = row.try_get("data").map_err(codec::backend)?;
    Ok(Event {
        id: codec::uuid(&row.try_get::<String, _>("id").map_err(codec::backend)?)?,
        tenant_id: codec::tenant(&row.try_get::<String, _>("tenant_id").map_err(codec::backend)?)?,
        event_type: row.try_get("event_type").map_err(codec::backend)?,
        occurred_at: codec::ts(row.try_get("occurred_at").map_err(codec::backend)?),
        correlation_id: get("correlation_id")?,
        idempotency_key: get("idempotency_key")?,
        resource: ResourceRef {
            kind: row.try_get("resource_type").map_err(codec::backend)?,
            id: row.try_get("resource_id").map_err(codec::backend)?,
        },
        data: codec::json(&data)?,
        dispatched_at: row.try_get::<Option<i64>, _>("dispatched_at").map_err(codec::backend)?.map(codec::ts),
    })
}

#[async_trait]
impl EventStore for SqliteTx {
    async fn append(&mut self, event: &Event) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO events (id, tenant_id, event_type, occurred_at, correlation_id, idempotency_key,
                                 resource_type, resource_id, data, dispatched_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(codec::id_text(event.id))
        .bind(codec::id_text(event.tenant_id.as_uuid()))
        .bind(&event.event_type)
        .bind(event.occurred_at.as_micros())
        .bind(event.correlation_id.as_deref())
        .bind(event.idempotency_key.as_deref())
        .bind(&event.resource.kind)
        .bind(&event.resource.id)
        .bind(codec::json_text(&event.data))
        .bind(event.dispatched_at.map(Timestamp::as_micros))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Event>> {
        let sql = format!("SELECT {COLUMNS} FROM events WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(codec::id_text(id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode).transpose()
    }

    async fn list(&mut self, tenant: TenantId, filter: &EventFilter, window: KeysetRequest) -> StoreResult<Vec<Event>> {
        let sql = format!(
            "SELECT {COLUMNS} FROM events
             WHERE tenant_id = $1
               AND ($2 IS NULL OR event_type = $2)
               AND ($3 IS NULL OR occurred_at >= $3)
               AND ($4 IS NULL OR occurred_at < $4)
               AND ($5 IS NULL OR occurred_at < $5 OR (occurred_at = $5 AND id < $6))
             ORDER BY occurred_at DESC, id DESC
             LIMIT $7"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(filter.event_type.as_deref())
            .bind(filter.from.map(Timestamp::as_micros))
            .bind(filter.to.map(Timestamp::as_micros))
            .bind(window.after.map(|p| p.at_micros))
            .bind(window.after.map(|p| codec::id_text(p.id)))
            .bind(i64::from(window.limit))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode).collect()
    }

    async fn mark_dispatched(&mut self, id: Uuid, now: Timestamp) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE events SET dispatched_at = $1 WHERE id = $2 AND dispatched_at IS NULL")
            .bind(now.as_micros())
            .bind(codec::id_text(id))
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }
}
