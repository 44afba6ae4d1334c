//! Deliveries as durable jobs: the dispatcher's fan-out (one PENDING delivery and one
//! `webhook.deliver` job per registration subscribed at that moment), and the job that makes one
//! attempt (body, signature, POST with no store transaction or connection held, within the
//! destination's bound on attempts in flight) and records it by the delivery state table,
//! counting the registration's consecutive failures and telling the organisation's other
//! registrations when they mark it failing or suspend it.

use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;
use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::audit::AuditOutcome;
use tokenops_domain::event::{Event, EventType, ResourceRef};
use tokenops_domain::webhook::{
    AttemptResult, Delivery, FailureClass, FailureMark, SignatureScheme, Webhook, WebhookStatus,
};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{Job, Tx};
use tokenops_webhooks::retry::{AttemptOutcome, NextStep, RetrySchedule, next_step, random_jitter};
use tokenops_webhooks::signing::{DeliverySigning, delivery_headers};
use tokenops_webhooks::url::{WebhookUrl, normalise};
use uuid::Uuid;

use super::{FAILING, SUSPENDED, WebhookOut, Webhooks, deliver_job, load_for_attempt, open_secrets};
use crate::error::{AppResult, Error};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};

/// The event as a delivery's body shows it (spec, Event body). Rebuilt from the stored event
/// for every attempt, field by field in this order, so every attempt sends the same bytes.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventBody<'a> {
    pub id: Uuid,
    #[serde(rename = "type")]
    pub event_type: &'a str,
    /// `yyyy-MM-dd HH:mm:ss.SSS` UTC.
    pub occurred_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<&'a str>,
    pub resource: &'a ResourceRef,
    pub data: &'a serde_json::Value,
}

impl<'a> EventBody<'a> {
    pub fn of(event: &'a Event) -> Self {
        Self {
            id: event.id,
            event_type: &event.event_type,
            occurred_at: event.occurred_at.to_spaced_utc(),
            correlation_id: event.correlation_id.as_deref(),
            idempotency_key: event.idempotency_key.as_deref(),
            resource: &event.resource,
            data: &event.data,
        }
    }

    pub fn bytes(&self) -> AppResult<Bytes> {
        serde_json::to_vec(self).map(Bytes::from).map_err(Error::internal)
    }
}

/// Inside the dispatcher's transaction: one PENDING delivery (generation 1) for every
/// registration subscribed to the event's type when it happened (`Webhook::subscribed_at`:
/// registered by then, ACTIVE or SUSPENDED, the type in its set; a change since, made before
/// the dispatch, neither adds nor takes away), none later (no backfill). An ACTIVE registration's delivery gets its job; a SUSPENDED
/// one's waits without one until the registration is set ACTIVE, which queues the jobs of what
/// waited: a job per event for a destination that receives nothing would take workers from
/// settlement for nothing. `registrations` are the organisation's live ones, read in the same
/// transaction, a SUSPENDED one's status under its lock (`live_for_dispatch`).
pub async fn fan_out(
    tx: &mut dyn Tx,
    event: &Event,
    registrations: &[Webhook],
    now: Timestamp,
    max_attempts: u32,
) -> AppResult<usize> {
    let mut made = 0;
    // A registration's health event goes to the others only.
    let about = EventType::parse(&event.event_type)
        .filter(|t| t.about_a_registration_health() && event.resource.kind == "webhook")
        .map(|_| event.resource.id.as_str());
    for webhook in registrations {
        if !webhook.subscribed_at(&event.event_type, event.occurred_at) {
            continue;
        }
        if about.is_some_and(|id| id == webhook.id.to_string()) {
            continue;
        }
        let delivery = Delivery::new(event.tenant_id, event.id, webhook.id, 1, new_id(), now);
        tx.webhooks().insert_delivery(&delivery).await?;
        if webhook.status.attempts_deliveries() {
            tx.jobs().enqueue_fresh_key(&deliver_job(&delivery, 1, now, max_attempts), now).await?;
        }
        made += 1;
    }
    Ok(made)
}

/// The organisation's live registrations as the dispatcher fans out to them. A SUSPENDED one is
/// read again under its lock, which its resumption takes too: either the resumption committed
/// first and this reads it ACTIVE (its deliveries get jobs here), or it waits for this
/// transaction and then finds the deliveries made here among those it sends. Without the lock a
/// delivery made beside a resumption would get no job from either.
/// One deleted meanwhile is left out (its deletion cancelled what was queued; a delivery made
/// now would wait for nothing). Locks are taken in id order, and the dispatcher takes its
/// organisations in id order, so two dispatch batches never wait on each other in a cycle.
pub async fn live_for_dispatch(tx: &mut dyn Tx, tenant: TenantId) -> AppResult<Vec<Webhook>> {
    let mut live = tx.webhooks().live(tenant).await?;
    live.sort_by_key(|w| w.id);
    let mut dispatched = Vec::with_capacity(live.len());
    for webhook in live {
        if webhook.status != WebhookStatus::Suspended {
            dispatched.push(webhook);
        } else if let Some(locked) = tx.webhooks().get_for_update(tenant, webhook.id).await? {
            dispatched.push(locked);
        }
    }
    Ok(dispatched)
}

/// One attempt of `event` to `webhook`: signs at the clock's time and POSTs. No store
/// transaction is open here.
pub(crate) async fn attempt(
    webhooks: &Webhooks,
    webhook: &Webhook,
    event: &Event,
    attempt: u32,
) -> AppResult<AttemptOutcome> {
    let body = EventBody::of(event).bytes()?;
    let url = stored_url(webhook)?;
    let timestamp = webhooks.clock.now().as_micros().div_euclid(1_000_000);
    let event_id = event.id.to_string();
    let headers = match webhook.signature_scheme {
        SignatureScheme::HmacSha256 => {
            let secrets = open_secrets(&webhooks.sealer, webhook, webhooks.clock.now())?
                .ok_or_else(|| Error::internal("an HMAC_SHA256 webhook without a secret"))?;
            let signing = DeliverySigning::Hmac { current: &secrets.current, previous: secrets.previous.as_deref() };
            delivery_headers(&signing, &event_id, timestamp, attempt, &body)
        }
        SignatureScheme::JwsEs256 => {
            let key = webhooks.keys.signing_key().await?;
            let registration_id = webhook.id.to_string();
            let signing = DeliverySigning::Jws {
                key: &key,
                issuer: &webhooks.settings.issuer,
                registration_id: &registration_id,
                url: &url,
            };
            delivery_headers(&signing, &event_id, timestamp, attempt, &body)
        }
    };
    Ok(webhooks.transport.post(&url, &headers, body).await)
}

fn stored_url(webhook: &Webhook) -> AppResult<WebhookUrl> {
    normalise(&webhook.url).map_err(|e| Error::internal(format!("a stored webhook URL: {e}")))
}

/// How long an attempt waits for a slot at its destination before it is put back: a healthy
/// receiver gives one back within milliseconds (putting the attempt back would cost it a
/// second), a dead one holds them for seconds.
const SLOT_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// How long an attempt that found its destination's slots all taken waits before it is tried
/// again (±50 %, so that the attempts put back together do not all come back together). An
/// attempt in flight ends within the transport's timeouts, a few seconds at most.
const SLOT_RETRY_MS: i64 = 1_000;

/// `webhook.deliver`: one attempt of one delivery (payload `deliveryId`, `attempt`).
pub struct DeliverWebhook(pub Arc<Webhooks>);

impl DeliverWebhook {
    /// The registration is not ACTIVE: the delivery waits without a job, and setting the
    /// registration ACTIVE queues its attempt. Read again under the registration's lock, which
    /// that change takes too: a change that committed since the read finds this job still
    /// queued (so queues no second one) and this job finds it ACTIVE and hands the attempt on.
    async fn wait_for_registration(
        &self,
        delivery: &Delivery,
        number: u32,
        ctx: &JobContext,
    ) -> Result<Finished, JobError> {
        let webhooks = &self.0;
        let mut tx = webhooks.store.write().await?;
        let resumed = tx
            .webhooks()
            .get_for_update(delivery.tenant_id, delivery.webhook_id)
            .await?
            .is_some_and(|w| w.status.attempts_deliveries());
        if !resumed {
            return ctx.finish(tx).await;
        }
        let now = ctx.clock().now();
        ctx.hand_over(tx, &deliver_job(delivery, number, now, webhooks.settings.job_max_attempts)).await
    }
}

impl DeliverWebhook {
    /// A queued delivery whose registration is deleted is CANCELLED, as the DELETE cancels the
    /// ones it sees. This one it could not see: a replay or an event's dispatch decided on the
    /// live registration and committed the delivery after the DELETE had looked. Without this
    /// it would stay queued for good.
    async fn cancel_for_deleted_registration(
        &self,
        tenant: TenantId,
        delivery_id: Uuid,
        ctx: &JobContext,
    ) -> Result<Finished, JobError> {
        let mut tx = self.0.store.write().await?;
        if let Some(mut delivery) = tx.webhooks().get_delivery_for_update(tenant, delivery_id).await?
            && delivery.cancel(ctx.clock().now())
        {
            tx.webhooks().update_delivery(&delivery).await?;
        }
        ctx.finish(tx).await
    }
}

#[async_trait]
impl JobHandler for DeliverWebhook {
    fn kind(&self) -> &'static str {
        kinds::WEBHOOK_DELIVER
    }

    async fn run(&self, job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let webhooks = &self.0;
        let (tenant, delivery_id, number) = payload(job)?;
        let loaded = {
            let mut tx = webhooks.store.read().await?;
            load_for_attempt(tx.as_mut(), tenant, delivery_id).await.map_err(JobError::retry)?
        };
        // Nothing to attempt: the delivery settled (delivered, parked, cancelled with its
        // registration), or this attempt was made.
        let Some((delivery, webhook, event)) =
            loaded.filter(|(d, _, _)| d.status.is_queued() && d.attempts + 1 == number)
        else {
            return ctx.finish(webhooks.store.write().await?).await;
        };
        let Some(webhook) = webhook else {
            return self.cancel_for_deleted_registration(tenant, delivery.id, ctx).await;
        };
        if !webhook.status.attempts_deliveries() {
            return self.wait_for_registration(&delivery, number, ctx).await;
        }
        let url = stored_url(&webhook).map_err(JobError::retry)?;
        let Some(slot) = webhooks.destinations.acquire_within(&url, SLOT_WAIT).await else {
            // The destination has kept its share of attempts in flight: this one goes back to
            // the queue, as the same attempt (the delivery's count is unchanged), and the worker
            // is free for other destinations' deliveries.
            let now = ctx.clock().now();
            let spread = rand::thread_rng().gen_range(SLOT_RETRY_MS / 2..=SLOT_RETRY_MS * 3 / 2);
            let job = deliver_job(&delivery, number, now.plus_millis(spread), webhooks.settings.job_max_attempts);
            return ctx.hand_over(webhooks.store.write().await?, &job).await;
        };
        let started = std::time::Instant::now();
        let outcome = attempt(webhooks, &webhook, &event, number).await.map_err(JobError::retry);
        let on_the_wire = started.elapsed().as_secs_f64();
        drop(slot);
        let outcome = outcome?;
        let mut tx = webhooks.store.write().await?;
        // The registration first, then the delivery: the order deletion takes them in.
        let Some(mut webhook) = tx.webhooks().get_for_update(tenant, webhook.id).await? else {
            return ctx.finish(tx).await;
        };
        // After the lock: a change of the registration it waited for keeps the earlier time.
        let now = ctx.clock().now();
        let Some(mut current) = tx.webhooks().get_delivery_for_update(tenant, delivery.id).await? else {
            return ctx.finish(tx).await;
        };
        if !current.status.is_queued() || current.attempts + 1 != number {
            // Cancelled, or attempted by another job meanwhile: this attempt is not recorded.
            return ctx.finish(tx).await;
        }
        let result = self.result_of(&outcome, number, now);
        let label = match &result {
            AttemptResult::Delivered { .. } => "delivered",
            AttemptResult::Retry { .. } => "retry",
            AttemptResult::Park { .. } => "parked",
        };
        crate::signals::webhook_attempted(label, on_the_wire);
        let retry_at = match &result {
            AttemptResult::Retry { next_retry_at, .. } => Some(*next_retry_at),
            _ => None,
        };
        current.record_attempt(result, now);
        tx.webhooks().update_delivery(&current).await?;
        let mark = if outcome.is_delivered() {
            webhook.record_success(now);
            FailureMark::None
        } else {
            webhook.record_failure(now)
        };
        tx.webhooks().update(&webhook).await?;
        tell_of_health(tx.as_mut(), &webhook, mark, now, webhooks.settings.job_max_attempts)
            .await
            .map_err(JobError::retry)?;
        if let Some(at) = retry_at {
            tx.jobs()
                .enqueue_fresh_key(&deliver_job(&current, number + 1, at, webhooks.settings.job_max_attempts), now)
                .await?;
        }
        let finished = ctx.finish(tx).await?;
        if mark != FailureMark::None {
            tracing::warn!(webhook = %webhook.id, failures = webhook.consecutive_failures, status = %webhook.status,
                "a webhook destination keeps failing its deliveries");
        }
        Ok(finished)
    }

    /// The job failed every try (the store was away, a key could not be opened, or the service
    /// stopped during each attempt): no job will send the delivery again, so it is PARKED
    /// (TIMEOUT, the reason saying why), settled and so replayable, rather than left PENDING
    /// with nothing to move it. Whether the receiver got the attempt is not known; a replay
    /// sends it at the next generation, and the receiver deduplicates on the event id. Its
    /// registration deleted meanwhile, it is CANCELLED as deletion would have made it.
    async fn on_dead(&self, job: &Job, tx: &mut dyn Tx, reason: &str, now: Timestamp) -> Result<(), JobError> {
        let (tenant, delivery_id, number) = payload(job)?;
        tracing::error!(job = %job.id, delivery = %delivery_id, reason, "a webhook delivery job died; its delivery is parked");
        // The registration first, then the delivery: the order deletion takes them in.
        let Some(seen) = tx.webhooks().get_delivery(tenant, delivery_id).await? else {
            return Ok(());
        };
        let registered = tx.webhooks().get_for_update(tenant, seen.webhook_id).await?;
        let Some(mut delivery) = tx.webhooks().get_delivery_for_update(tenant, delivery_id).await? else {
            return Ok(());
        };
        let changed = match registered {
            None => delivery.cancel(now),
            // Only the attempt this job was for: a later one has its own job.
            Some(_) if delivery.status.is_queued() && delivery.attempts + 1 == number => delivery.record_attempt(
                AttemptResult::Park {
                    class: FailureClass::Timeout,
                    status: None,
                    reason: format!(
                        "Attempt {number} could not be completed ({reason}); replay the event to send it again"
                    ),
                },
                now,
            ),
            Some(_) => false,
        };
        if changed {
            tx.webhooks().update_delivery(&delivery).await?;
        }
        Ok(())
    }
}

/// In the transaction that counted the failure: a `webhook.failing` or `webhook.suspended`
/// event (data: the registration as the API returns it) for the organisation's other
/// registrations, when one subscribes to it, and a WORKER audit record. Without a subscriber
/// no event is recorded: the history of a client that knows only the spec's event types shows
/// only those.
async fn tell_of_health(
    tx: &mut dyn Tx,
    webhook: &Webhook,
    mark: FailureMark,
    now: Timestamp,
    max_attempts: u32,
) -> AppResult<()> {
    let (event_type, action) = match mark {
        FailureMark::None => return Ok(()),
        FailureMark::Failing => (EventType::WebhookFailing, &FAILING),
        FailureMark::Suspended => (EventType::WebhookSuspended, &SUSPENDED),
    };
    let subscribed = tx
        .webhooks()
        .live(webhook.tenant_id)
        .await?
        .iter()
        .any(|other| other.id != webhook.id && other.event_types.iter().any(|t| t == event_type.as_str()));
    let mut event_id = None;
    if subscribed {
        let event = Event {
            id: new_id(),
            tenant_id: webhook.tenant_id,
            event_type: event_type.as_str().to_owned(),
            occurred_at: now,
            correlation_id: None,
            idempotency_key: None,
            resource: ResourceRef::new("webhook", webhook.id.to_string()),
            data: serde_json::to_value(WebhookOut::new(webhook, now)).map_err(Error::internal)?,
            dispatched_at: None,
        };
        crate::events::publish(tx, &event, max_attempts, now).await?;
        event_id = Some(event.id);
    }
    let detail = serde_json::json!({
        "eventId": event_id,
        "status": webhook.status,
        "consecutiveFailures": webhook.consecutive_failures,
    });
    crate::audit::record_worker(
        &mut *tx,
        webhook.tenant_id,
        action,
        webhook.id.to_string(),
        AuditOutcome::Success,
        detail,
        now,
    )
    .await?;
    Ok(())
}

impl DeliverWebhook {
    fn result_of(&self, outcome: &AttemptOutcome, number: u32, now: Timestamp) -> AttemptResult {
        let schedule = RetrySchedule::from_millis(self.0.settings.retry_base_ms.unsigned_abs());
        let (class, status, reason) = match outcome {
            AttemptOutcome::Delivered { status } => return AttemptResult::Delivered { status: *status },
            AttemptOutcome::Failed { class, status, reason } => (failure_class(*class), *status, reason.clone()),
        };
        match next_step(outcome, number) {
            NextStep::Delivered => AttemptResult::Delivered { status: status.unwrap_or(200) },
            NextStep::Park => AttemptResult::Park { class, status, reason },
            NextStep::Retry => {
                let delay = schedule.delay_after(number, random_jitter());
                let millis = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
                AttemptResult::Retry { class, status, reason, next_retry_at: now.plus_millis(millis) }
            }
        }
    }
}

fn failure_class(class: tokenops_webhooks::retry::FailureClass) -> FailureClass {
    match class {
        tokenops_webhooks::retry::FailureClass::Unreachable => FailureClass::Unreachable,
        tokenops_webhooks::retry::FailureClass::Timeout => FailureClass::Timeout,
        tokenops_webhooks::retry::FailureClass::Rejected => FailureClass::Rejected,
    }
}

fn payload(job: &Job) -> Result<(TenantId, Uuid, u32), JobError> {
    let tenant = job.tenant_id.ok_or_else(|| JobError::Permanent("a delivery job without an organisation".into()))?;
    let delivery = job
        .payload
        .get("deliveryId")
        .and_then(|v| v.as_str())
        .and_then(|s| Uuid::parse_str(s).ok())
        .ok_or_else(|| JobError::Permanent("payload has no deliveryId".into()))?;
    let attempt = job
        .payload
        .get("attempt")
        .and_then(serde_json::Value::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .filter(|n| *n >= 1)
        .ok_or_else(|| JobError::Permanent("payload has no attempt".into()))?;
    Ok((tenant, delivery, attempt))
}
