//! Webhook registrations, their deliveries and the delivery signing keys on SQLite:
//! `WebhookStore`. A list of ids is bound as one JSON array and read through `json_each`.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, Webhook, WebhookFilter};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, DELIVERY_COLUMNS, WEBHOOK_COLUMNS};
use tokenops_store::{StoreResult, WebhookSigningKeyRecord, WebhookStore};
use uuid::Uuid;

fn decode(row: &Row<'_>) -> StoreResult<Webhook> {
    rows::webhook(&codec::Cols(row))
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

    async fn list(
        &mut self,
        tenant: TenantId,
        created: WebhookFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            &format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                 WHERE tenant_id = ?1 AND deleted_at IS NULL
                   AND (?2 IS NULL OR created_at < ?2 OR (created_at = ?2 AND id < ?3))
                   AND (?5 IS NULL OR created_at >= ?5) AND (?6 IS NULL OR created_at < ?6)
                 ORDER BY created_at DESC, id DESC LIMIT ?4"
            ),
            params![
                codec::id_text(tenant.as_uuid()),
                window.after.map(|p| p.at_micros),
                window.after.map(|p| codec::id_text(p.id)),
                i64::from(window.limit),
                created.from.map(Timestamp::as_micros),
                created.to.map(Timestamp::as_micros),
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

    async fn take_replay_turn(&mut self, _tenant: TenantId) -> StoreResult<()> {
        // Write transactions take turns on SQLite already: each holds the one writer.
        Ok(())
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
            codec::decoded,
        )
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
