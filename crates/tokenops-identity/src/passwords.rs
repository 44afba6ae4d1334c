//! Passwords: the complexity policy, argon2id hashing and verification, the dummy verification
//! that keeps unknown accounts as slow as known ones, and temporary passwords for invitations.
//!
//! Hashing uses argon2id with m = 19 456 KiB, t = 2, p = 1: the first of OWASP's equivalent
//! recommended settings (Password Storage Cheat Sheet), which is also the `argon2` crate's
//! default and RFC 9106's "memory-constrained" family. It costs 19 MiB and a few tens of
//! milliseconds per call in a release build; the memory bound, not the time, is what slows a
//! GPU attacker. Stored hashes are PHC strings, so they carry their own parameters: raising
//! `PARAMS` later keeps old hashes verifying, and `needs_rehash` tells the caller when to
//! re-hash a password it has just verified.
//!
//! Every function here is CPU-bound for that long: call them from `spawn_blocking`, never on
//! an async worker thread. The caller should also bound how many run at once (19 MiB each).
//!
//! Passwords are compared as their UTF-8 bytes, without Unicode normalisation.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use rand::Rng;
use rand::rngs::OsRng;
use rand::seq::SliceRandom;
use zeroize::Zeroizing;

/// Memory in KiB, passes, lanes: OWASP's minimum for argon2id (see the module header).
pub const ARGON2_M_COST_KIB: u32 = 19_456;
pub const ARGON2_T_COST: u32 = 2;
pub const ARGON2_P_COST: u32 = 1;
const ARGON2_OUTPUT_LEN: usize = 32;

// OWASP Password Storage Cheat Sheet: argon2id with m = 19 MiB, t = 2, p = 1 at the least. A
// build with weaker constants does not compile.
const _: () = assert!(ARGON2_M_COST_KIB >= 19_456 && ARGON2_T_COST >= 2 && ARGON2_P_COST >= 1);

/// The complexity rules a new password must meet (the "user-pool policy" of the spec).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasswordPolicy {
    /// In characters (Unicode scalar values), not bytes.
    pub min_length: usize,
    /// Keeps requests from feeding megabytes to the hash; 256 is far above any passphrase.
    pub max_length: usize,
    pub require_lower: bool,
    pub require_upper: bool,
    pub require_digit: bool,
    /// Anything that is not a letter, a digit, white space or a control character.
    pub require_symbol: bool,
}

impl Default for PasswordPolicy {
    fn default() -> Self {
        Self {
            min_length: 12,
            max_length: 256,
            require_lower: true,
            require_upper: true,
            require_digit: true,
            require_symbol: true,
        }
    }
}

/// Which rule a refused password broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordRule {
    /// Too short, or missing a required kind of character: one message covers these, since
    /// the person fixes them together.
    Composition,
    TooLong,
    SameAsEmail,
}

/// A refused password. Displays the rule in full, ready for the 400's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PolicyViolation {
    pub rule: PasswordRule,
    pub message: String,
}

impl PasswordPolicy {
    /// Checks `password` for an account whose email is `email`.
    pub fn validate(&self, password: &str, email: &str) -> Result<(), PolicyViolation> {
        let length = password.chars().count();
        if length > self.max_length {
            return Err(self.violation(PasswordRule::TooLong));
        }
        let has = |test: fn(char) -> bool| password.chars().any(test);
        let composed = length >= self.min_length
            && (!self.require_lower || has(char::is_lowercase))
            && (!self.require_upper || has(char::is_uppercase))
            && (!self.require_digit || has(|c| c.is_ascii_digit()))
            && (!self.require_symbol || has(is_symbol));
        if !composed {
            return Err(self.violation(PasswordRule::Composition));
        }
        // Case-insensitively, since email addresses are compared that way in practice.
        let email = email.trim();
        if !email.is_empty() && password.trim().to_lowercase() == email.to_lowercase() {
            return Err(self.violation(PasswordRule::SameAsEmail));
        }
        Ok(())
    }

    /// The composition rule as one sentence, for example "Password must be at least 12
    /// characters and contain an upper-case letter, a lower-case letter, a digit and a symbol."
    pub fn describe(&self) -> String {
        let kinds: Vec<&str> = [
            (self.require_upper, "an upper-case letter"),
            (self.require_lower, "a lower-case letter"),
            (self.require_digit, "a digit"),
            (self.require_symbol, "a symbol"),
        ]
        .into_iter()
        .filter_map(|(required, kind)| required.then_some(kind))
        .collect();
        let mut text = format!("Password must be at least {} characters", self.min_length);
        if let Some((last, rest)) = kinds.split_last() {
            text.push_str(" and contain ");
            if !rest.is_empty() {
                text.push_str(&rest.join(", "));
                text.push_str(" and ");
            }
            text.push_str(last);
        }
        text.push('.');
        text
    }

    fn violation(&self, rule: PasswordRule) -> PolicyViolation {
        let message = match rule {
            PasswordRule::Composition => self.describe(),
            PasswordRule::TooLong => format!("Password must be at most {} characters.", self.max_length),
            PasswordRule::SameAsEmail => "Password must not be the same as the email address.".to_owned(),
        };
        PolicyViolation { rule, message }
    }
}

fn is_symbol(c: char) -> bool {
    !c.is_alphanumeric() && !c.is_whitespace() && !c.is_control()
}

#[derive(Debug, thiserror::Error)]
#[error("the password could not be hashed: {0}")]
pub struct HashError(String);

fn hasher() -> Argon2<'static> {
    let params = Params::new(ARGON2_M_COST_KIB, ARGON2_T_COST, ARGON2_P_COST, Some(ARGON2_OUTPUT_LEN))
        // The constants above are within argon2's limits; a test pins that.
        .unwrap_or(Params::DEFAULT);
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// The argon2id PHC string of `password`, with a fresh 128-bit salt.
pub fn hash_password(password: &str) -> Result<String, HashError> {
    let salt = SaltString::generate(&mut OsRng);
    hasher()
        .hash_password(password.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `password` matches the stored PHC string. A stored value that is not a PHC string
/// is a mismatch, after the same work as a real check so that it does not stand out.
pub fn verify_password(phc: &str, password: &str) -> bool {
    match PasswordHash::new(phc) {
        Ok(hash) => hasher().verify_password(password.as_bytes(), &hash).is_ok(),
        Err(_) => {
            tracing::error!("a stored password hash is not a PHC string; treating it as a mismatch");
            verify_against_dummy(password)
        }
    }
}

/// Spends the time of one real verification and answers false. For sign-in with an unknown
/// email, so the answer's timing does not tell which emails have accounts.
pub fn verify_against_dummy(password: &str) -> bool {
    // A well-formed hash with the current parameters that no password matches in practice
    // (its output is all zeros), so the work done is exactly that of a real verification.
    let dummy = format!(
        "$argon2id$v=19$m={ARGON2_M_COST_KIB},t={ARGON2_T_COST},p={ARGON2_P_COST}$\
         dG9rZW5vcHMtZHVtbXktc2FsdA${}",
        "A".repeat(43)
    );
    match PasswordHash::new(&dummy) {
        Ok(hash) => {
            let _ = hasher().verify_password(password.as_bytes(), &hash);
        }
        Err(_) => {
            let _ = hash_password(password);
        }
    }
    false
}

/// Whether a hash that just verified was made with weaker parameters than today's, so the
/// caller should store `hash_password` of the same password in its place.
pub fn needs_rehash(phc: &str) -> bool {
    let Ok(hash) = PasswordHash::new(phc) else { return true };
    let Ok(params) = Params::try_from(&hash) else { return true };
    hash.algorithm.as_str() != "argon2id"
        || params.m_cost() < ARGON2_M_COST_KIB
        || params.t_cost() < ARGON2_T_COST
        || params.p_cost() < ARGON2_P_COST
}

/// Letters and digits without the look-alikes (0/O, 1/l/I), and symbols that survive mail
/// bodies, quoted-printable and shells unescaped, so the invited person can type what they read.
const LOWER: &[u8] = b"abcdefghijkmnopqrstuvwxyz";
const UPPER: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZ";
const DIGITS: &[u8] = b"23456789";
const SYMBOLS: &[u8] = b"!#%+-?@_~";
/// 20 characters from 66 symbols: about 120 bits from the OS generator.
const TEMPORARY_LENGTH: usize = 20;

/// A random temporary password (for invitations) that meets the default policy: at least one
/// character of each kind, the rest from all kinds, shuffled.
pub fn generate_temporary_password() -> Zeroizing<String> {
    let all: Vec<u8> = [LOWER, UPPER, DIGITS, SYMBOLS].concat();
    let mut rng = OsRng;
    let mut bytes = Zeroizing::new(Vec::with_capacity(TEMPORARY_LENGTH));
    for kind in [LOWER, UPPER, DIGITS, SYMBOLS] {
        bytes.push(kind[rng.gen_range(0..kind.len())]);
    }
    while bytes.len() < TEMPORARY_LENGTH {
        bytes.push(all[rng.gen_range(0..all.len())]);
    }
    bytes.shuffle(&mut rng);
    // ASCII by construction; the buffer moves into the String without a copy.
    let text = String::from_utf8(std::mem::take(&mut *bytes)).unwrap_or_default();
    Zeroizing::new(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const EMAIL: &str = "ada@example.com";

    #[test]
    fn the_default_policy_and_its_message() {
        let policy = PasswordPolicy::default();
        let full = "Password must be at least 12 characters and contain an upper-case letter, a lower-case \
                    letter, a digit and a symbol.";
        assert_eq!(policy.describe(), full);
        assert_eq!(policy.validate("Correct-Horse-9", EMAIL), Ok(()));
        assert_eq!(policy.validate("Ünïcödé-Pässw0rd", EMAIL), Ok(()));
        assert_eq!(policy.validate("With spaces 9!A", EMAIL), Ok(()));
        for weak in [
            "",
            "Short-9a",
            "Aa1!Aa1!Aa1",         // 11 characters
            "correct-horse-9",     // no upper
            "CORRECT-HORSE-9",     // no lower
            "Correct-Horse-X",     // no digit
            "CorrectHorse99",      // no symbol
            "Correct Horse 99",    // a space is not a symbol
            "Correct\u{7}Horse99", // nor is a control character
        ] {
            let refused = policy.validate(weak, EMAIL).expect_err(weak);
            assert_eq!(refused.rule, PasswordRule::Composition, "{weak}");
            assert_eq!(refused.to_string(), full);
        }
        let long = format!("Aa1!{}", "x".repeat(253));
        assert_eq!(long.chars().count(), 257);
        let refused = policy.validate(&long, EMAIL).expect_err("too long");
        assert_eq!(refused.to_string(), "Password must be at most 256 characters.");
        assert_eq!(policy.validate(&long[..256], EMAIL), Ok(()));
        let refused = policy.validate("Ada.Lovelace1@Example.com", "ada.lovelace1@example.com").expect_err("email");
        assert_eq!(refused.rule, PasswordRule::SameAsEmail);
        assert_eq!(refused.to_string(), "Password must not be the same as the email address.");
    }

    #[test]
    fn a_relaxed_policy_describes_itself() {
        let policy = PasswordPolicy { require_symbol: false, require_digit: false, ..PasswordPolicy::default() };
        assert_eq!(
            policy.describe(),
            "Password must be at least 12 characters and contain an upper-case letter and a lower-case letter."
        );
        let bare = PasswordPolicy {
            min_length: 8,
            require_lower: false,
            require_upper: false,
            require_digit: false,
            require_symbol: false,
            ..PasswordPolicy::default()
        };
        assert_eq!(bare.describe(), "Password must be at least 8 characters.");
        assert_eq!(bare.validate("abcdefgh", EMAIL), Ok(()));
    }

    #[test]
    fn the_parameters_are_valid_for_argon2() {
        assert!(Params::new(ARGON2_M_COST_KIB, ARGON2_T_COST, ARGON2_P_COST, Some(ARGON2_OUTPUT_LEN)).is_ok());
    }

    #[test]
    fn hashes_are_argon2id_phc_strings_that_verify() {
        let phc = hash_password("Correct-Horse-9").expect("hash");
        assert!(phc.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"), "{phc}");
        assert!(verify_password(&phc, "Correct-Horse-9"));
        assert!(!verify_password(&phc, "Correct-Horse-8"));
        assert!(!verify_password(&phc, ""));
        assert!(!needs_rehash(&phc));
        // A fresh salt each time.
        assert_ne!(hash_password("Correct-Horse-9").expect("hash"), phc);
        assert!(!verify_password("not a phc string", "Correct-Horse-9"));
    }

    /// The reference hash of RFC 9106's argon2 implementation, as a PHC string (from the
    /// `argon2` reference test suite, argon2id v19, m=65536, t=2, p=1, salt "somesalt"):
    /// hashes made elsewhere with other parameters verify, and ask for no rehash when stronger.
    #[test]
    fn a_reference_hash_verifies() {
        let phc = "$argon2id$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc";
        assert!(verify_password(phc, "password"));
        assert!(!verify_password(phc, "Password"));
        assert!(!needs_rehash(phc));
        // Parameters only: weaker memory than today's asks for a rehash, another variant too.
        let weak = "$argon2id$v=19$m=4096,t=3,p=1$c29tZXNhbHQ$mk7ZhNhQQ2Yt7bZ9jS1y6bIuIVB4qZu8ZSLjdTB1p+8";
        assert!(needs_rehash(weak));
        assert!(needs_rehash("$argon2i$v=19$m=65536,t=2,p=1$c29tZXNhbHQ$CTFhFdXPJO1aFaMaO6Mm5c8y7cJHAph8ArZWb2GRPPc"));
    }

    #[test]
    fn the_dummy_costs_what_a_real_verification_costs() {
        let phc = hash_password("Correct-Horse-9").expect("hash");
        let dummy = format!(
            "$argon2id$v=19$m={ARGON2_M_COST_KIB},t={ARGON2_T_COST},p={ARGON2_P_COST}$dG9rZW5vcHMtZHVtbXktc2FsdA${}",
            "A".repeat(43)
        );
        let (real, fake) = (PasswordHash::new(&phc).expect("real"), PasswordHash::new(&dummy).expect("dummy"));
        // Same algorithm, parameters and output length: the same work, by construction.
        assert_eq!(real.algorithm, fake.algorithm);
        assert_eq!(Params::try_from(&real).expect("params"), Params::try_from(&fake).expect("params"));
        assert_eq!(real.hash.map(|h| h.len()), fake.hash.map(|h| h.len()));
        assert!(!verify_against_dummy("Correct-Horse-9"));
        assert!(!verify_against_dummy(""));
        // And, loosely, it takes about as long. Each is timed five times, interleaved, and its
        // fastest run is compared: other tests running at once only ever add time, so one
        // sample each had failed a loaded CI run (54 ms against 188 ms).
        let time = |verify: &dyn Fn()| {
            let started = Instant::now();
            verify();
            started.elapsed()
        };
        let (mut real_time, mut dummy_time) = (std::time::Duration::MAX, std::time::Duration::MAX);
        for _ in 0..5 {
            real_time = real_time.min(time(&|| {
                verify_password(&phc, "Correct-Horse-9");
            }));
            dummy_time = dummy_time.min(time(&|| {
                verify_against_dummy("Correct-Horse-9");
            }));
        }
        assert!(dummy_time * 3 > real_time && dummy_time < real_time * 3, "{real_time:?} vs {dummy_time:?}");
    }

    #[test]
    fn temporary_passwords_meet_the_policy_and_differ() {
        let policy = PasswordPolicy::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..500 {
            let password = generate_temporary_password();
            assert_eq!(password.len(), TEMPORARY_LENGTH);
            assert_eq!(policy.validate(&password, EMAIL), Ok(()), "{}", password.as_str());
            assert!(password.bytes().all(|b| [LOWER, UPPER, DIGITS, SYMBOLS].iter().any(|k| k.contains(&b))));
            assert!(seen.insert(password.to_string()));
        }
    }
}
