//! Webhook registrations, their deliveries and the delivery signing keys on PostgreSQL:
//! `WebhookStore`. Event types are a JSON array kept as text, as on SQLite.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, Webhook, WebhookFilter};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, DELIVERY_COLUMNS, WEBHOOK_COLUMNS};
use tokenops_store::{StoreResult, WebhookSigningKeyRecord, WebhookStore};
use uuid::Uuid;

fn decode(row: &PgRow) -> StoreResult<Webhook> {
    rows::webhook(&codec::Cols(row))
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

    async fn list(
        &mut self,
        tenant: TenantId,
        created: WebhookFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<Webhook>> {
        self.fetch_all(
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT {WEBHOOK_COLUMNS} FROM webhooks
                 WHERE tenant_id = $1 AND deleted_at IS NULL
                   AND ($2::bigint IS NULL OR (created_at, id) < ($2, $3::uuid))
                   AND ($5::bigint IS NULL OR created_at >= $5) AND ($6::bigint IS NULL OR created_at < $6)
                 ORDER BY created_at DESC, id DESC LIMIT $4"
            )))
            .bind(tenant.as_uuid())
            .bind(window.after.map(|p| p.at_micros))
            .bind(window.after.map(|p| p.id))
            .bind(i64::from(window.limit))
            .bind(created.from.map(Timestamp::as_micros))
            .bind(created.to.map(Timestamp::as_micros)),
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

    async fn take_replay_turn(&mut self, tenant: TenantId) -> StoreResult<()> {
        self.take_turn("replay", tenant).await
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
            codec::decoded,
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
