//! Brute-force protection for password sign-in, as a pure rule over a per-account state the
//! caller stores with the user.
//!
//! Progressive, as managed user pools do it: after `threshold` (5) consecutive failures the
//! account is locked for a second; each further failure made after a lock has run out locks it
//! again for twice as long as the last (2 s, 4 s, …), up to `max_lock_ms` (15 minutes). Attempts
//! made while a lock is in effect neither count nor extend it, so a burst of wrong attempts
//! costs the account's owner at most the lock already running. A success resets the state, and
//! so does quiet: a run of failures is forgotten `max_lock_ms` after its last lock ran out (or,
//! before any lock, after its first failure).
//!
//! Why progressive rather than a fixed long lock: a person (or a client checking its own error
//! handling) who mistypes five times waits a second, not a quarter of an hour, while a guesser
//! is soon held to one guess per `max_lock_ms` per account: after the first 5 free guesses,
//! ten more take about 17 minutes of locks, and each one after that 15 minutes (the old rule's 5
//! per 15 minutes, against passwords of at least 12 characters of four kinds).
//!
//! The lock changes no response: a locked account answers `401 Invalid credentials.` exactly
//! like a wrong password, so the lock tells an attacker nothing. The caller must not check the
//! password of a locked account (a right guess must not unlock it), but should spend the same
//! time (`passwords::verify_against_dummy`), so that timing does not reveal the lock either.
//! Request rates across accounts (one address trying many emails) belong to the edge's rate
//! limits, as the spec places them.

use tokenops_domain::Timestamp;

/// One account's recent failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockoutState {
    /// Consecutive failures of the current run, those made during a lock not counted.
    pub failures: u32,
    /// When the current run's first failure happened.
    pub first_failure_at: Option<Timestamp>,
    /// Sign-in is refused until then.
    pub locked_until: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockoutPolicy {
    /// Consecutive failures that lock the account the first time (at least 1).
    pub threshold: u32,
    /// The first lock's length; each failure after a lock has run out doubles it.
    pub first_lock_ms: i64,
    /// The longest lock, and how long a quiet account keeps a run of failures.
    pub max_lock_ms: i64,
}

/// A lock is at most 2^40 first locks long before the cap applies: past any sane cap.
const MAX_DOUBLINGS: u32 = 40;

impl Default for LockoutPolicy {
    fn default() -> Self {
        Self { threshold: 5, first_lock_ms: 1_000, max_lock_ms: 15 * 60 * 1_000 }
    }
}

impl LockoutPolicy {
    /// Whether sign-in is refused at `now` without looking at the password.
    pub fn is_locked(&self, state: &LockoutState, now: Timestamp) -> bool {
        state.locked_until.is_some_and(|until| now < until)
    }

    /// How long the lock that the `failures`-th failure of a run sets lasts, if it sets one.
    pub fn lock_ms(&self, failures: u32) -> Option<i64> {
        let beyond = failures.checked_sub(self.threshold.max(1))?;
        let doubled = self.first_lock_ms.saturating_mul(1_i64 << beyond.min(MAX_DOUBLINGS));
        Some(doubled.min(self.max_lock_ms))
    }

    /// The state after a failed sign-in at `now`.
    pub fn after_failure(&self, state: LockoutState, now: Timestamp) -> LockoutState {
        if self.is_locked(&state, now) {
            return state;
        }
        // A run is forgotten after a quiet spell as long as the longest lock.
        let run_since = state.locked_until.or(state.first_failure_at);
        let forgotten = run_since.is_none_or(|since| now >= since.plus_millis(self.max_lock_ms));
        let (failures, first_failure_at) =
            if forgotten { (1, Some(now)) } else { (state.failures.saturating_add(1), state.first_failure_at) };
        let locked_until = self.lock_ms(failures).map(|ms| now.plus_millis(ms));
        LockoutState { failures, first_failure_at, locked_until }
    }

    /// The state after a successful sign-in: clean.
    pub fn after_success(&self) -> LockoutState {
        LockoutState::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_700_000_000_000_000;

    fn at_ms(ms: i64) -> Timestamp {
        Timestamp::from_micros(T0 + ms * 1_000)
    }

    fn at(secs: i64) -> Timestamp {
        at_ms(secs * 1_000)
    }

    fn fail_times(policy: &LockoutPolicy, mut state: LockoutState, times: &[i64]) -> LockoutState {
        for &t in times {
            state = policy.after_failure(state, at(t));
        }
        state
    }

    #[test]
    fn five_failures_lock_for_a_second() {
        let policy = LockoutPolicy::default();
        let state = fail_times(&policy, LockoutState::default(), &[0, 60, 120, 180]);
        assert_eq!(state.failures, 4);
        assert!(!policy.is_locked(&state, at(180)));
        let state = policy.after_failure(state, at(200));
        assert!(policy.is_locked(&state, at(200)));
        assert!(policy.is_locked(&state, at_ms(200_999)));
        assert!(!policy.is_locked(&state, at(201)), "one second from the fifth failure");
    }

    #[test]
    fn each_failure_after_a_lock_doubles_it_up_to_the_cap() {
        let policy = LockoutPolicy::default();
        let mut state = fail_times(&policy, LockoutState::default(), &[0, 0, 0, 0, 0]);
        let mut now = at(0);
        let mut expected = 1_000;
        for _ in 0..15 {
            let until = state.locked_until.expect("locked");
            assert_eq!(until, now.plus_millis(expected));
            now = until;
            assert!(!policy.is_locked(&state, now));
            state = policy.after_failure(state, now);
            expected = (expected * 2).min(15 * 60 * 1_000);
        }
        assert_eq!(state.locked_until, Some(now.plus_millis(15 * 60 * 1_000)), "capped at 15 minutes");
        assert_eq!(policy.lock_ms(u32::MAX), Some(15 * 60 * 1_000), "no overflow");
    }

    #[test]
    fn failures_during_a_lock_neither_count_nor_extend_it() {
        let policy = LockoutPolicy::default();
        let locked = fail_times(&policy, LockoutState::default(), &[0, 1, 2, 3, 4]);
        assert_eq!(locked.locked_until, Some(at(5)));
        let still = policy.after_failure(locked, at_ms(4_500));
        assert_eq!(still, locked);
        // The next failure after the lock is the sixth: two seconds.
        let after = policy.after_failure(still, at(5));
        assert_eq!(after.failures, 6);
        assert_eq!(after.locked_until, Some(at(7)));
    }

    #[test]
    fn a_quiet_spell_as_long_as_the_cap_forgets_the_run() {
        let policy = LockoutPolicy::default();
        // Before any lock: counted from the run's first failure.
        let state = fail_times(&policy, LockoutState::default(), &[0, 60, 120, 180, 900]);
        assert_eq!((state.failures, state.first_failure_at), (1, Some(at(900))), "a new run");
        assert!(!policy.is_locked(&state, at(900)));
        // After a lock: counted from when it ran out.
        let locked = fail_times(&policy, LockoutState::default(), &[0, 0, 0, 0, 0]);
        let just_before = policy.after_failure(locked, at(1 + 899));
        assert_eq!(just_before.failures, 6);
        let after = policy.after_failure(locked, at(1 + 900));
        assert_eq!((after.failures, after.locked_until), (1, None));
    }

    #[test]
    fn success_resets() {
        let policy = LockoutPolicy::default();
        let state = fail_times(&policy, LockoutState::default(), &[0, 1, 2, 3]);
        assert_eq!(state.failures, 4);
        let state = fail_times(&policy, policy.after_success(), &[4]);
        assert_eq!(state.failures, 1);
        assert_eq!(policy.after_success(), LockoutState::default());
    }

    #[test]
    fn the_threshold_and_cap_are_the_policy_s() {
        let policy = LockoutPolicy { threshold: 2, first_lock_ms: 1_000, max_lock_ms: 3_000 };
        assert_eq!(policy.lock_ms(1), None);
        assert_eq!(policy.lock_ms(2), Some(1_000));
        assert_eq!(policy.lock_ms(3), Some(2_000));
        assert_eq!(policy.lock_ms(4), Some(3_000));
        let zero = LockoutPolicy { threshold: 0, ..policy };
        assert_eq!(zero.lock_ms(1), Some(1_000), "a threshold of 0 counts as 1");
    }
}
