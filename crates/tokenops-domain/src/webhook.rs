//! Webhook registrations and their deliveries: the schemes, the statuses and the spec's two state
//! tables (registration, delivery) as pure rules; the failure count that suspends a destination.

use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Consecutive failed attempts (across a registration's deliveries) that suspend it.
pub const SUSPEND_AFTER_FAILURES: u32 = 20;

/// Consecutive failed attempts at which the registration is reported failing (beyond the spec:
/// the `webhook.failing` event), once per run of failures.
pub const FAILING_AFTER_FAILURES: u32 = 10;

/// What a failed attempt made of its registration, for the events that tell of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureMark {
    /// Nothing to report.
    None,
    /// The run of failures has just reached [`FAILING_AFTER_FAILURES`].
    Failing,
    /// The run of failures has just suspended it ([`SUSPEND_AFTER_FAILURES`]).
    Suspended,
}

/// How long the previous secret keeps signing after a rotation.
pub const SECRET_OVERLAP_MS: i64 = 24 * 3_600_000;

wire_enum! {
    /// How deliveries to a registration are signed; fixed for the registration.
    SignatureScheme { HmacSha256 => "HMAC_SHA256", JwsEs256 => "JWS_ES256" }
}

wire_enum! {
    /// A registration's status. SUSPENDED is set by the service only.
    WebhookStatus { Active => "ACTIVE", Inactive => "INACTIVE", Suspended => "SUSPENDED" }
}

wire_enum! {
    /// A delivery's status (the spec's delivery state table).
    DeliveryStatus {
        Pending => "PENDING",
        RetryPending => "RETRY_PENDING",
        Delivered => "DELIVERED",
        Parked => "PARKED",
        Cancelled => "CANCELLED",
    }
}

wire_enum! {
    /// Why a delivery was parked.
    FailureClass { Unreachable => "UNREACHABLE", Timeout => "TIMEOUT", Rejected => "REJECTED" }
}

impl WebhookStatus {
    /// The statuses a user may ask for (PATCH): SUSPENDED is the service's alone.
    pub fn requestable(self) -> bool {
        !matches!(self, WebhookStatus::Suspended)
    }

    /// Whether new events of a subscribed type make deliveries for it. INACTIVE does not: the
    /// bank switched it off, and switching it on again does not backfill (Delivery behaviour 3).
    /// SUSPENDED does: its deliveries wait and go out on resumption (supplement §7).
    pub fn receives_events(self) -> bool {
        !matches!(self, WebhookStatus::Inactive)
    }

    /// Whether its queued deliveries may be attempted now.
    pub fn attempts_deliveries(self) -> bool {
        matches!(self, WebhookStatus::Active)
    }
}

impl DeliveryStatus {
    /// Settled deliveries change no more; only a settled latest generation may be replayed.
    pub fn is_settled(self) -> bool {
        matches!(self, DeliveryStatus::Delivered | DeliveryStatus::Parked | DeliveryStatus::Cancelled)
    }

    /// Queued: waiting for an attempt (first or next).
    pub fn is_queued(self) -> bool {
        !self.is_settled()
    }
}

/// Which registrations a list shows: those created in a half-open window (`from`
/// inclusive, `to` exclusive).
#[derive(Debug, Clone, Copy, Default)]
pub struct WebhookFilter {
    pub from: Option<Timestamp>,
    pub to: Option<Timestamp>,
}

/// A webhook registration. Secrets are sealed (the app seals and opens them); `deleted_at` marks
/// a deleted registration, kept so that its deliveries keep naming it.
#[derive(Debug, Clone, PartialEq)]
pub struct Webhook {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Normalised https URL.
    pub url: String,
    pub signature_scheme: SignatureScheme,
    /// Event type names, in the order registered, without repeats.
    pub event_types: Vec<String>,
    pub status: WebhookStatus,
    /// Failed attempts since the last success (any delivery of this registration, or a test).
    pub consecutive_failures: u32,
    pub sealed_secret: Option<String>,
    pub sealed_previous_secret: Option<String>,
    pub previous_secret_expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub deleted_at: Option<Timestamp>,
    /// What it received before each of its subscription changes of the last
    /// [`PAST_SUBSCRIPTIONS_HORIZON_MS`], oldest first (at most [`PAST_SUBSCRIPTIONS_KEPT`]).
    pub past_subscriptions: Vec<PastSubscription>,
}

/// How long a past subscription is kept after the change that ended it: longer than any event
/// waits for its dispatch (moments, or the length of an outage of the workers), so every event
/// still to dispatch finds the subscription in effect when it happened, however often the
/// registration changed since. (A count alone was not enough: a race probe changed one
/// seventeen times while an event waited 30 s behind a backlog, and the event was lost.)
pub const PAST_SUBSCRIPTIONS_HORIZON_MS: i64 = 24 * 60 * 60 * 1000;

/// The most past subscriptions a registration keeps, whatever their age: a bound on the row that
/// every dispatch reads, far above what a bank's changes to a destination come to in a day.
pub const PAST_SUBSCRIPTIONS_KEPT: usize = 256;

/// A subscription a registration had until a change of its event types or of ACTIVE/INACTIVE.
/// An event is the registration's by the subscription in effect when it happened, not when it
/// is dispatched a moment later (the spec: no delivery for an event that arrived while nothing
/// subscribed, no backfill after a later change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PastSubscription {
    /// When the change ended it (to the microsecond).
    #[serde(with = "micros")]
    pub until: Timestamp,
    pub event_types: Vec<String>,
    /// Whether it received events then (not INACTIVE).
    pub receives: bool,
}

/// A timestamp as whole microseconds, exact where ISO 8601 text keeps milliseconds.
mod micros {
    use super::Timestamp;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(at: &Timestamp, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_i64(at.as_micros())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        i64::deserialize(deserializer).map(Timestamp::from_micros)
    }
}

impl Webhook {
    pub fn subscribes_to(&self, event_type: &str) -> bool {
        self.event_types.iter().any(|t| t == event_type)
    }

    /// Whether an event of `event_type` that happened at `at` is for this registration: it was
    /// registered by then, and the subscription in effect then (the one a later change ended,
    /// else the current one) received events of that type. A SUSPENDED registration receives
    /// (its deliveries wait); an INACTIVE one does not.
    pub fn subscribed_at(&self, event_type: &str, at: Timestamp) -> bool {
        if self.created_at > at {
            return false;
        }
        match self.past_subscriptions.iter().find(|p| p.until > at) {
            Some(past) => past.receives && past.event_types.iter().any(|t| t == event_type),
            None => self.status.receives_events() && self.subscribes_to(event_type),
        }
    }

    /// Keeps the subscription it had before a change made at `now`, when the change altered
    /// what it receives (`event_types` and `receives` as they were before).
    pub fn keep_past_subscription(&mut self, event_types: Vec<String>, receives: bool, now: Timestamp) {
        if event_types == self.event_types && receives == self.status.receives_events() {
            return;
        }
        self.past_subscriptions.push(PastSubscription { until: now, event_types, receives });
        let horizon = now.minus_millis(PAST_SUBSCRIPTIONS_HORIZON_MS);
        let expired = self.past_subscriptions.iter().take_while(|p| p.until <= horizon).count();
        let excess = self.past_subscriptions.len().saturating_sub(PAST_SUBSCRIPTIONS_KEPT);
        self.past_subscriptions.drain(..expired.max(excess));
    }

    /// The previous secret while its overlap lasts.
    pub fn live_previous_secret(&self, now: Timestamp) -> Option<&str> {
        match (&self.sealed_previous_secret, self.previous_secret_expires_at) {
            (Some(sealed), Some(until)) if until > now => Some(sealed),
            _ => None,
        }
    }

    /// Counts a failed attempt; at the threshold an ACTIVE registration becomes SUSPENDED.
    /// Returns what to report: the run reaching [`FAILING_AFTER_FAILURES`] (exactly, so once
    /// per run: only a success or a resumption starts the count again), or the suspension.
    pub fn record_failure(&mut self, now: Timestamp) -> FailureMark {
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.updated_at = now;
        if self.status == WebhookStatus::Active && self.consecutive_failures >= SUSPEND_AFTER_FAILURES {
            self.status = WebhookStatus::Suspended;
            return FailureMark::Suspended;
        }
        if self.consecutive_failures == FAILING_AFTER_FAILURES {
            return FailureMark::Failing;
        }
        FailureMark::None
    }

    /// A successful attempt (a test included) resets the count; the status is unchanged.
    pub fn record_success(&mut self, now: Timestamp) {
        if self.consecutive_failures != 0 {
            self.consecutive_failures = 0;
            self.updated_at = now;
        }
    }

    /// A user's status change (ACTIVE or INACTIVE). Setting ACTIVE from any other status clears
    /// a suspension and resets the count: from INACTIVE too, so that a SUSPENDED registration
    /// set INACTIVE on its way back to ACTIVE is not suspended again by its next failure.
    /// Returns whether queued deliveries should now go out (it became ACTIVE).
    pub fn set_status(&mut self, to: WebhookStatus, now: Timestamp) -> Result<bool, &'static str> {
        if !to.requestable() {
            return Err("status SUSPENDED is set by the service only; request ACTIVE or INACTIVE");
        }
        let resumes = to == WebhookStatus::Active && self.status != WebhookStatus::Active;
        if resumes && self.consecutive_failures != 0 {
            self.consecutive_failures = 0;
            self.updated_at = now;
        }
        if self.status != to {
            self.status = to;
            self.updated_at = now;
        }
        Ok(resumes)
    }
}

/// One event's delivery to one registration, at one generation (1 for the dispatch, +1 per
/// replay).
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: Uuid,
    pub tenant_id: TenantId,
    pub event_id: Uuid,
    pub webhook_id: Uuid,
    pub generation: u32,
    pub status: DeliveryStatus,
    pub attempts: u32,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub next_retry_at: Option<Timestamp>,
    pub failure_class: Option<FailureClass>,
    pub failure_reason: Option<String>,
    pub parked_at: Option<Timestamp>,
    pub last_attempt_at: Option<Timestamp>,
    /// The HTTP status of the last attempt, when the receiver answered.
    pub last_status_code: Option<u16>,
}

/// What an attempt's outcome makes of a queued delivery.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptResult {
    Delivered {
        status: u16,
    },
    /// Failed; retried at `next_retry_at`.
    Retry {
        class: FailureClass,
        status: Option<u16>,
        reason: String,
        next_retry_at: Timestamp,
    },
    /// Failed for the last time.
    Park {
        class: FailureClass,
        status: Option<u16>,
        reason: String,
    },
}

impl Delivery {
    pub fn new(
        tenant_id: TenantId,
        event_id: Uuid,
        webhook_id: Uuid,
        generation: u32,
        id: Uuid,
        now: Timestamp,
    ) -> Self {
        Self {
            id,
            tenant_id,
            event_id,
            webhook_id,
            generation,
            status: DeliveryStatus::Pending,
            attempts: 0,
            created_at: now,
            updated_at: now,
            next_retry_at: None,
            failure_class: None,
            failure_reason: None,
            parked_at: None,
            last_attempt_at: None,
            last_status_code: None,
        }
    }

    /// Records one attempt of a queued delivery (the state table's attempt rows). A settled
    /// delivery is left as it is: returns false.
    pub fn record_attempt(&mut self, result: AttemptResult, now: Timestamp) -> bool {
        if self.status.is_settled() {
            return false;
        }
        self.attempts = self.attempts.saturating_add(1);
        self.last_attempt_at = Some(now);
        self.updated_at = now;
        match result {
            AttemptResult::Delivered { status } => {
                self.status = DeliveryStatus::Delivered;
                self.last_status_code = Some(status);
                self.next_retry_at = None;
                // A failure class and reason describe a delivery not (yet) made, never one made.
                self.failure_class = None;
                self.failure_reason = None;
            }
            AttemptResult::Retry { class, status, reason, next_retry_at } => {
                self.status = DeliveryStatus::RetryPending;
                self.last_status_code = status;
                self.failure_class = Some(class);
                self.failure_reason = Some(reason);
                self.next_retry_at = Some(next_retry_at);
            }
            AttemptResult::Park { class, status, reason } => {
                self.status = DeliveryStatus::Parked;
                self.last_status_code = status;
                self.failure_class = Some(class);
                self.failure_reason = Some(reason);
                self.next_retry_at = None;
                self.parked_at = Some(now);
            }
        }
        true
    }

    /// Its destination was deleted: a queued delivery is CANCELLED. Returns whether it changed.
    pub fn cancel(&mut self, now: Timestamp) -> bool {
        if self.status.is_settled() {
            return false;
        }
        self.status = DeliveryStatus::Cancelled;
        self.next_retry_at = None;
        self.updated_at = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_micros(ms * 1_000)
    }

    fn webhook(status: WebhookStatus) -> Webhook {
        Webhook {
            id: Uuid::nil(),
            tenant_id: TenantId(Uuid::nil()),
            url: "https://example.com/hook".into(),
            signature_scheme: SignatureScheme::HmacSha256,
            event_types: vec!["webhook.test".into()],
            status,
            consecutive_failures: 0,
            sealed_secret: None,
            sealed_previous_secret: None,
            previous_secret_expires_at: None,
            created_at: at(0),
            updated_at: at(0),
            deleted_at: None,
            past_subscriptions: Vec::new(),
        }
    }

    #[test]
    fn an_event_is_judged_by_the_subscription_in_effect_when_it_happened() {
        let mut w = webhook(WebhookStatus::Active);
        w.created_at = at(10);
        assert!(!w.subscribed_at("webhook.test", at(9)), "not registered yet");
        assert!(w.subscribed_at("webhook.test", at(10)));
        // Types changed at 20, then INACTIVE at 30.
        let before = w.event_types.clone();
        w.event_types = vec!["customer.status_changed".into()];
        w.keep_past_subscription(before, true, at(20));
        w.keep_past_subscription(w.event_types.clone(), true, at(25));
        assert_eq!(w.past_subscriptions.len(), 1, "a change that changed nothing is not kept");
        w.status = WebhookStatus::Inactive;
        w.keep_past_subscription(w.event_types.clone(), true, at(30));
        assert!(w.subscribed_at("webhook.test", at(19)));
        assert!(!w.subscribed_at("customer.status_changed", at(19)));
        assert!(!w.subscribed_at("webhook.test", at(20)));
        assert!(w.subscribed_at("customer.status_changed", at(29)));
        assert!(!w.subscribed_at("customer.status_changed", at(30)), "INACTIVE receives nothing");
        // SUSPENDED still receives (its deliveries wait).
        w.status = WebhookStatus::Suspended;
        assert!(w.subscribed_at("customer.status_changed", at(31)));
    }

    #[test]
    fn past_subscriptions_are_kept_for_a_day_however_many_changes_it_holds() {
        let mut w = webhook(WebhookStatus::Active);
        w.created_at = at(0);
        let change_types = |w: &mut Webhook, types: String, now: Timestamp| {
            let before = std::mem::replace(&mut w.event_types, vec![types]);
            w.keep_past_subscription(before, true, now);
        };
        // An event at 5 waits for its dispatch while the registration changes forty times.
        for n in 0..40 {
            change_types(&mut w, format!("t{n}"), at(10 + n));
        }
        assert_eq!(w.past_subscriptions.len(), 40);
        assert!(w.subscribed_at("webhook.test", at(5)), "the subscription in effect at 5 is still known");
        assert!(!w.subscribed_at("webhook.test", at(20)), "at 20 it received t10");
        assert!(w.subscribed_at("t10", at(20)));
        // A change a day later lets go of those that ended a day before it, the oldest first.
        let day_later = at(30).plus_millis(PAST_SUBSCRIPTIONS_HORIZON_MS);
        change_types(&mut w, "late".into(), day_later);
        assert_eq!(w.past_subscriptions.first().map(|p| p.until), Some(at(31)));
        // However recent, at most PAST_SUBSCRIPTIONS_KEPT stay.
        for n in 0..300 {
            change_types(&mut w, format!("u{n}"), day_later.plus_millis(n + 1));
        }
        assert_eq!(w.past_subscriptions.len(), PAST_SUBSCRIPTIONS_KEPT);
        let oldest_kept = day_later.plus_millis(300 - PAST_SUBSCRIPTIONS_KEPT as i64 + 1);
        assert_eq!(w.past_subscriptions[0].until, oldest_kept, "the oldest go first");
    }

    #[test]
    fn activation_through_inactive_still_resets_the_count() {
        let mut w = webhook(WebhookStatus::Active);
        for _ in 0..SUSPEND_AFTER_FAILURES {
            w.record_failure(at(1));
        }
        assert_eq!(w.status, WebhookStatus::Suspended);
        assert_eq!(w.set_status(WebhookStatus::Inactive, at(2)), Ok(false));
        assert_eq!(w.consecutive_failures, SUSPEND_AFTER_FAILURES);
        assert_eq!(w.set_status(WebhookStatus::Active, at(3)), Ok(true));
        assert_eq!((w.status, w.consecutive_failures, w.updated_at), (WebhookStatus::Active, 0, at(3)));
        assert_eq!(w.record_failure(at(4)), FailureMark::None);
        assert_eq!(w.status, WebhookStatus::Active);
        // Setting ACTIVE again while ACTIVE is no resumption: the count stays.
        assert_eq!(w.set_status(WebhookStatus::Active, at(5)), Ok(false));
        assert_eq!(w.consecutive_failures, 1);
    }

    #[test]
    fn twenty_failures_suspend_and_activation_resumes() {
        let mut w = webhook(WebhookStatus::Active);
        let marks: Vec<FailureMark> = (0..19).map(|_| w.record_failure(at(1))).collect();
        let failing: Vec<usize> =
            marks.iter().enumerate().filter(|(_, m)| **m == FailureMark::Failing).map(|(i, _)| i + 1).collect();
        assert_eq!(failing, vec![10], "failing once, at the tenth");
        assert!(!marks.contains(&FailureMark::Suspended));
        assert_eq!(w.status, WebhookStatus::Active);
        assert_eq!(w.record_failure(at(2)), FailureMark::Suspended);
        assert_eq!(w.status, WebhookStatus::Suspended);
        assert_eq!(w.record_failure(at(3)), FailureMark::None, "suspended once");
        assert_eq!(w.set_status(WebhookStatus::Active, at(4)), Ok(true));
        assert_eq!((w.status, w.consecutive_failures), (WebhookStatus::Active, 0));
    }

    #[test]
    fn users_cannot_ask_for_suspended_and_success_resets() {
        let mut w = webhook(WebhookStatus::Active);
        assert!(w.set_status(WebhookStatus::Suspended, at(1)).is_err());
        w.record_failure(at(1));
        w.record_success(at(2));
        assert_eq!(w.consecutive_failures, 0);
        // A new run of failures is reported failing again.
        let again: Vec<FailureMark> = (0..10).map(|_| w.record_failure(at(2))).collect();
        assert_eq!(again.last(), Some(&FailureMark::Failing));
        assert_eq!(w.set_status(WebhookStatus::Inactive, at(3)), Ok(false));
        assert!(!WebhookStatus::Inactive.receives_events());
        assert!(WebhookStatus::Suspended.receives_events());
        assert!(!WebhookStatus::Suspended.attempts_deliveries());
    }

    #[test]
    fn delivery_state_table() {
        let mut d = Delivery::new(TenantId(Uuid::nil()), Uuid::nil(), Uuid::nil(), 1, Uuid::nil(), at(0));
        let retry = AttemptResult::Retry {
            class: FailureClass::Rejected,
            status: Some(500),
            reason: "500".into(),
            next_retry_at: at(30_000),
        };
        assert!(d.record_attempt(retry, at(1)));
        assert_eq!((d.status, d.attempts, d.next_retry_at), (DeliveryStatus::RetryPending, 1, Some(at(30_000))));
        assert!(d.record_attempt(AttemptResult::Delivered { status: 200 }, at(2)));
        assert_eq!((d.status, d.attempts, d.next_retry_at), (DeliveryStatus::Delivered, 2, None));
        assert_eq!((d.failure_class, d.failure_reason.as_deref()), (None, None), "the failure is behind it");
        assert!(!d.record_attempt(AttemptResult::Delivered { status: 200 }, at(3)), "settled");
        assert!(!d.cancel(at(3)));

        let mut p = Delivery::new(TenantId(Uuid::nil()), Uuid::nil(), Uuid::nil(), 1, Uuid::nil(), at(0));
        p.record_attempt(
            AttemptResult::Park { class: FailureClass::Timeout, status: None, reason: "slow".into() },
            at(5),
        );
        assert_eq!((p.status, p.parked_at), (DeliveryStatus::Parked, Some(at(5))));
        assert!(p.status.is_settled());

        let mut c = Delivery::new(TenantId(Uuid::nil()), Uuid::nil(), Uuid::nil(), 1, Uuid::nil(), at(0));
        assert!(c.cancel(at(1)));
        assert_eq!(c.status, DeliveryStatus::Cancelled);
    }
}
