//! Webhook registrations, their deliveries and the delivery signing keys on PostgreSQL:
//! `WebhookStore`. Event types are a JSON array kept as text, as on SQLite.

use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, Webhook};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, DELIVERY_COLUMNS, WEBHOOK_COLUMNS};
use tokenops_store::{StoreError, StoreResult, WebhookSigningKeyRecord, WebhookStore};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Webhook> {
    rows::webhook(&codec::Cols(row))
}

fn micros(at: Option<Timestamp>) -> Option<i64> {
    at.map(Timestamp::as_micros)
}

fn int4(value: u32, what: &str) -> StoreResult<i32> {
    i32::try_from(value).map_err(|_| StoreError::Corrupt(format!("{what} {value} out of range")))
}

/// Binds a webhook's values in `WEBHOOK_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn bind_webhook<'q>(query: PgQuery<'q>, w: &'q Webhook) -> StoreResult<PgQuery<'q>> {
    Ok(query
        .bind(w.id)
        .bind(w.tenant_id.as_uuid())
        .bind(&w.url)
        .bind(w.signature_scheme.as_str())
        .bind(codec::names_text(&w.event_types))
        .bind(w.status.as_str())
        .bind(int4(w.consecutive_failures, "failure count")?)
        .bind(&w.sealed_secret)
        .bind(&w.sealed_previous_secret)
        .bind(micros(w.previous_secret_expires_at))
        .bind(w.created_at.as_micros())
        .bind(w.updated_at.as_micros())
        .bind(micros(w.deleted_at)))
}

/// Binds a delivery's values in `DELIVERY_COLUMNS` order, as `bind_webhook`.
fn bind_delivery<'q>(query: PgQuery<'q>, d: &'q Delivery) -> StoreResult<PgQuery<'q>> {
    Ok(query
        .bind(d.id)
        .bind(d.tenant_id.as_uuid())
        .bind(d.event_id)
        .bind(d.webhook_id)
        .bind(int4(d.generation, "generation")?)
        .bind(d.status.as_str())
        .bind(int4(d.attempts, "attempts")?)
        .bind(d.created_at.as_micros())
        .bind(d.updated_at.as_micros())
        .bind(micros(d.next_retry_at))
        .bind(d.failure_class.map(|c| c.as_str()))
        .bind(&d.failure_reason)
        .bind(micros(d.parked_at))
        .bind(micros(d.last_attempt_at))
        .bind(d.last_status_code.map(i32::from)))
}

#[async_trait]
impl WebhookStore for PostgresTx {
    async fn backlog_by_registration_status(&mut self) -> StoreResult<Vec<(String, u64)>> {
        let query = sqlx::query(
            "SELECT w.status, COUNT(*)::BIGINT AS waiting FROM webhook_deliveries d
             JOIN webhooks w ON w.id = d.webhook_id
             WHERE d.status IN ('PENDING', 'RETRY_PENDING') GROUP BY w.status ORDER BY w.status",
        );
        self.fetch_all(query, |row| Ok((codec::get(row, "status")?, codec::count(codec::get(row, "waiting")?)))).await
    }

    async fn insert(&mut self, w: &Webhook) -> StoreResult<()> {
        self.insert_new(bind_webhook(query::insert(&rows::WEBHOOKS), w)?, "webhook url").await
    }

    async fn update(&mut self, w: &Webhook) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE webhooks SET event_types = $5, status = $6, consecutive_failures = $7, sealed_secret = $8,
             sealed_previous_secret = $9, previous_secret_expires_at = $10, updated_at = $12, deleted_at = $13
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_webhook(query, w)?).await?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        self.fetch_by_key(&rows::WEBHOOKS, tenant, id, "AND deleted_at IS NULL", decode).await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        self.fetch_by_key(&rows::WEBHOOKS, tenant, id, "AND deleted_at IS NULL FOR UPDATE", decode).await
    }

    async fn get_any(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        self.fetch_by_key(&rows::WEBHOOKS, tenant, id, "", decode).await
    }

    async fn find_by_url(&mut self, tenant: TenantId, url: &str) -> StoreResult<Option<Webhook>> {
        self.fetch_optional(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND url = $2 AND deleted_at IS NULL"
            )))
            .bind(tenant.as_uuid())
            .bind(url.to_owned()),
            decode,
        )
        .await
    }

    async fn list(&mut self, tenant: TenantId, window: KeysetRequest) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                 WHERE tenant_id = $1 AND deleted_at IS NULL
                   AND ($2::bigint IS NULL OR (created_at, id) < ($2, $3::uuid))
                 ORDER BY created_at DESC, id DESC LIMIT $4"
            )))
            .bind(tenant.as_uuid())
            .bind(window.after.map(|p| p.at_micros))
            .bind(window.after.map(|p| p.id))
            .bind(i64::from(window.limit)),
            decode,
        )
        .await
    }

    async fn live(&mut self, tenant: TenantId) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = $1 AND deleted_at IS NULL ORDER BY created_at, id"
            )))
            .bind(tenant.as_uuid()),
            decode,
        )
        .await
    }

    async fn insert_delivery(&mut self, d: &Delivery) -> StoreResult<()> {
        self.insert_new(bind_delivery(query::insert(&rows::DELIVERIES), d)?, "delivery generation").await
    }

    async fn update_delivery(&mut self, d: &Delivery) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE webhook_deliveries SET status = $6, attempts = $7, updated_at = $9, next_retry_at = $10,
             failure_class = $11, failure_reason = $12, parked_at = $13, last_attempt_at = $14, last_status_code = $15
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_delivery(query, d)?).await?;
        Ok(())
    }

    async fn deliveries_of(&mut self, tenant: TenantId, event_ids: &[Uuid]) -> StoreResult<Vec<Delivery>> {
        if event_ids.is_empty() {
            return Ok(Vec::new());
        }
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                 WHERE tenant_id = $1 AND event_id = ANY($2)
                 ORDER BY event_id, webhook_id, generation"
            )))
            .bind(tenant.as_uuid())
            .bind(event_ids.to_vec()),
            codec::decoded,
        )
        .await
    }

    async fn queued_of(&mut self, tenant: TenantId, webhook_id: Uuid) -> StoreResult<Vec<Delivery>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                 WHERE tenant_id = $1 AND webhook_id = $2 AND status IN ('PENDING', 'RETRY_PENDING')
                 ORDER BY created_at, id"
            )))
            .bind(tenant.as_uuid())
            .bind(webhook_id),
            codec::decoded,
        )
        .await
    }

    async fn replays_since(&mut self, tenant: TenantId, since: Timestamp) -> StoreResult<u64> {
        let count: i64 = self
            .scalar(
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM webhook_deliveries WHERE tenant_id = $1 AND generation > 1 AND created_at >= $2",
                )
                .bind(tenant.as_uuid())
                .bind(since.as_micros()),
            )
            .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn signing_keys(&mut self) -> StoreResult<Vec<WebhookSigningKeyRecord>> {
        self.fetch_all(
            sqlx::query(
                "SELECT kid, sealed_key, created_at, retire_at FROM webhook_signing_keys ORDER BY created_at, kid",
            ),
            |row| rows::webhook_signing_key(&codec::Cols(row)),
        )
        .await
    }

    async fn insert_signing_key(&mut self, key: &WebhookSigningKeyRecord) -> StoreResult<()> {
        self.insert_new(
            sqlx::query(
                "INSERT INTO webhook_signing_keys (kid, sealed_key, created_at, retire_at) VALUES ($1, $2, $3, $4)
                     ON CONFLICT DO NOTHING",
            )
            .bind(key.kid.clone())
            .bind(key.sealed_key.clone())
            .bind(key.created_at.as_micros())
            .bind(key.retire_at.map(Timestamp::as_micros)),
            "webhook signing key",
        )
        .await
    }

    async fn retire_signing_key(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<bool> {
        let changed = self
            .execute(
                sqlx::query("UPDATE webhook_signing_keys SET retire_at = $1 WHERE kid = $2 AND retire_at IS NULL")
                    .bind(retire_at.as_micros())
                    .bind(kid.to_owned()),
            )
            .await?;
        Ok(changed == 1)
    }

    async fn delete_retired_signing_keys(&mut self, now: Timestamp) -> StoreResult<u64> {
        self.execute(sqlx::query("DELETE FROM webhook_signing_keys WHERE retire_at <= $1").bind(now.as_micros())).await
    }
}
