//! The Clock port: every piece of code that needs the time asks a `Clock`, so tests move time
//! instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use tokenops_domain::Timestamp;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

/// The real clock.
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
