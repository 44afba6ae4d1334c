//! The identity settings: who issues the bearer tokens (the embedded provider or the bank's own),
//! the key set they are checked against, the audience, the master key that seals keys at rest,
//! the lifetimes of what the embedded provider issues, and its sign-in lockout.

use super::redact::redact_url;
use super::sources::Reader;
use std::time::Duration;
use tokenops_identity::LockoutPolicy;

/// Who issues the bearer tokens the service accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProvider {
    /// The embedded identity provider at `{public_url}/idp` (the default).
    Embedded,
    /// The bank's own provider, named by `TOKENOPS_AUTH_ISSUER` (and its JWKS URL): the embedded
    /// provider and its sign-in endpoints are off.
    External,
}

/// Lifetimes of what the embedded provider issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenLifetimes {
    pub access_secs: i64,
    pub refresh_secs: i64,
    /// A signing key older than this is replaced; the old one stays published while tokens it
    /// signed may still be valid.
    pub signing_key_rotation_secs: i64,
}

pub(super) struct Identity {
    pub provider: AuthProvider,
    pub issuer: String,
    pub jwks_url: String,
    pub master_key: Option<String>,
    pub token_lifetimes: TokenLifetimes,
    pub audience: Option<String>,
    pub jwks_ttl: Duration,
}

pub(super) fn read(r: &mut Reader, public_url: &str) -> Identity {
    let external_issuer = r.text("TOKENOPS_AUTH_ISSUER");
    let provider = if external_issuer.is_some() { AuthProvider::External } else { AuthProvider::Embedded };
    let issuer = external_issuer.unwrap_or_else(|| format!("{public_url}/idp"));
    let master_key = r.text("TOKENOPS_MASTER_KEY");
    if let Some(key) = &master_key
        && tokenops_identity::Sealer::from_text(key).is_err()
    {
        // The value itself is a secret: never repeat it.
        r.problems.push("TOKENOPS_MASTER_KEY: must be 32 bytes as 64 hex digits or base64".into());
    }
    let token_lifetimes = TokenLifetimes {
        access_secs: r.integer("TOKENOPS_ACCESS_TOKEN_TTL_SECS", 3_600, 60, 86_400),
        refresh_secs: r.integer("TOKENOPS_REFRESH_TOKEN_TTL_SECS", 43_200, 300, 30 * 86_400),
        signing_key_rotation_secs: r.integer("TOKENOPS_SIGNING_KEY_ROTATION_SECS", 30 * 86_400, 3_600, 365 * 86_400),
    };
    let explicit_jwks_url = r.text("TOKENOPS_AUTH_JWKS_URL");
    let jwks_url_is_derived = explicit_jwks_url.is_none();
    let jwks_url = explicit_jwks_url.unwrap_or_else(|| format!("{issuer}/.well-known/jwks.json"));
    // Only an external provider's keys are fetched; the embedded provider's are read in-process.
    if provider == AuthProvider::External
        && let Err(problem) = tokenops_identity::check_jwks_url(&jwks_url)
    {
        let origin = if jwks_url_is_derived {
            " (derived from TOKENOPS_AUTH_ISSUER / TOKENOPS_PUBLIC_URL; set TOKENOPS_AUTH_JWKS_URL explicitly)"
        } else {
            ""
        };
        r.problems.push(format!("TOKENOPS_AUTH_JWKS_URL={}: {problem}{origin}", redact_url(&jwks_url)));
    }
    let audience = r.text("TOKENOPS_AUTH_AUDIENCE").map(|a| a.trim().to_owned());
    let jwks_ttl = r.seconds("TOKENOPS_AUTH_JWKS_TTL_SECS", 300, 10, 86_400);
    Identity { provider, issuer, jwks_url, master_key, token_lifetimes, audience, jwks_ttl }
}

/// The embedded provider's brute-force rule: failures in a row before the first lock (one
/// second, doubled by each failure after a lock has run out) and the longest lock.
pub(super) fn lockout(r: &mut Reader, d: &LockoutPolicy) -> LockoutPolicy {
    let threshold = r.integer("TOKENOPS_SIGN_IN_LOCKOUT_THRESHOLD", i64::from(d.threshold), 1, 1_000);
    let max_lock_secs = r.integer("TOKENOPS_SIGN_IN_LOCKOUT_MAX_SECS", d.max_lock_ms / 1_000, 1, 86_400);
    LockoutPolicy {
        threshold: u32::try_from(threshold).unwrap_or(d.threshold),
        max_lock_ms: max_lock_secs * 1_000,
        ..*d
    }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load;
    use std::time::Duration;

    #[test]
    fn jwks_url_must_be_https_unless_loopback() {
        for url in [
            "https://idp.example.com/.well-known/jwks.json",
            "http://127.0.0.1:9000/jwks",
            "http://127.1.2.3/jwks",
            "http://[::1]:9000/jwks",
            "http://localhost:9000/jwks",
        ] {
            let c = load(&[("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"), ("TOKENOPS_AUTH_JWKS_URL", url)])
                .unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(c.auth_jwks_url, url);
        }
        for url in [
            "http://idp.example.com/.well-known/jwks.json",
            "http://10.1.2.3/jwks",
            "http://127.0.0.1.nip.io/jwks",
            "ftp://idp.example.com/jwks",
            "jwks.json",
        ] {
            let text = load(&[("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"), ("TOKENOPS_AUTH_JWKS_URL", url)])
                .expect_err(url)
                .to_string();
            assert!(text.contains("TOKENOPS_AUTH_JWKS_URL"), "{url}: {text}");
        }
        let text = load(&[
            ("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"),
            ("TOKENOPS_AUTH_JWKS_URL", "http://idp.example.com/jwks"),
        ])
        .expect_err("http")
        .to_string();
        assert!(text.contains("https://"), "{text}");
    }

    #[test]
    fn the_default_jwks_url_follows_the_public_url() {
        assert_eq!(load(&[]).expect("default").auth_jwks_url, "http://127.0.0.1:8080/idp/.well-known/jwks.json");
        let c = load(&[("TOKENOPS_PUBLIC_URL", "https://tokenops.example.com")]).expect("https public URL");
        assert_eq!(c.auth_jwks_url, "https://tokenops.example.com/idp/.well-known/jwks.json");
        // The embedded provider's keys are read in-process: a plain-http public URL is fine.
        load(&[("TOKENOPS_PUBLIC_URL", "http://tokenops.internal:8080")]).expect("embedded, nothing fetched");
        // An external issuer on plain http yields a refused derived JWKS URL, and the message
        // says where it came from.
        let text = load(&[("TOKENOPS_AUTH_ISSUER", "http://idp.internal")]).expect_err("http").to_string();
        assert!(text.contains("TOKENOPS_AUTH_JWKS_URL") && text.contains("derived"), "{text}");
        // An https issuer of its own fixes it.
        let c = load(&[
            ("TOKENOPS_PUBLIC_URL", "http://tokenops.internal:8080"),
            ("TOKENOPS_AUTH_ISSUER", "https://idp.example.com"),
        ])
        .expect("https issuer");
        assert_eq!(c.auth_jwks_url, "https://idp.example.com/.well-known/jwks.json");
    }

    #[test]
    fn audience_and_key_ttl_settings() {
        let c = load(&[]).expect("defaults");
        assert_eq!(c.auth_audience, None);
        assert_eq!(c.auth_jwks_ttl, Duration::from_secs(300));
        let c = load(&[("TOKENOPS_AUTH_AUDIENCE", " https://api.example.com "), ("TOKENOPS_AUTH_JWKS_TTL_SECS", "60")])
            .expect("valid");
        assert_eq!(c.auth_audience.as_deref(), Some("https://api.example.com"));
        assert_eq!(c.auth_jwks_ttl, Duration::from_secs(60));
        for ttl in ["9", "86401", "five", "-1"] {
            let text = load(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", ttl)]).expect_err(ttl).to_string();
            assert!(text.contains("TOKENOPS_AUTH_JWKS_TTL_SECS"), "{ttl}: {text}");
        }
        for ttl in ["10", "86400"] {
            load(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", ttl)]).unwrap_or_else(|e| panic!("{ttl}: {e}"));
        }
    }

    #[test]
    fn the_sign_in_lockout_is_set_within_bounds() {
        let c = load(&[]).expect("defaults");
        assert_eq!(c.app.sign_in_lockout, tokenops_identity::LockoutPolicy::default());
        let c = load(&[("TOKENOPS_SIGN_IN_LOCKOUT_THRESHOLD", "3"), ("TOKENOPS_SIGN_IN_LOCKOUT_MAX_SECS", "60")])
            .expect("valid");
        assert_eq!((c.app.sign_in_lockout.threshold, c.app.sign_in_lockout.max_lock_ms), (3, 60_000));
        assert_eq!(c.app.sign_in_lockout.first_lock_ms, 1_000);
        for (name, bad) in [("TOKENOPS_SIGN_IN_LOCKOUT_THRESHOLD", "0"), ("TOKENOPS_SIGN_IN_LOCKOUT_MAX_SECS", "0")] {
            let text = load(&[(name, bad)]).expect_err(bad).to_string();
            assert!(text.contains(name), "{text}");
        }
    }
}
