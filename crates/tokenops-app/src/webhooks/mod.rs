//! Webhook registrations (create, list, read, change, delete, test, secret rotation), the
//! delivery signing material (HMAC secrets sealed per registration, the platform's JWS_ES256
//! key), and the views the API returns. Deliveries are `deliver` (the job) and `replay`; the
//! dispatcher's fan-out is `fan_out` over `live_for_dispatch`, called by `event.dispatch`.

mod deliver;
mod keys;
mod replay;

pub use deliver::{DeliverWebhook, EventBody, fan_out, live_for_dispatch};
pub use keys::{DeliveryKeys, JWS_KEY_OVERLAP_MS, RotateDeliveryKey};
pub use replay::{FilteredReplay, QueuedDelivery, SkippedDelivery};

use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::paging::KeysetRequest;
use tokenops_domain::webhook::{Delivery, SECRET_OVERLAP_MS, SignatureScheme, Webhook, WebhookFilter, WebhookStatus};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_identity::Sealer;
use tokenops_store::{NewJob, Store, StoreError, Tx};
use tokenops_webhooks::address::AddressRule;
use tokenops_webhooks::destinations::DestinationSlots;
use tokenops_webhooks::retry::AttemptOutcome;
use tokenops_webhooks::transport::Transport;
use tokenops_webhooks::url::WebhookUrl;
use uuid::Uuid;

use crate::clock::Clock;
use crate::error::{AppResult, Code, Error, FieldError};
use crate::jobs::kinds;
use crate::write::{AuditAction, AuditResource, Write};

const WEBHOOK: AuditResource = AuditResource { category: "WEBHOOKS", resource_type: "webhook" };
pub const CREATE: AuditAction = WEBHOOK.action("webhook.create");
pub const UPDATE: AuditAction = WEBHOOK.action("webhook.update");
pub const DELETE: AuditAction = WEBHOOK.action("webhook.delete");
pub const TEST: AuditAction = WEBHOOK.action("webhook.test");
pub const ROTATE: AuditAction = WEBHOOK.action("webhook.secret_rotate");
/// A registration's run of failed attempts reached ten (a WORKER record, beyond the spec).
pub const FAILING: AuditAction = WEBHOOK.action("webhook.failing");
/// Twenty failed attempts in a row suspended a registration (a WORKER record).
pub const SUSPENDED: AuditAction = WEBHOOK.action("webhook.suspended");
const WEBHOOK_EVENT: AuditResource = AuditResource { category: "WEBHOOKS", resource_type: "webhook_event" };
pub const REDELIVER: AuditAction = WEBHOOK_EVENT.action("webhook_event.redeliver");
pub const REDELIVER_FILTERED: AuditAction = WEBHOOK_EVENT.action("webhook_event.redeliver_filtered");

/// What an event takes from the request that caused it, for an event made outside that
/// request's write (the test delivery's).
#[derive(Debug, Clone, Default)]
pub struct EventOrigin {
    pub correlation_id: Option<String>,
    pub idempotency_key: Option<String>,
}

/// Tunables of the webhooks area.
#[derive(Debug, Clone)]
pub struct WebhookSettings {
    /// The first retry delay (`TOKENOPS_WEBHOOK_RETRY_BASE_MS`).
    pub retry_base_ms: i64,
    /// Replays an organisation may queue per hour, across both redeliver calls.
    pub replay_budget: u64,
    /// `iss` and `sub` of JWS_ES256 deliveries: the service's public URL.
    pub issuer: String,
    pub job_max_attempts: u32,
    /// Attempts in flight at once per destination (origin), per node
    /// (`TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION`).
    pub max_in_flight_per_destination: usize,
    /// The age at which the JWS_ES256 signing key is replaced
    /// (`TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS`; 0: never).
    pub jws_key_rotation_days: u32,
}

/// What the webhooks area is given: the transport (its address rule and trusted roots) and its
/// settings.
pub struct WebhookAdapters {
    pub transport: Arc<Transport>,
    pub settings: WebhookSettings,
}

/// A registration as the API returns it. `secret` only in the creation's and rotation's
/// answers; `previousSecretExpiresAt` while a rotated-out secret still signs. `Debug` never
/// shows the secret.
#[derive(Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookOut {
    pub id: Uuid,
    pub url: String,
    pub signature_scheme: SignatureScheme,
    pub event_types: Vec<String>,
    pub status: WebhookStatus,
    /// Failed attempts since the last success; twenty suspend the registration.
    pub consecutive_failures: u32,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC.
    pub created_at: String,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC.
    pub updated_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_secret_expires_at: Option<String>,
}

impl WebhookOut {
    pub fn new(w: &Webhook, now: Timestamp) -> Self {
        Self {
            id: w.id,
            url: w.url.clone(),
            signature_scheme: w.signature_scheme,
            event_types: w.event_types.clone(),
            status: w.status,
            consecutive_failures: w.consecutive_failures,
            created_at: w.created_at.to_spaced_utc(),
            updated_at: w.updated_at.to_spaced_utc(),
            secret: None,
            previous_secret_expires_at: w
                .live_previous_secret(now)
                .and(w.previous_secret_expires_at)
                .map(Timestamp::to_spaced_utc),
        }
    }
}

impl std::fmt::Debug for WebhookOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookOut")
            .field("id", &self.id)
            .field("url", &self.url)
            .field("status", &self.status)
            .field("secret", &self.secret.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl WebhookOut {
    fn with_secret(mut self, secret: String) -> Self {
        self.secret = Some(secret);
        self
    }
}

/// A delivery as the history shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DeliveryOut {
    pub id: Uuid,
    pub webhook_id: Uuid,
    pub generation: u32,
    pub status: tokenops_domain::webhook::DeliveryStatus,
    pub attempts: u32,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC, as every timestamp here.
    pub created_at: String,
    /// While RETRY_PENDING: when the next attempt goes.
    pub next_retry_at: Option<String>,
    /// The last failed attempt's class: set from the first failure on (while RETRY_PENDING
    /// too, so an operator sees why it retries), final once PARKED; null when none failed.
    pub failure_class: Option<tokenops_domain::webhook::FailureClass>,
    /// The last failed attempt's reason, as failureClass.
    pub failure_reason: Option<String>,
    /// When it was PARKED.
    pub parked_at: Option<String>,
    /// When the last attempt was made; null before the first.
    pub last_attempt_at: Option<String>,
    /// The receiver's HTTP status at the last attempt, when it answered.
    pub last_status_code: Option<u16>,
}

impl From<&Delivery> for DeliveryOut {
    fn from(d: &Delivery) -> Self {
        Self {
            id: d.id,
            webhook_id: d.webhook_id,
            generation: d.generation,
            status: d.status,
            attempts: d.attempts,
            created_at: d.created_at.to_spaced_utc(),
            next_retry_at: d.next_retry_at.map(Timestamp::to_spaced_utc),
            failure_class: d.failure_class,
            failure_reason: d.failure_reason.clone(),
            parked_at: d.parked_at.map(Timestamp::to_spaced_utc),
            last_attempt_at: d.last_attempt_at.map(Timestamp::to_spaced_utc),
            last_status_code: d.last_status_code,
        }
    }
}

/// The outcome of a test delivery (`POST /api/webhooks/{id}/test`).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestOutcome {
    /// The `webhook.test` event sent (its id is the Webhook-Event-Id header).
    pub event_id: Uuid,
    /// The receiver answered with a success status.
    pub delivered: bool,
    /// The receiver's HTTP status, when it answered.
    pub status_code: Option<u16>,
    /// UNREACHABLE, TIMEOUT or REJECTED when not delivered.
    pub failure_class: Option<String>,
    pub failure_reason: Option<String>,
}

/// A registration request, parsed.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub url: WebhookUrl,
    pub signature_scheme: SignatureScheme,
    pub event_types: Vec<String>,
}

/// A change of a registration (PATCH); at least one field.
#[derive(Debug, Clone, Default)]
pub struct WebhookChange {
    pub status: Option<WebhookStatus>,
    pub event_types: Option<Vec<String>>,
}

/// Parses event type names: every unknown one is named in the message and in `details`;
/// repeats are dropped.
pub fn event_types(field: &str, names: &[String]) -> AppResult<Vec<String>> {
    let unknown: Vec<(usize, &String)> =
        names.iter().enumerate().filter(|(_, name)| EventType::parse(name).is_none()).collect();
    if unknown.is_empty() {
        let mut types: Vec<String> = Vec::with_capacity(names.len());
        for name in names {
            if !types.contains(name) {
                types.push(name.clone());
            }
        }
        return Ok(types);
    }
    // The message names every offender (the spec's rule); details add each one's place.
    let named: Vec<String> = unknown.iter().map(|(_, name)| format!("{name:?}")).collect();
    let message = format!("{field}: unknown event types: {}", named.join(", "));
    let offenders: Vec<FieldError> = unknown
        .into_iter()
        .map(|(i, name)| FieldError {
            field: format!("{field}[{i}]"),
            message: format!(
                "unknown event type {name:?}; known types: {}",
                EventType::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
            ),
        })
        .collect();
    Err(Error::bad_request(message).with_details(offenders))
}

pub fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Webhook {id} not found")).with_code(Code::WebhookNotFound)
}

fn secret_aad(webhook_id: Uuid) -> Vec<u8> {
    format!("tokenops/webhook-secret/{webhook_id}").into_bytes()
}

/// The registration's secrets, opened: the current one, and the previous one while its overlap
/// lasts. `Debug` shows neither.
pub(crate) struct Secrets {
    pub current: String,
    pub previous: Option<String>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets").finish_non_exhaustive()
    }
}

pub(crate) fn open_secrets(sealer: &Sealer, w: &Webhook, now: Timestamp) -> AppResult<Option<Secrets>> {
    let open = |sealed: &str| -> AppResult<String> {
        let plain =
            sealer.open(sealed, &secret_aad(w.id)).map_err(|e| Error::internal(format!("webhook secret: {e}")))?;
        String::from_utf8(plain.to_vec()).map_err(|_| Error::internal("a webhook secret is not UTF-8"))
    };
    let Some(current) = w.sealed_secret.as_deref() else { return Ok(None) };
    let previous = w.live_previous_secret(now).map(open).transpose()?;
    Ok(Some(Secrets { current: open(current)?, previous }))
}

/// The `webhook.deliver` job of a delivery's next attempt (`attempt`, from 1), due at `run_at`.
pub(crate) fn deliver_job(delivery: &Delivery, attempt: u32, run_at: Timestamp, max_attempts: u32) -> NewJob {
    NewJob {
        kind: kinds::WEBHOOK_DELIVER.to_owned(),
        tenant_id: Some(delivery.tenant_id),
        payload: crate::trace::stamp(serde_json::json!({ "deliveryId": delivery.id, "attempt": attempt })),
        run_at,
        max_attempts,
        // One live job per attempt of a delivery: setting a registration ACTIVE queues the
        // attempt of each delivery that waited, and a job still queued for one keeps it alone.
        dedupe_key: Some(format!("{}:{}:{attempt}", kinds::WEBHOOK_DELIVER, delivery.id)),
    }
}

pub struct Webhooks {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    sealer: Arc<Sealer>,
    transport: Arc<Transport>,
    settings: WebhookSettings,
    /// Attempts in flight per destination on this node.
    destinations: DestinationSlots,
    pub keys: Arc<DeliveryKeys>,
}

impl Webhooks {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
        sealer: Arc<Sealer>,
        adapters: WebhookAdapters,
        keys: Arc<DeliveryKeys>,
    ) -> Self {
        let destinations = DestinationSlots::new(adapters.settings.max_in_flight_per_destination);
        Self { store, clock, sealer, transport: adapters.transport, settings: adapters.settings, destinations, keys }
    }

    pub fn settings(&self) -> &WebhookSettings {
        &self.settings
    }

    /// The address rule a registration's URL must pass (rule 1); resolved by the service.
    pub fn address_rule(&self) -> &AddressRule {
        self.transport.rule()
    }

    /// Registration rule 1: the host resolves, and only to addresses webhooks may reach. A
    /// 400 naming the refused address otherwise. Runs before the write: it waits for DNS.
    pub async fn check_url(&self, url: &WebhookUrl) -> AppResult<()> {
        self.address_rule().resolve(url).await.map(|_| ()).map_err(|e| Error::invalid_field("url", e))
    }

    pub async fn list(
        &self,
        tenant: TenantId,
        created: WebhookFilter,
        window: KeysetRequest,
    ) -> AppResult<Vec<Webhook>> {
        let mut tx = self.store.read().await?;
        Ok(tx.webhooks().list(tenant, created, window).await?)
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<WebhookOut> {
        let mut tx = self.store.read().await?;
        let w = tx.webhooks().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        Ok(WebhookOut::new(&w, self.clock.now()))
    }

    /// Registers a destination (ACTIVE), with its secret for HMAC_SHA256, and sends it a
    /// `webhook.test` delivery (rule 5): an event of its own, recorded in the history and
    /// delivered to this registration only, whatever it subscribes to.
    pub async fn create(&self, w: &mut Write, new: NewWebhook) -> AppResult<WebhookOut> {
        let tenant = w.tenant()?;
        let now = w.now();
        if let Some(existing) = w.tx().webhooks().find_by_url(tenant, new.url.as_str()).await? {
            return Err(url_taken(&new.url, Some(existing.id)));
        }
        let id = new_id();
        let secret = match new.signature_scheme {
            SignatureScheme::HmacSha256 => Some(tokenops_webhooks::signing::new_secret()),
            SignatureScheme::JwsEs256 => None,
        };
        let webhook = Webhook {
            id,
            tenant_id: tenant,
            url: new.url.as_str().to_owned(),
            signature_scheme: new.signature_scheme,
            event_types: new.event_types,
            status: WebhookStatus::Active,
            consecutive_failures: 0,
            sealed_secret: secret.as_ref().map(|s| self.sealer.seal(s.as_bytes(), &secret_aad(id))),
            sealed_previous_secret: None,
            previous_secret_expires_at: None,
            created_at: now,
            updated_at: now,
            deleted_at: None,
            past_subscriptions: Vec::new(),
        };
        match w.tx().webhooks().insert(&webhook).await {
            Ok(()) => {}
            // Registered by a concurrent request since our read (PostgreSQL, where the insert
            // waited for it to commit): named from this same transaction, as the read would have.
            Err(StoreError::Conflict(_)) => {
                let existing = w.tx().webhooks().find_by_url(tenant, new.url.as_str()).await?;
                return Err(url_taken(&new.url, existing.map(|e| e.id)));
            }
            Err(e) => return Err(e.into()),
        }
        let out = WebhookOut::new(&webhook, now);
        self.send_test_event(w, &webhook, &out).await?;
        w.set_resource_id(id.to_string());
        w.set_audit_detail(serde_json::json!({
            "url": webhook.url, "signatureScheme": webhook.signature_scheme, "eventTypes": webhook.event_types,
        }));
        Ok(match secret {
            Some(secret) => out.with_secret(secret),
            None => out,
        })
    }

    async fn send_test_event(&self, w: &mut Write, webhook: &Webhook, out: &WebhookOut) -> AppResult<()> {
        let now = w.now();
        let event = Event {
            id: new_id(),
            tenant_id: webhook.tenant_id,
            event_type: EventType::WebhookTest.as_str().to_owned(),
            occurred_at: now,
            correlation_id: w.context().correlation_id.clone(),
            idempotency_key: w.idempotency_key().map(str::to_owned),
            resource: ResourceRef::new("webhook", webhook.id.to_string()),
            data: serde_json::to_value(out).map_err(Error::internal)?,
            // Dispatched here, to this registration alone: the dispatcher would send it to
            // every registration subscribed to webhook.test.
            dispatched_at: Some(now),
        };
        w.tx().events().append(&event).await?;
        let delivery = Delivery::new(webhook.tenant_id, event.id, webhook.id, 1, new_id(), now);
        w.tx().webhooks().insert_delivery(&delivery).await?;
        w.tx().jobs().enqueue_fresh_key(&deliver_job(&delivery, 1, now, self.settings.job_max_attempts), now).await?;
        Ok(())
    }

    /// PATCH: status ACTIVE or INACTIVE (ACTIVE clears a suspension and sends what waited),
    /// and/or the whole set of event types (`[]` subscribes to nothing).
    pub async fn update(&self, w: &mut Write, id: Uuid, change: WebhookChange) -> AppResult<WebhookOut> {
        let tenant = w.tenant()?;
        let mut webhook = w.tx().webhooks().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let now = w.now();
        let (types_before, received_before) = (webhook.event_types.clone(), webhook.status.receives_events());
        let mut resumes = false;
        if let Some(status) = change.status {
            resumes = webhook.set_status(status, now).map_err(|m| Error::invalid_field("status", m))?;
        }
        if let Some(types) = change.event_types
            && types != webhook.event_types
        {
            webhook.event_types = types;
            webhook.updated_at = now;
        }
        webhook.keep_past_subscription(types_before, received_before, now);
        w.tx().webhooks().update(&webhook).await?;
        if resumes {
            // Deliveries that waited while it was not ACTIVE go out now (a retry keeps its
            // time). One whose job is still queued keeps that job: the attempt's dedupe key
            // refuses a second, so no attempt is sent twice.
            for delivery in w.tx().webhooks().queued_of(tenant, id).await? {
                let run_at = delivery.next_retry_at.filter(|at| *at > now).unwrap_or(now);
                let job = deliver_job(&delivery, delivery.attempts + 1, run_at, self.settings.job_max_attempts);
                w.tx().jobs().enqueue(&job, now).await?;
            }
        }
        w.set_resource_id(id.to_string());
        w.set_audit_detail(serde_json::json!({ "status": webhook.status, "eventTypes": webhook.event_types }));
        Ok(WebhookOut::new(&webhook, now))
    }

    /// DELETE: the registration is removed (its URL free again) and its queued deliveries
    /// CANCELLED; its history stays.
    pub async fn delete(&self, w: &mut Write, id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        let mut webhook = w.tx().webhooks().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let now = w.now();
        webhook.deleted_at = Some(now);
        webhook.updated_at = now;
        // The secrets are of no use any more.
        webhook.sealed_secret = None;
        webhook.sealed_previous_secret = None;
        webhook.previous_secret_expires_at = None;
        w.tx().webhooks().update(&webhook).await?;
        let mut cancelled = 0usize;
        for mut delivery in w.tx().webhooks().queued_of(tenant, id).await? {
            if delivery.cancel(now) {
                w.tx().webhooks().update_delivery(&delivery).await?;
                cancelled += 1;
            }
        }
        w.set_resource_id(id.to_string());
        w.set_audit_detail(serde_json::json!({ "url": webhook.url, "cancelledDeliveries": cancelled }));
        Ok(())
    }

    /// Rotation (HMAC_SHA256 only): a new secret, returned once; the one it replaces keeps
    /// signing for 24 hours beside it. A rotation inside that overlap retires the older one
    /// at once: one previous secret is held.
    pub async fn rotate(&self, w: &mut Write, id: Uuid) -> AppResult<WebhookOut> {
        let tenant = w.tenant()?;
        let mut webhook = w.tx().webhooks().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let now = w.now();
        if webhook.signature_scheme != SignatureScheme::HmacSha256 {
            return Err(Error::not_found(format!("Webhook {id} is signed with JWS_ES256 and has no secret to rotate"))
                .with_code(Code::WebhookNotFound));
        }
        let secret = tokenops_webhooks::signing::new_secret();
        webhook.sealed_previous_secret = webhook.sealed_secret.take();
        webhook.previous_secret_expires_at = Some(overlap_end(webhook.previous_secret_expires_at, now));
        webhook.sealed_secret = Some(self.sealer.seal(secret.as_bytes(), &secret_aad(id)));
        webhook.updated_at = now;
        w.tx().webhooks().update(&webhook).await?;
        w.set_resource_id(id.to_string());
        let out = WebhookOut::new(&webhook, now);
        w.set_audit_detail(serde_json::json!({ "previousSecretExpiresAt": out.previous_secret_expires_at }));
        Ok(out.with_secret(secret))
    }

    /// The test's first half, before its write: the registration must exist and not be
    /// INACTIVE; one attempt is made at once (no retry), holding no store transaction.
    pub async fn attempt_test(
        &self,
        tenant: TenantId,
        id: Uuid,
        origin: EventOrigin,
    ) -> AppResult<(Uuid, AttemptOutcome)> {
        let webhook = {
            let mut tx = self.store.read().await?;
            tx.webhooks().get(tenant, id).await?.ok_or_else(|| not_found(id))?
        };
        if webhook.status == WebhookStatus::Inactive {
            return Err(inactive(id));
        }
        let now = self.clock.now();
        let event = Event {
            id: new_id(),
            tenant_id: tenant,
            event_type: EventType::WebhookTest.as_str().to_owned(),
            occurred_at: now,
            correlation_id: origin.correlation_id,
            idempotency_key: origin.idempotency_key,
            resource: ResourceRef::new("webhook", id.to_string()),
            data: serde_json::to_value(WebhookOut::new(&webhook, now)).map_err(Error::internal)?,
            dispatched_at: Some(now),
        };
        let outcome = deliver::attempt(self, &webhook, &event, 1).await?;
        Ok((event.id, outcome))
    }

    /// The test's second half, in its write: a success resets the failure count (a failed
    /// test does not count towards suspension: it is not a delivery).
    pub async fn record_test(
        &self,
        w: &mut Write,
        id: Uuid,
        event_id: Uuid,
        outcome: &AttemptOutcome,
    ) -> AppResult<TestOutcome> {
        let tenant = w.tenant()?;
        let mut webhook = w.tx().webhooks().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let now = w.now();
        if outcome.is_delivered() {
            webhook.record_success(now);
            w.tx().webhooks().update(&webhook).await?;
        }
        let result = match outcome {
            AttemptOutcome::Delivered { status } => TestOutcome {
                event_id,
                delivered: true,
                status_code: Some(*status),
                failure_class: None,
                failure_reason: None,
            },
            AttemptOutcome::Failed { class, status, reason } => TestOutcome {
                event_id,
                delivered: false,
                status_code: *status,
                failure_class: Some(class.as_str().to_owned()),
                failure_reason: Some(reason.clone()),
            },
        };
        w.set_resource_id(id.to_string());
        w.set_audit_detail(serde_json::to_value(&result).map_err(Error::internal)?);
        Ok(result)
    }

    /// The secret a replayed creation or rotation answers again: kept out of the stored
    /// response (no secret lies in the idempotency records in clear), it is opened from the
    /// registration as long as that answer's secret is still the current one (no rotation
    /// since). `None` otherwise: the replay then answers without it.
    pub async fn secret_for_replay(&self, tenant: TenantId, stored: &serde_json::Value) -> AppResult<Option<String>> {
        let Some(id) = stored.get("id").and_then(|v| v.as_str()).and_then(|s| Uuid::parse_str(s).ok()) else {
            return Ok(None);
        };
        let webhook = {
            let mut tx = self.store.read().await?;
            tx.webhooks().get(tenant, id).await?
        };
        let Some(webhook) = webhook else { return Ok(None) };
        let answered = stored.get("previousSecretExpiresAt").and_then(|v| v.as_str());
        let latest = webhook.previous_secret_expires_at.map(Timestamp::to_spaced_utc);
        if answered != latest.as_deref() {
            return Ok(None);
        }
        Ok(open_secrets(&self.sealer, &webhook, self.clock.now())?.map(|s| s.current))
    }

    /// The organisation's event history rows for the API: deliveries of these events.
    pub async fn deliveries_of(&self, tenant: TenantId, event_ids: &[Uuid]) -> AppResult<Vec<Delivery>> {
        let mut tx = self.store.read().await?;
        Ok(tx.webhooks().deliveries_of(tenant, event_ids).await?)
    }
}

/// When the secret a rotation at `now` replaces stops signing: `SECRET_OVERLAP_MS` later, and
/// at least a millisecond after the end the previous rotation answered. A replay of a rotation's
/// key tells it from a later one by this instant as answered (to the millisecond), so two
/// rotations in one millisecond must not share it: the second's replay would show the first's
/// secret as its own.
fn overlap_end(previous: Option<Timestamp>, now: Timestamp) -> Timestamp {
    let end = now.plus_millis(SECRET_OVERLAP_MS);
    match previous {
        Some(previous) if previous.as_micros().div_euclid(1_000) >= end.as_micros().div_euclid(1_000) => {
            Timestamp::from_micros((previous.as_micros().div_euclid(1_000) + 1) * 1_000)
        }
        _ => end,
    }
}

/// The 409 of a URL taken, naming the registration that holds it (`None` only when that one was
/// deleted again before we could read it).
fn url_taken(url: &WebhookUrl, existing: Option<Uuid>) -> Error {
    let error = Error::conflict(format!("The URL {url} is already registered in this organisation"))
        .with_code(Code::WebhookUrlTaken);
    match existing {
        Some(id) => error.with_extra("existingWebhookId", id.to_string()),
        None => error,
    }
}

pub fn inactive(id: Uuid) -> Error {
    Error::conflict(format!("Webhook {id} is INACTIVE; set it ACTIVE first")).with_code(Code::WebhookInactive)
}

/// Loads what a delivery attempt needs, in one read; the registration is `None` once deleted.
pub(crate) async fn load_for_attempt(
    tx: &mut dyn Tx,
    tenant: TenantId,
    delivery_id: Uuid,
) -> AppResult<Option<(Delivery, Option<Webhook>, Event)>> {
    let Some(delivery) = tx.webhooks().get_delivery(tenant, delivery_id).await? else { return Ok(None) };
    let webhook = tx.webhooks().get(tenant, delivery.webhook_id).await?;
    let Some(event) = tx.events().get(tenant, delivery.event_id).await? else { return Ok(None) };
    Ok(Some((delivery, webhook, event)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_rotations_in_one_millisecond_answer_distinct_overlap_ends() {
        let now = Timestamp::from_micros(1_700_000_000_123_456);
        let first = overlap_end(None, now);
        assert_eq!(first, now.plus_millis(SECRET_OVERLAP_MS));
        let second = overlap_end(Some(first), now.plus_millis(0));
        assert_eq!(second.to_spaced_utc(), first.plus_millis(1).to_spaced_utc(), "a millisecond later");
        assert_ne!(second.to_spaced_utc(), first.to_spaced_utc());
        // A rotation a second later keeps its own 24 hours.
        let later = now.plus_millis(1_000);
        assert_eq!(overlap_end(Some(second), later), later.plus_millis(SECRET_OVERLAP_MS));
    }
}
