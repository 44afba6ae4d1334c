//! The Clock port: every piece of code that needs the wall-clock time asks a `Clock`, so tests
//! move time instead of sleeping. It lives here, in the lowest crate, so that every layer (the
//! ledger, custody, the stores' migrators, the app) takes the same clock.
//!
//! Monotonic `Instant`s that only measure elapsed time (timeouts, backoff, latency) are not
//! wall-clock reads and do not go through it.

use crate::Timestamp;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The real clock: the one place that reads the system's time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::system_now()
    }
}

/// A clock that only moves when told to: for tests and simulations.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn starting_at(at: Timestamp) -> Self {
        Self(Arc::new(AtomicI64::new(at.as_micros())))
    }

    pub fn advance_millis(&self, millis: i64) {
        self.0.fetch_add(millis.saturating_mul(1_000), Ordering::SeqCst);
    }

    pub fn set(&self, at: Timestamp) {
        self.0.store(at.as_micros(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_micros(self.0.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::starting_at(Timestamp::from_micros(1_000_000));
        assert_eq!(clock.now(), Timestamp::from_micros(1_000_000));
        clock.advance_millis(1_500);
        assert_eq!(clock.now(), Timestamp::from_micros(2_500_000));
        let shared = clock.clone();
        shared.set(Timestamp::from_micros(7));
        assert_eq!(clock.now(), Timestamp::from_micros(7));
    }
}
