//! When a failed attempt is tried again (spec, Delivery behaviour 2): the outcome of an attempt,
//! its failure class, the eleven-attempt budget, the backoff schedule, and the one rule that
//! decides between retrying and parking.

use rand::Rng;
use std::time::Duration;

/// The retry budget: eleven attempts in all, the first included.
pub const MAX_ATTEMPTS: u32 = 11;

/// A client error other than 408 and 429 is the receiver refusing this request: retried once,
/// then parked.
pub const CLIENT_ERROR_ATTEMPTS: u32 = 2;

/// A registration is SUSPENDED after this many consecutive failed attempts across its deliveries
/// (supplement §7); any successful attempt resets the count.
pub const SUSPEND_AFTER_FAILURES: u32 = 20;

/// The spec's jitter: plus or minus 20 percent.
pub const MAX_JITTER: f64 = 0.2;

/// The spec's first delay, 30 s, and its cap, one hour: the cap is this many first delays, so a
/// shorter `TOKENOPS_WEBHOOK_RETRY_BASE_MS` keeps the schedule's shape (supplement §1: "the
/// doubling, cap ratio and jitter stay as specified").
pub const CAP_RATIO: u32 = 120;

/// The spec's failure classes of an attempt (`failureClass`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// No HTTP answer: DNS, a refused address, connect or TLS failure.
    Unreachable,
    /// The receiver took longer than the read timeout.
    Timeout,
    /// The receiver answered with a status other than 2xx (a redirect included).
    Rejected,
}

impl FailureClass {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unreachable => "UNREACHABLE",
            Self::Timeout => "TIMEOUT",
            Self::Rejected => "REJECTED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Unreachable, Self::Timeout, Self::Rejected].into_iter().find(|c| c.as_str() == text)
    }
}

impl std::fmt::Display for FailureClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// The receiver answered 2xx.
    Delivered { status: u16 },
    /// `status` is the receiver's answer when there was one (REJECTED); `reason` is for
    /// `failureReason`, short and free of secrets.
    Failed { class: FailureClass, status: Option<u16>, reason: String },
}

impl AttemptOutcome {
    pub fn is_delivered(&self) -> bool {
        matches!(self, Self::Delivered { .. })
    }

    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Delivered { status } => Some(*status),
            Self::Failed { status, .. } => *status,
        }
    }
}

/// What follows an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextStep {
    /// The delivery is DELIVERED.
    Delivered,
    /// RETRY_PENDING, at [`RetrySchedule::delay_after`] the attempt.
    Retry,
    /// PARKED: the budget for this kind of failure is spent.
    Park,
}

/// The whole rule: `attempt` is the number (from 1) of the attempt that produced `outcome`.
/// Network failures, timeouts, 5xx, 408 and 429 are retried up to [`MAX_ATTEMPTS`]; other 4xx
/// park after [`CLIENT_ERROR_ATTEMPTS`]; any other answer that is not 2xx (a 302 is a failed
/// attempt, redirects are never followed) is retried like a 5xx.
pub fn next_step(outcome: &AttemptOutcome, attempt: u32) -> NextStep {
    match outcome {
        AttemptOutcome::Delivered { .. } => NextStep::Delivered,
        AttemptOutcome::Failed { status, .. } => {
            if parks_after(*status, attempt) {
                NextStep::Park
            } else {
                NextStep::Retry
            }
        }
    }
}

/// Whether a failed attempt number `attempt` with the receiver's `status` (none for a network
/// failure or timeout) spends the delivery's budget.
pub fn parks_after(status: Option<u16>, attempt: u32) -> bool {
    let budget = match status {
        Some(408 | 429) => MAX_ATTEMPTS,
        Some(400..=499) => CLIENT_ERROR_ATTEMPTS,
        _ => MAX_ATTEMPTS,
    };
    attempt >= budget
}

/// The backoff: the first delay after attempt 1, doubling after each further attempt, capped at
/// [`CAP_RATIO`] first delays (one hour for the spec's 30 s), with the caller's jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySchedule {
    pub base: Duration,
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self { base: Duration::from_secs(30) }
    }
}

impl RetrySchedule {
    pub fn new(base: Duration) -> Self {
        Self { base }
    }

    /// The schedule of `TOKENOPS_WEBHOOK_RETRY_BASE_MS`.
    pub fn from_millis(base_ms: u64) -> Self {
        Self::new(Duration::from_millis(base_ms))
    }

    /// The longest delay before jitter.
    pub fn cap(&self) -> Duration {
        self.base.saturating_mul(CAP_RATIO)
    }

    /// The delay after failed attempt number `attempt` (from 1) before the next one, multiplied
    /// by `1 + jitter`; `jitter` is clamped to ±[`MAX_JITTER`] (use [`random_jitter`]).
    pub fn delay_after(&self, attempt: u32, jitter: f64) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        let delay = self.base.saturating_mul(1u32 << doublings).min(self.cap());
        let jitter = if jitter.is_finite() { jitter.clamp(-MAX_JITTER, MAX_JITTER) } else { 0.0 };
        delay.mul_f64(1.0 + jitter)
    }
}

/// A uniform jitter in [-0.2, 0.2].
pub fn random_jitter() -> f64 {
    rand::thread_rng().gen_range(-MAX_JITTER..=MAX_JITTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(status: Option<u16>) -> AttemptOutcome {
        let class = if status.is_some() { FailureClass::Rejected } else { FailureClass::Unreachable };
        AttemptOutcome::Failed { class, status, reason: String::new() }
    }

    #[test]
    fn the_classes_have_the_spec_names() {
        assert_eq!(FailureClass::Unreachable.as_str(), "UNREACHABLE");
        assert_eq!(FailureClass::Timeout.as_str(), "TIMEOUT");
        assert_eq!(FailureClass::Rejected.as_str(), "REJECTED");
        assert_eq!(FailureClass::parse("TIMEOUT"), Some(FailureClass::Timeout));
        assert_eq!(FailureClass::parse("timeout"), None);
    }

    #[test]
    fn the_first_delay_is_30_seconds_doubling_to_a_one_hour_cap() {
        let schedule = RetrySchedule::default();
        let secs: Vec<u64> = (1..MAX_ATTEMPTS).map(|a| schedule.delay_after(a, 0.0).as_secs()).collect();
        assert_eq!(secs, vec![30, 60, 120, 240, 480, 960, 1_920, 3_600, 3_600, 3_600]);
        assert_eq!(schedule.delay_after(1_000, 0.0), Duration::from_secs(3_600));
    }

    #[test]
    fn a_configured_base_keeps_the_cap_ratio() {
        let schedule = RetrySchedule::new(Duration::from_millis(100));
        assert_eq!(schedule.delay_after(1, 0.0), Duration::from_millis(100));
        assert_eq!(schedule.delay_after(2, 0.0), Duration::from_millis(200));
        assert_eq!(schedule.cap(), Duration::from_secs(12));
        assert_eq!(schedule.delay_after(10, 0.0), Duration::from_secs(12));
    }

    #[test]
    fn jitter_is_plus_or_minus_20_percent() {
        let schedule = RetrySchedule::default();
        assert_eq!(schedule.delay_after(1, 0.2), Duration::from_secs(36));
        assert_eq!(schedule.delay_after(1, -0.2), Duration::from_secs(24));
        assert_eq!(schedule.delay_after(8, 0.2), Duration::from_secs(4_320));
        assert_eq!(schedule.delay_after(1, 5.0), Duration::from_secs(36), "clamped");
        assert_eq!(schedule.delay_after(1, f64::NAN), Duration::from_secs(30));
        for _ in 0..1_000 {
            let jitter = random_jitter();
            assert!((-0.2..=0.2).contains(&jitter), "{jitter}");
        }
    }

    #[test]
    fn network_failures_timeouts_5xx_408_and_429_are_retried_up_to_eleven_attempts() {
        let timeout = AttemptOutcome::Failed { class: FailureClass::Timeout, status: None, reason: String::new() };
        for outcome in
            [failed(None), timeout, failed(Some(500)), failed(Some(503)), failed(Some(408)), failed(Some(429))]
        {
            for attempt in 1..MAX_ATTEMPTS {
                assert_eq!(next_step(&outcome, attempt), NextStep::Retry, "{outcome:?} attempt {attempt}");
            }
            assert_eq!(next_step(&outcome, MAX_ATTEMPTS), NextStep::Park, "{outcome:?}");
        }
    }

    #[test]
    fn other_4xx_park_after_two_attempts() {
        for status in [400, 401, 403, 404, 410, 422] {
            assert_eq!(next_step(&failed(Some(status)), 1), NextStep::Retry, "{status}");
            assert_eq!(next_step(&failed(Some(status)), 2), NextStep::Park, "{status}");
        }
    }

    #[test]
    fn a_302_is_a_failed_attempt_and_retried() {
        assert_eq!(next_step(&failed(Some(302)), 1), NextStep::Retry);
        assert_eq!(next_step(&failed(Some(302)), 10), NextStep::Retry);
        assert_eq!(next_step(&failed(Some(302)), 11), NextStep::Park);
    }

    #[test]
    fn a_2xx_is_delivered_at_any_attempt() {
        assert_eq!(next_step(&AttemptOutcome::Delivered { status: 200 }, 1), NextStep::Delivered);
        assert_eq!(next_step(&AttemptOutcome::Delivered { status: 204 }, 11), NextStep::Delivered);
    }
}
