//! Webhook registrations, their deliveries and the delivery signing keys on SQLite:
//! `WebhookStore`. A list of ids is bound as one JSON array and read through `json_each`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Params, Row, params};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, Webhook};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, DELIVERY_COLUMNS, WEBHOOK_COLUMNS};
use tokenops_store::{StoreResult, WebhookSigningKeyRecord, WebhookStore};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Webhook> {
    rows::webhook(&codec::Cols(row))
}

fn micros(at: Option<Timestamp>) -> Option<i64> {
    at.map(Timestamp::as_micros)
}

/// A webhook's values in `WEBHOOK_COLUMNS` order: the insert binds them all, the update the columns it
/// may change, each by its place in that list.
fn webhook_values(w: &Webhook) -> impl Params + '_ {
    (
        codec::id_text(w.id),
        codec::id_text(w.tenant_id.as_uuid()),
        &w.url,
        w.signature_scheme.as_str(),
        codec::names_text(&w.event_types),
        w.status.as_str(),
        i64::from(w.consecutive_failures),
        &w.sealed_secret,
        &w.sealed_previous_secret,
        micros(w.previous_secret_expires_at),
        w.created_at.as_micros(),
        w.updated_at.as_micros(),
        micros(w.deleted_at),
    )
}

/// A delivery's values in `DELIVERY_COLUMNS` order, as `webhook_values`.
fn delivery_values(d: &Delivery) -> impl Params + '_ {
    (
        codec::id_text(d.id),
        codec::id_text(d.tenant_id.as_uuid()),
        codec::id_text(d.event_id),
        codec::id_text(d.webhook_id),
        i64::from(d.generation),
        d.status.as_str(),
        i64::from(d.attempts),
        d.created_at.as_micros(),
        d.updated_at.as_micros(),
        micros(d.next_retry_at),
        d.failure_class.map(|c| c.as_str()),
        &d.failure_reason,
        micros(d.parked_at),
        micros(d.last_attempt_at),
        d.last_status_code.map(i64::from),
    )
}

impl SqliteTx {
    /// The organisation's webhook with the id, `suffix` ending the condition (liveness).
    fn fetch_webhook(&self, tenant: TenantId, id: Uuid, suffix: &str) -> StoreResult<Option<Webhook>> {
        self.fetch_optional(
            &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ?1 AND id = ?2 {suffix}"),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
            decode,
        )
    }
}

#[async_trait]
impl WebhookStore for SqliteTx {
    async fn backlog_by_registration_status(&mut self) -> StoreResult<Vec<(String, u64)>> {
        self.fetch_all(
            "SELECT w.status AS status, COUNT(*) AS waiting FROM webhook_deliveries d
             JOIN webhooks w ON w.id = d.webhook_id
             WHERE d.status IN ('PENDING', 'RETRY_PENDING') GROUP BY w.status ORDER BY w.status",
            params![],
            |row| Ok((codec::get(row, "status")?, u64::try_from(codec::get::<i64>(row, "waiting")?).unwrap_or(0))),
        )
    }

    async fn insert(&mut self, w: &Webhook) -> StoreResult<()> {
        self.insert_row(&rows::WEBHOOKS, webhook_values(w))
    }

    async fn update(&mut self, w: &Webhook) -> StoreResult<()> {
        self.execute(
            "UPDATE webhooks SET event_types = ?5, status = ?6, consecutive_failures = ?7, sealed_secret = ?8,
             sealed_previous_secret = ?9, previous_secret_expires_at = ?10, updated_at = ?12, deleted_at = ?13
             WHERE tenant_id = ?2 AND id = ?1",
            webhook_values(w),
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        self.fetch_webhook(tenant, id, "AND deleted_at IS NULL")
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a webhook for update")?;
        self.get(tenant, id).await
    }

    async fn get_any(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>> {
        self.fetch_webhook(tenant, id, "")
    }

    async fn find_by_url(&mut self, tenant: TenantId, url: &str) -> StoreResult<Option<Webhook>> {
        self.fetch_optional(
            &format!("SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ?1 AND url = ?2 AND deleted_at IS NULL"),
            params![codec::id_text(tenant.as_uuid()), url],
            decode,
        )
    }

    async fn list(&mut self, tenant: TenantId, window: KeysetRequest) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            &format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                 WHERE tenant_id = ?1 AND deleted_at IS NULL
                   AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            params![
                codec::id_text(tenant.as_uuid()),
                window.after.map(|p| p.at_micros),
                window.after.map(|p| codec::id_text(p.id)),
                i64::from(window.limit),
            ],
            decode,
        )
    }

    async fn live(&mut self, tenant: TenantId) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            &format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks WHERE tenant_id = ?1 AND deleted_at IS NULL ORDER BY created_at, id"
            ),
            params![codec::id_text(tenant.as_uuid())],
            decode,
        )
    }

    async fn insert_delivery(&mut self, d: &Delivery) -> StoreResult<()> {
        self.insert_row(&rows::DELIVERIES, delivery_values(d))
    }

    async fn update_delivery(&mut self, d: &Delivery) -> StoreResult<()> {
        self.execute(
            "UPDATE webhook_deliveries SET status = ?6, attempts = ?7, updated_at = ?9, next_retry_at = ?10,
             failure_class = ?11, failure_reason = ?12, parked_at = ?13, last_attempt_at = ?14, last_status_code = ?15
             WHERE tenant_id = ?2 AND id = ?1",
            delivery_values(d),
        )?;
        Ok(())
    }

    async fn deliveries_of(&mut self, tenant: TenantId, event_ids: &[Uuid]) -> StoreResult<Vec<Delivery>> {
        if event_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::Value::from(event_ids.iter().map(|id| codec::id_text(*id)).collect::<Vec<_>>());
        self.fetch_all(
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                 WHERE tenant_id = ?1 AND event_id IN (SELECT value FROM json_each(?2))
                 ORDER BY event_id, webhook_id, generation"
            ),
            params![codec::id_text(tenant.as_uuid()), ids.to_string()],
            codec::decoded,
        )
    }

    async fn queued_of(&mut self, tenant: TenantId, webhook_id: Uuid) -> StoreResult<Vec<Delivery>> {
        self.fetch_all(
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries
                 WHERE tenant_id = ?1 AND webhook_id = ?2 AND status IN ('PENDING', 'RETRY_PENDING')
                 ORDER BY created_at, id"
            ),
            params![codec::id_text(tenant.as_uuid()), codec::id_text(webhook_id)],
            codec::decoded,
        )
    }

    async fn replays_since(&mut self, tenant: TenantId, since: Timestamp) -> StoreResult<u64> {
        let count: i64 = self.scalar(
            "SELECT COUNT(*) FROM webhook_deliveries WHERE tenant_id = ?1 AND generation > 1 AND created_at >= ?2",
            params![codec::id_text(tenant.as_uuid()), since.as_micros()],
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn signing_keys(&mut self) -> StoreResult<Vec<WebhookSigningKeyRecord>> {
        self.fetch_all(
            "SELECT kid, sealed_key, created_at, retire_at FROM webhook_signing_keys ORDER BY created_at, kid",
            [],
            |row| rows::webhook_signing_key(&codec::Cols(row)),
        )
    }

    async fn insert_signing_key(&mut self, key: &WebhookSigningKeyRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO webhook_signing_keys (kid, sealed_key, created_at, retire_at) VALUES (?1, ?2, ?3, ?4)",
            params![&key.kid, &key.sealed_key, key.created_at.as_micros(), micros(key.retire_at)],
        )?;
        Ok(())
    }

    async fn retire_signing_key(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<bool> {
        let changed = self.execute(
            "UPDATE webhook_signing_keys SET retire_at = ?1 WHERE kid = ?2 AND retire_at IS NULL",
            params![retire_at.as_micros(), kid],
        )?;
        Ok(changed == 1)
    }

    async fn delete_retired_signing_keys(&mut self, now: Timestamp) -> StoreResult<u64> {
        let deleted =
            self.execute("DELETE FROM webhook_signing_keys WHERE retire_at <= ?1", params![now.as_micros()])?;
        Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
    }
}
