//! Webhook registrations, their deliveries and the platform's JWS_ES256 signing keys:
//! `WebhookStore`.

use async_trait::async_trait;
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, Webhook, WebhookFilter};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{StoreResult, TableRows, TableWrites, rows};

/// A JWS_ES256 delivery signing key, sealed under the master key (associated data: the kid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookSigningKeyRecord {
    pub kid: String,
    pub sealed_key: String,
    pub created_at: Timestamp,
    /// Set when a newer key replaced it: it signs no more, and is published until then.
    pub retire_at: Option<Timestamp>,
}

#[async_trait]
pub trait WebhookStore: Send + TableRows<Delivery> + TableWrites {
    /// Deliveries waiting (PENDING or RETRY_PENDING) in all organisations, by the status of
    /// their registration (ACTIVE, INACTIVE, SUSPENDED): the backlog the metrics show.
    async fn backlog_by_registration_status(&mut self) -> StoreResult<Vec<(String, u64)>>;
    /// `StoreError::Conflict` when the organisation has a registration (not deleted) with the
    /// same URL.
    async fn insert(&mut self, webhook: &Webhook) -> StoreResult<()> {
        self.insert_row(&rows::WEBHOOKS, webhook.values()?, "webhook url").await
    }
    /// Replaces event_types, status, consecutive_failures, the secrets, updated_at, deleted_at.
    async fn update(&mut self, webhook: &Webhook) -> StoreResult<()> {
        let set = [
            "event_types",
            "status",
            "consecutive_failures",
            "sealed_secret",
            "sealed_previous_secret",
            "previous_secret_expires_at",
            "updated_at",
            "deleted_at",
            "past_subscriptions",
        ];
        self.update_row(&rows::WEBHOOKS, webhook.values()?, &set).await.map(drop)
    }
    /// A registration that is not deleted.
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>>;
    /// As `get`, locking the row for the rest of the transaction: every change of a
    /// registration (its failure count included) takes this lock first.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>>;
    /// A registration, deleted or not.
    async fn get_any(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Webhook>>;
    /// The registration (not deleted) with this normalised URL.
    async fn find_by_url(&mut self, tenant: TenantId, url: &str) -> StoreResult<Option<Webhook>>;
    /// Not deleted, created in `created` (half-open), newest first by created_at, then id; up
    /// to `window.limit` after the position.
    async fn list(
        &mut self,
        tenant: TenantId,
        created: WebhookFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<Webhook>>;
    /// Every registration of the organisation not deleted, oldest first: the dispatcher picks
    /// the subscribers of an event among them.
    async fn live(&mut self, tenant: TenantId) -> StoreResult<Vec<Webhook>>;

    async fn insert_delivery(&mut self, delivery: &Delivery) -> StoreResult<()> {
        self.insert_row(&rows::DELIVERIES, delivery.values()?, "delivery generation").await
    }
    /// Replaces status, attempts, next_retry_at, the failure fields, parked_at, the last
    /// attempt's fields and updated_at.
    async fn update_delivery(&mut self, delivery: &Delivery) -> StoreResult<()> {
        let set = [
            "status",
            "attempts",
            "updated_at",
            "next_retry_at",
            "failure_class",
            "failure_reason",
            "parked_at",
            "last_attempt_at",
            "last_status_code",
        ];
        self.update_row(&rows::DELIVERIES, delivery.values()?, &set).await.map(drop)
    }
    async fn get_delivery(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Delivery>> {
        self.row_by_key(tenant, &rows::DELIVERIES, KeyValue::Id(id), false).await
    }
    /// As `get_delivery`, locked for the rest of the transaction.
    async fn get_delivery_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<Delivery>> {
        self.row_by_key(tenant, &rows::DELIVERIES, KeyValue::Id(id), true).await
    }
    /// The deliveries of these events, by event, registration and generation.
    async fn deliveries_of(&mut self, tenant: TenantId, event_ids: &[Uuid]) -> StoreResult<Vec<Delivery>>;
    /// A registration's deliveries in PENDING or RETRY_PENDING, oldest first.
    async fn queued_of(&mut self, tenant: TenantId, webhook_id: Uuid) -> StoreResult<Vec<Delivery>>;
    /// Waits for the organisation's replays in flight and holds its turn for the rest of the
    /// transaction: its replays take turns, so each judges the latest generations and counts
    /// the budget after the one before it committed.
    async fn take_replay_turn(&mut self, tenant: TenantId) -> StoreResult<()>;
    /// How many replays (deliveries above generation 1) the organisation created at or after
    /// `since`: the replay budget.
    async fn replays_since(&mut self, tenant: TenantId, since: Timestamp) -> StoreResult<u64>;

    /// The delivery signing keys, oldest first.
    async fn signing_keys(&mut self) -> StoreResult<Vec<WebhookSigningKeyRecord>>;
    async fn insert_signing_key(&mut self, key: &WebhookSigningKeyRecord) -> StoreResult<()> {
        self.insert_row(&rows::WEBHOOK_SIGNING_KEYS, key.values()?, "webhook signing key").await
    }
    /// Sets `retire_at` of a key that is not retiring yet; false when it was already retiring
    /// (another rotation took it first; on PostgreSQL this waits for that one's commit).
    async fn retire_signing_key(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<bool>;
    /// Deletes the keys whose `retire_at` is at or before `now`; returns how many.
    async fn delete_retired_signing_keys(&mut self, now: Timestamp) -> StoreResult<u64>;
}
