//! The bound on concurrent attempts per destination (normalised origin: scheme, host, port),
//! per process: a slow or dead receiver holds at most that many attempts of a node, and an
//! attempt that finds no slot free within a short wait is put back rather than waiting longer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;

use crate::url::WebhookUrl;

/// The default of `TOKENOPS_WEBHOOK_MAX_IN_FLIGHT_PER_DESTINATION`.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 8;

/// Attempts in flight per origin. Cheap to share: one per process.
#[derive(Debug)]
pub struct DestinationSlots {
    limit: usize,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    /// Told whenever a slot is given back, at any origin.
    freed: Arc<Notify>,
}

/// One attempt's place at its destination, given back when dropped.
#[derive(Debug)]
#[must_use = "the slot is given back when dropped"]
pub struct Slot {
    origin: String,
    in_flight: Arc<Mutex<HashMap<String, usize>>>,
    freed: Arc<Notify>,
}

/// The origin a URL's attempts count against: the registrations of one receiver (any path, any
/// organisation) share it.
pub fn origin(url: &WebhookUrl) -> String {
    format!("https://{}:{}", url.host(), url.port())
}

impl DestinationSlots {
    /// `limit` attempts at once per origin (at least one).
    pub fn new(limit: usize) -> Self {
        Self { limit: limit.max(1), in_flight: Arc::new(Mutex::new(HashMap::new())), freed: Arc::new(Notify::new()) }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// A slot at `url`'s origin if one is free; never waits.
    pub fn try_acquire(&self, url: &WebhookUrl) -> Option<Slot> {
        let origin = origin(url);
        let mut map = lock(&self.in_flight);
        let count = map.entry(origin.clone()).or_insert(0);
        if *count >= self.limit {
            return None;
        }
        *count += 1;
        Some(Slot { origin, in_flight: self.in_flight.clone(), freed: self.freed.clone() })
    }

    /// A slot at `url`'s origin, waiting up to `wait` for one to be given back. A busy but
    /// healthy receiver frees its slots within milliseconds, so a short wait keeps its
    /// deliveries flowing; a dead one's attempts hold theirs for seconds, and the wait ends.
    pub async fn acquire_within(&self, url: &WebhookUrl, wait: Duration) -> Option<Slot> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Registered before the check, so a slot given back between the two is not missed.
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            if let Some(slot) = self.try_acquire(url) {
                return Some(slot);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return None;
            }
        }
    }

    /// Attempts in flight at `url`'s origin now.
    pub fn in_flight(&self, url: &WebhookUrl) -> usize {
        lock(&self.in_flight).get(&origin(url)).copied().unwrap_or(0)
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut map = lock(&self.in_flight);
        if let Some(count) = map.get_mut(&self.origin) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                // Origins come and go with registrations: the map holds only those in use.
                map.remove(&self.origin);
            }
        }
        drop(map);
        self.freed.notify_waiters();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // The counts stay consistent whatever panicked while holding the lock: each change is one
    // statement.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::url::normalise;

    #[test]
    fn each_origin_has_its_own_limit_and_slots_come_back() {
        let slots = DestinationSlots::new(2);
        let a = normalise("https://a.example/one").expect("url");
        let a_other_path = normalise("https://A.example:443/two").expect("url");
        let a_other_port = normalise("https://a.example:8443/one").expect("url");
        let first = slots.try_acquire(&a).expect("first");
        let second = slots.try_acquire(&a_other_path).expect("second");
        assert!(slots.try_acquire(&a).is_none(), "the origin is full, whatever the path");
        assert!(slots.try_acquire(&a_other_port).is_some(), "another port is another destination");
        assert_eq!(slots.in_flight(&a), 2);
        drop(first);
        assert_eq!(slots.in_flight(&a), 1);
        let third = slots.try_acquire(&a).expect("a slot came back");
        drop((second, third));
        assert_eq!(slots.in_flight(&a), 0);
        assert!(lock(&slots.in_flight).is_empty(), "idle origins are forgotten");
    }

    #[tokio::test]
    async fn a_short_wait_takes_a_slot_given_back_and_gives_up_on_one_held() {
        let slots = Arc::new(DestinationSlots::new(1));
        let url = normalise("https://a.example/").expect("url");
        let held = slots.try_acquire(&url).expect("one");
        let began = std::time::Instant::now();
        assert!(slots.acquire_within(&url, Duration::from_millis(50)).await.is_none(), "still held");
        assert!(began.elapsed() >= Duration::from_millis(50));
        let waiting = {
            let (slots, url) = (slots.clone(), url.clone());
            tokio::spawn(async move { slots.acquire_within(&url, Duration::from_secs(5)).await.is_some() })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        let began = std::time::Instant::now();
        drop(held);
        assert!(waiting.await.expect("join"), "the slot given back was taken");
        assert!(began.elapsed() < Duration::from_secs(1), "without waiting out the wait");
    }

    #[test]
    fn the_limit_is_at_least_one() {
        let slots = DestinationSlots::new(0);
        let url = normalise("https://a.example/").expect("url");
        let held = slots.try_acquire(&url).expect("one");
        assert!(slots.try_acquire(&url).is_none());
        drop(held);
    }
}
