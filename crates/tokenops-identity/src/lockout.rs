//! Brute-force protection for password sign-in, as a pure rule over a per-account state the
//! caller stores with the user.
//!
//! The numbers: 5 failed attempts within 15 minutes of the first lock the account for 15
//! minutes. That bounds an online guesser to 5 guesses per 15 minutes per account (at most 480 a
//! day), against passwords of at least 12 characters of four kinds; and a person who mistypes a
//! few times waits a quarter of an hour at worst. Failures during a lock neither count nor
//! extend it, so nobody can keep someone else locked out for longer than by starting over.
//! A success resets the state.
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
    /// Failures in the current window.
    pub failures: u32,
    /// When the current window's first failure happened.
    pub first_failure_at: Option<Timestamp>,
    /// Sign-in is refused until then.
    pub locked_until: Option<Timestamp>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockoutPolicy {
    pub max_failures: u32,
    /// Failures further apart than this from the window's first start a new window.
    pub window_ms: i64,
    pub lock_for_ms: i64,
}

const FIFTEEN_MINUTES_MS: i64 = 15 * 60 * 1_000;

impl Default for LockoutPolicy {
    fn default() -> Self {
        Self { max_failures: 5, window_ms: FIFTEEN_MINUTES_MS, lock_for_ms: FIFTEEN_MINUTES_MS }
    }
}

impl LockoutPolicy {
    /// Whether sign-in is refused at `now` without looking at the password.
    pub fn is_locked(&self, state: &LockoutState, now: Timestamp) -> bool {
        state.locked_until.is_some_and(|until| now < until)
    }

    /// The state after a failed sign-in at `now`.
    pub fn after_failure(&self, state: LockoutState, now: Timestamp) -> LockoutState {
        if self.is_locked(&state, now) {
            return state;
        }
        let window_open = state.locked_until.is_none()
            && state.first_failure_at.is_some_and(|first| now < first.plus_millis(self.window_ms));
        let (failures, first_failure_at) =
            if window_open { (state.failures.saturating_add(1), state.first_failure_at) } else { (1, Some(now)) };
        if failures >= self.max_failures {
            LockoutState { failures, first_failure_at, locked_until: Some(now.plus_millis(self.lock_for_ms)) }
        } else {
            LockoutState { failures, first_failure_at, locked_until: None }
        }
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

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_micros(T0 + secs * 1_000_000)
    }

    fn fail_times(policy: &LockoutPolicy, mut state: LockoutState, times: &[i64]) -> LockoutState {
        for &t in times {
            state = policy.after_failure(state, at(t));
        }
        state
    }

    #[test]
    fn five_failures_within_fifteen_minutes_lock_for_fifteen_minutes() {
        let policy = LockoutPolicy::default();
        let state = fail_times(&policy, LockoutState::default(), &[0, 60, 120, 180]);
        assert_eq!(state.failures, 4);
        assert!(!policy.is_locked(&state, at(180)));
        let state = policy.after_failure(state, at(899));
        assert!(policy.is_locked(&state, at(899)));
        assert!(policy.is_locked(&state, at(899 + 899)));
        assert!(!policy.is_locked(&state, at(899 + 900)), "15 minutes from the fifth failure");
    }

    #[test]
    fn failures_spread_beyond_the_window_do_not_lock() {
        let policy = LockoutPolicy::default();
        let state = fail_times(&policy, LockoutState::default(), &[0, 60, 120, 180, 900]);
        assert_eq!((state.failures, state.first_failure_at), (1, Some(at(900))), "a new window");
        assert!(!policy.is_locked(&state, at(900)));
    }

    #[test]
    fn failures_during_a_lock_neither_count_nor_extend_it() {
        let policy = LockoutPolicy::default();
        let locked = fail_times(&policy, LockoutState::default(), &[0, 1, 2, 3, 4]);
        assert_eq!(locked.locked_until, Some(at(904)));
        let still = fail_times(&policy, locked, &[10, 500, 903]);
        assert_eq!(still, locked);
        // After the lock, counting starts over: one failure does not lock again.
        let after = policy.after_failure(still, at(904));
        assert_eq!(after, LockoutState { failures: 1, first_failure_at: Some(at(904)), locked_until: None });
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
}
