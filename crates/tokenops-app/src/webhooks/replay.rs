//! Replays (replay rules 1–4): a replay is a new delivery at the next generation, PENDING with
//! no attempts, made only when the latest generation to that registration is settled; the
//! original never changes. The single-event call is strict (anything not replayable fails it),
//! the filtered call lenient (it lists what it skipped). Both spend the organisation's replay
//! budget, a rolling hour counted from the stored replays themselves, and take turns per
//! organisation (`take_replay_turn`), so neither the budget nor a generation is raced.

use serde::Serialize;
use std::collections::BTreeMap;
use tokenops_domain::event::EventFilter;
use tokenops_domain::paging::{KeysetPosition, KeysetRequest};
use tokenops_domain::webhook::{Delivery, WebhookStatus};
use tokenops_domain::{TenantId, Timestamp, new_id};
use uuid::Uuid;

use super::{DeliveryOut, Webhooks, deliver_job, inactive};
use crate::error::{AppResult, Code, Error, OrConflict};
use crate::write::Write;

/// The budget's window.
pub const REPLAY_WINDOW_MS: i64 = 3_600_000;
/// The filtered call's bounds (Limits).
pub const MAX_QUEUED_EVENTS: usize = 500;
pub const MAX_EXAMINED: usize = 2_000;

/// A delivery a replay queued.
pub type QueuedDelivery = DeliveryOut;

/// A delivery the filtered call did not replay, and why.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedDelivery {
    pub event_id: Uuid,
    /// The registration of the delivery skipped; null when the event has no delivery at all.
    #[schema(required = true)]
    pub webhook_id: Option<Uuid>,
    /// LATEST_DELIVERY_QUEUED, DESTINATION_DELETED, DESTINATION_INACTIVE or NO_DELIVERY.
    pub reason: String,
}

/// What a replay call queued (202).
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FilteredReplay {
    pub queued: Vec<QueuedDelivery>,
    pub skipped: Vec<SkippedDelivery>,
    /// More matching deliveries remain past this call's bounds (500 events queued, 2,000
    /// deliveries examined).
    pub truncated: bool,
    /// Beyond the spec: when truncated, pass it as `cursor` with the same filters to continue
    /// after the last event this call examined; null otherwise (and always for one event).
    pub next_cursor: Option<String>,
}

/// The latest generation of each registration's delivery of one event.
fn latest_per_webhook(deliveries: Vec<Delivery>) -> BTreeMap<Uuid, Delivery> {
    let mut latest: BTreeMap<Uuid, Delivery> = BTreeMap::new();
    for d in deliveries {
        match latest.get(&d.webhook_id) {
            Some(seen) if seen.generation >= d.generation => {}
            _ => {
                latest.insert(d.webhook_id, d);
            }
        }
    }
    latest
}

enum Verdict {
    Replay(Delivery),
    Skip(&'static str),
}

impl Webhooks {
    /// Why the latest delivery `latest` cannot be replayed now, or the replay to make.
    async fn judge(&self, w: &mut Write, tenant: TenantId, latest: &Delivery, now: Timestamp) -> AppResult<Verdict> {
        let Some(webhook) = w.tx().webhooks().get(tenant, latest.webhook_id).await? else {
            return Ok(Verdict::Skip("DESTINATION_DELETED"));
        };
        if webhook.status == WebhookStatus::Inactive {
            return Ok(Verdict::Skip("DESTINATION_INACTIVE"));
        }
        if !latest.status.is_settled() {
            return Ok(Verdict::Skip("LATEST_DELIVERY_QUEUED"));
        }
        Ok(Verdict::Replay(Delivery::new(
            tenant,
            latest.event_id,
            latest.webhook_id,
            latest.generation + 1,
            new_id(),
            now,
        )))
    }

    async fn check_budget(&self, w: &mut Write, tenant: TenantId, wanted: usize) -> AppResult<()> {
        let since = w.now().minus_millis(REPLAY_WINDOW_MS);
        let used = w.tx().webhooks().replays_since(tenant, since).await?;
        let budget = self.settings.replay_budget;
        if used.saturating_add(wanted as u64) > budget {
            return Err(Error::new(
                Code::ReplayBudgetExhausted,
                format!(
                    "The replay budget of {budget} replays per hour for this organisation is exhausted \
                     ({used} used in the last hour, {wanted} asked for); nothing was queued"
                ),
            )
            // Nothing happened: the same request, key and all, may pass once the hour has room.
            .retry_with_same_key());
        }
        Ok(())
    }

    async fn queue(&self, w: &mut Write, replays: &[Delivery]) -> AppResult<Vec<QueuedDelivery>> {
        let now = w.now();
        for delivery in replays {
            // A conflict: the same generation was made by a concurrent replay of the same delivery.
            w.tx().webhooks().insert_delivery(delivery).await.or_conflict(|| {
                Error::conflict(format!(
                    "The delivery of event {} to webhook {} is already being replayed",
                    delivery.event_id, delivery.webhook_id
                ))
                .with_code(Code::DeliveryStillQueued)
            })?;
            w.tx()
                .jobs()
                .enqueue_fresh_key(&deliver_job(delivery, 1, now, self.settings.job_max_attempts), now)
                .await?;
        }
        Ok(replays.iter().map(DeliveryOut::from).collect())
    }

    /// Strict replay of one event: to every registration that received it, or to `only`.
    pub async fn redeliver(&self, w: &mut Write, event_id: Uuid, only: Option<Uuid>) -> AppResult<FilteredReplay> {
        let tenant = w.tenant()?;
        w.tx().webhooks().take_replay_turn(tenant).await?;
        let now = w.now();
        w.tx()
            .events()
            .get(tenant, event_id)
            .await?
            .ok_or_else(|| Error::not_found(format!("Event {event_id} not found")).with_code(Code::EventNotFound))?;
        let mut latest = latest_per_webhook(w.tx().webhooks().deliveries_of(tenant, &[event_id]).await?);
        if let Some(webhook_id) = only {
            latest.retain(|id, _| *id == webhook_id);
            if latest.is_empty() {
                return Err(Error::not_found(format!("Event {event_id} has no delivery to webhook {webhook_id}"))
                    .with_code(Code::DeliveryNotFound));
            }
        }
        if latest.is_empty() {
            return Err(Error::not_found(format!("Event {event_id} was delivered to no webhook"))
                .with_code(Code::DeliveryNotFound));
        }
        let mut replays = Vec::with_capacity(latest.len());
        for delivery in latest.values() {
            match self.judge(w, tenant, delivery, now).await? {
                Verdict::Replay(replay) => replays.push(replay),
                Verdict::Skip("DESTINATION_DELETED") => {
                    return Err(Error::not_found(format!("Webhook {} was deleted", delivery.webhook_id))
                        .with_code(Code::WebhookNotFound));
                }
                Verdict::Skip("DESTINATION_INACTIVE") => return Err(inactive(delivery.webhook_id)),
                Verdict::Skip(_) => {
                    let what = if delivery.generation > 1 { "a replay of it is" } else { "it is" };
                    return Err(Error::conflict(format!(
                        "The latest delivery of event {event_id} to webhook {} is {}: {what} still queued",
                        delivery.webhook_id, delivery.status
                    ))
                    .with_code(Code::DeliveryStillQueued));
                }
            }
        }
        self.check_budget(w, tenant, replays.len()).await?;
        let queued = self.queue(w, &replays).await?;
        w.set_resource_id(event_id.to_string());
        w.set_audit_detail(serde_json::json!({ "queued": queued.len(), "webhookId": only }));
        Ok(FilteredReplay { queued, skipped: Vec::new(), truncated: false, next_cursor: None })
    }

    /// Lenient replay of the deliveries the history filters select (newest events first, from
    /// just after `after` when a previous call was truncated): the latest generation of each
    /// (event, registration), `status` and `webhookId` applying to it. Queues at most 500 events
    /// and examines at most 2,000 deliveries. Returns, when truncated, the position of the last
    /// event examined, where the next call continues (`next_cursor` is the API's to fill in).
    pub async fn redeliver_filtered(
        &self,
        w: &mut Write,
        filter: EventFilter,
        mut after: Option<KeysetPosition>,
    ) -> AppResult<(FilteredReplay, Option<KeysetPosition>)> {
        let tenant = w.tenant()?;
        // Two filtered calls at once would both pick the same deliveries; in turn, the second
        // finds the first's replays queued and skips them.
        w.tx().webhooks().take_replay_turn(tenant).await?;
        let now = w.now();
        let mut replays: Vec<Delivery> = Vec::new();
        let mut skipped = Vec::new();
        let (mut examined, mut queued_events) = (0usize, 0usize);
        let mut last_examined: Option<KeysetPosition> = None;
        let mut truncated = false;
        'pages: loop {
            let events = w.tx().events().list(tenant, &filter, KeysetRequest { after, limit: 100 }).await?;
            let Some(last) = events.last() else { break };
            after = Some(KeysetPosition { at_micros: last.occurred_at.as_micros(), id: last.id });
            let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
            let mut by_event: BTreeMap<Uuid, Vec<Delivery>> = BTreeMap::new();
            for d in w.tx().webhooks().deliveries_of(tenant, &ids).await? {
                by_event.entry(d.event_id).or_default().push(d);
            }
            for event in &events {
                let mut latest = latest_per_webhook(by_event.remove(&event.id).unwrap_or_default());
                latest.retain(|id, d| {
                    filter.webhook_id.is_none_or(|only| only == *id)
                        && filter.delivery_status.as_deref().is_none_or(|s| s == d.status.as_str())
                });
                let needed = latest.len().max(1);
                // The first event is always examined, so that a call continuing from a cursor
                // makes progress whatever one event weighs.
                if examined > 0 && (examined + needed > MAX_EXAMINED || queued_events >= MAX_QUEUED_EVENTS) {
                    truncated = true;
                    break 'pages;
                }
                examined += needed;
                last_examined = Some(KeysetPosition { at_micros: event.occurred_at.as_micros(), id: event.id });
                if latest.is_empty() {
                    skipped.push(SkippedDelivery {
                        event_id: event.id,
                        webhook_id: None,
                        reason: "NO_DELIVERY".into(),
                    });
                    continue;
                }
                let mut queued_here = false;
                for delivery in latest.values() {
                    match self.judge(w, tenant, delivery, now).await? {
                        Verdict::Replay(replay) => {
                            replays.push(replay);
                            queued_here = true;
                        }
                        Verdict::Skip(reason) => skipped.push(SkippedDelivery {
                            event_id: event.id,
                            webhook_id: Some(delivery.webhook_id),
                            reason: reason.to_owned(),
                        }),
                    }
                }
                if queued_here {
                    queued_events += 1;
                }
            }
            if events.len() < 100 {
                break;
            }
        }
        self.check_budget(w, tenant, replays.len()).await?;
        let queued = self.queue(w, &replays).await?;
        w.set_audit_detail(serde_json::json!({
            "queued": queued.len(), "skipped": skipped.len(), "truncated": truncated,
        }));
        let next = if truncated { last_examined } else { None };
        Ok((FilteredReplay { queued, skipped, truncated, next_cursor: None }, next))
    }
}
