//! Bearer-token verification: signature by the key the token's `kid` names in the issuer's JWKS,
//! the algorithm pinned to the one that key is published for, the issuer, the audience when one
//! is configured, and expiry (and `nbf` when present) checked against the service's clock with the
//! same leeway. A token whose header points at a key of its own (`jku`, `x5u`, `jwk`, `x5c`) is
//! refused before any key is looked up: keys come from the trusted set only, never from the token
//! (spec, JWS checks: "never a key URL supplied by the token"). A token whose `token_use` is
//! present and not `access` is refused, so nothing else an issuer signs passes as an access token.
//!
//! The keys come from one of two sources:
//! - **Remote** (`TokenVerifier::new`): an issuer's JWKS URL. The key set is cached. It is
//!   refreshed when it is older than its TTL (so a key the issuer withdraws stops being accepted)
//!   and when a token names an unknown `kid` (which is how rotated keys are picked up); both
//!   refetches are rate-limited. Fetches never run under the cache's lock: verifications of known
//!   keys only read the cache, and a separate gate lets one fetch run at a time, so a slow or
//!   unreachable issuer delays only the verifications that need new keys.
//! - **Embedded** (`TokenVerifier::embedded`): the embedded provider's published keys, read in
//!   process on every verification, so a rotation or a retirement applies at once and no request
//!   waits on HTTP.
//!
//! A client sends the same token with every request for up to an hour, and checking it was
//! most of a request's CPU. So a token that passed every check but the instant's is remembered
//! with the key that checked it (`CheckedTokens`): for the same bytes again only the key's
//! standing (still trusted, same algorithm, same key set), expiry and `nbf` are checked, so a
//! withdrawn key or an expired token is refused exactly as before.
//!
//! Here: the `TokenVerifier` API and the tokens it remembers. `claims`: the header, signature and
//! claim checks; `jwks`: fetching and caching a remote issuer's key set; `published`: the
//! embedded provider's keys.

mod claims;
mod jwks;
mod published;
#[cfg(test)]
mod test_issuer;

pub use self::jwks::check_jwks_url;
pub use self::published::{PublishedKeys, jwks_fn};

use self::claims::refuse_key_bearing_header;
use self::jwks::RemoteKeys;
use self::published::{embedded_jwk, embedded_key};
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokenops_domain::{TenantId, Timestamp};

use crate::keys::KeyRing;

/// Clock skew tolerated on `exp` and `nbf` by default, in seconds.
pub const DEFAULT_LEEWAY_SECS: i64 = 30;

#[derive(Debug, Clone)]
pub struct VerifierSettings {
    /// The `iss` every accepted token must carry.
    pub issuer: String,
    /// Where the issuer publishes its signing keys.
    pub jwks_url: String,
    /// When set, the value every accepted token must carry in `aud` (a string, or one member of
    /// an array). When unset, `aud` is not checked.
    pub audience: Option<String>,
    /// Clock skew tolerated on `exp`, in seconds.
    pub leeway_secs: i64,
    /// Minimum time between two JWKS fetches: those caused by unknown `kid`s, and retries of a
    /// refresh that failed.
    pub refresh_interval: Duration,
    /// How long a fetched key set is trusted; the first verification after that refreshes it.
    pub keys_ttl: Duration,
}

/// The verified claims the service uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub subject: String,
    /// `None` for a platform operator token.
    pub tenant: Option<TenantId>,
    pub expires_at: Timestamp,
    /// The OAuth `scope` claim's space-separated values (RFC 9068 §2.2.3), as given; empty when
    /// absent. An external provider grants permissions through it (see `identity::access`).
    pub scope: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VerifyError {
    #[error("the token is malformed")]
    Malformed,
    #[error("the token names no key, or a key the issuer does not publish")]
    UnknownKey,
    #[error("the token's algorithm is not the one its key is published for")]
    WrongAlgorithm,
    #[error("the token's signature or issuer is invalid")]
    Invalid,
    #[error("the token is not meant for this service (aud)")]
    WrongAudience,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet (nbf)")]
    NotYetValid,
    #[error("the issuer's keys could not be fetched")]
    KeysUnavailable,
    #[error("the token's header carries or points at a key (jku, x5u, jwk or x5c)")]
    KeyInHeader,
    #[error("the token is not an access token (token_use)")]
    NotAnAccessToken,
}

pub struct TokenVerifier {
    issuer: String,
    audience: Option<String>,
    leeway_secs: i64,
    source: KeySource,
    checked: CheckedTokens,
}

/// Tokens that passed every check but the instant's, with the key (kid, algorithm and key-set
/// generation) that checked them and what they grant. Bounded: when full it starts over, which
/// costs one full check per token in use.
#[derive(Default)]
struct CheckedTokens {
    checked: std::sync::Mutex<HashMap<String, Remembered>>,
}

/// A token's outcome of the checks that depend only on its bytes and on the verifier's own
/// settings (header, signature, issuer, audience, use, claims' form).
#[derive(Clone)]
struct Remembered {
    kid: String,
    algorithm: Algorithm,
    generation: u64,
    claims: Claims,
    not_before: Option<Timestamp>,
}

/// Tokens remembered at most; a few thousand clients' tokens fit.
const SIGNATURE_MEMO_CAPACITY: usize = 10_000;

impl CheckedTokens {
    fn get(&self, token: &str) -> Option<Remembered> {
        self.checked.lock().ok()?.get(token).cloned()
    }

    fn remember(&self, token: &str, remembered: Remembered) {
        if let Ok(mut checked) = self.checked.lock() {
            if checked.len() >= SIGNATURE_MEMO_CAPACITY {
                checked.clear();
            }
            checked.insert(token.to_owned(), remembered);
        }
    }
}

enum KeySource {
    Remote(RemoteKeys),
    Embedded(Arc<dyn PublishedKeys>),
}

impl TokenVerifier {
    /// Verifies tokens of a remote issuer (the bank's own provider, or a test issuer) against
    /// its JWKS URL.
    pub fn new(settings: VerifierSettings) -> Result<Self, reqwest::Error> {
        Ok(Self {
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            leeway_secs: settings.leeway_secs,
            source: KeySource::Remote(RemoteKeys::new(settings)?),
            checked: CheckedTokens::default(),
        })
    }

    /// Verifies tokens of the embedded provider, whose `iss` is `issuer`, against the keys
    /// `keys` publishes at the instant of each verification. No audience is checked (the
    /// embedded provider sets none); the leeway is `DEFAULT_LEEWAY_SECS`.
    pub fn embedded(issuer: impl Into<String>, keys: Arc<dyn PublishedKeys>) -> Self {
        Self {
            issuer: issuer.into(),
            audience: None,
            leeway_secs: DEFAULT_LEEWAY_SECS,
            source: KeySource::Embedded(keys),
            checked: CheckedTokens::default(),
        }
    }

    /// `embedded` over a key ring shared in process: what the ring publishes at each instant is
    /// what verifies, so rotations and prunes apply to the next request.
    pub fn embedded_ring(issuer: impl Into<String>, ring: Arc<std::sync::RwLock<KeyRing>>) -> Self {
        Self::embedded(issuer, ring)
    }

    /// Sets the clock skew tolerated on `exp` and `nbf`.
    pub fn with_leeway_secs(mut self, leeway_secs: i64) -> Self {
        self.leeway_secs = leeway_secs;
        self
    }

    /// The `iss` every accepted token must carry.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The remote issuer's settings; `None` for the embedded provider.
    pub fn remote_settings(&self) -> Option<&VerifierSettings> {
        match &self.source {
            KeySource::Remote(remote) => Some(&remote.settings),
            KeySource::Embedded(_) => None,
        }
    }

    /// Verifies `token` at the instant `now`.
    pub async fn verify(&self, token: &str, now: Timestamp) -> Result<Claims, VerifyError> {
        // The same bytes passed every other check before: what can have changed since is the
        // key's standing (withdrawn, rotated out, another key set) and the instant.
        if let Some(known) = self.checked.get(token) {
            let (algorithm, generation) = self.standing(&known.kid, now).await?;
            if algorithm == known.algorithm && generation == known.generation {
                return self.check_instant(known.claims, known.not_before, now);
            }
        }
        refuse_key_bearing_header(token)?;
        let header = jsonwebtoken::decode_header(token).map_err(|_| VerifyError::Malformed)?;
        let kid = header.kid.clone().ok_or(VerifyError::UnknownKey)?;
        let (key, algorithm, generation) = self.trusted_key(&kid, now).await?;
        if header.alg != algorithm {
            return Err(VerifyError::WrongAlgorithm);
        }
        let raw = self.check_signature(token, &key, algorithm)?;
        let (claims, not_before) = self.check_claims(raw)?;
        self.checked.remember(token, Remembered { kid, algorithm, generation, claims: claims.clone(), not_before });
        self.check_instant(claims, not_before, now)
    }

    /// The key `kid` names among the trusted ones at `now`, its pinned algorithm and the
    /// generation of the set it belongs to (an embedded key's material never changes under its
    /// kid: one generation).
    async fn trusted_key(&self, kid: &str, now: Timestamp) -> Result<(DecodingKey, Algorithm, u64), VerifyError> {
        match &self.source {
            KeySource::Remote(remote) => remote.key(kid, now).await,
            KeySource::Embedded(keys) => {
                let published = keys.published_jwks(now, kid).await.ok_or(VerifyError::KeysUnavailable)?;
                let (key, algorithm) = embedded_key(&published, kid)?;
                Ok((key, algorithm, 0))
            }
        }
    }

    /// `trusted_key`'s algorithm and generation, for a token whose signature that key checked
    /// (an embedded key is not built for it).
    async fn standing(&self, kid: &str, now: Timestamp) -> Result<(Algorithm, u64), VerifyError> {
        match &self.source {
            KeySource::Remote(remote) => {
                remote.key(kid, now).await.map(|(_, algorithm, generation)| (algorithm, generation))
            }
            KeySource::Embedded(keys) => {
                let published = keys.published_jwks(now, kid).await.ok_or(VerifyError::KeysUnavailable)?;
                let algorithm = algorithm_of(&embedded_jwk(&published, kid)?).ok_or(VerifyError::UnknownKey)?;
                Ok((algorithm, 0))
            }
        }
    }
}

/// The algorithm a published key is for: its `alg` member, else ES256 for a P-256 EC key. Other
/// keys are ignored, so that a token cannot pick a weaker algorithm than its key's.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    use jsonwebtoken::jwk::{EllipticCurve, KeyAlgorithm};
    match (&jwk.common.key_algorithm, &jwk.algorithm) {
        (Some(KeyAlgorithm::ES256), _) => Some(Algorithm::ES256),
        (None, AlgorithmParameters::EllipticCurve(ec)) if ec.curve == EllipticCurve::P256 => Some(Algorithm::ES256),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::test_issuer::*;
    use super::*;
    use base64::Engine;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;
    use uuid::Uuid;

    /// The embedded provider: tokens from `TokenIssuer`, keys read from the ring in process.
    mod embedded {
        use super::*;
        use crate::keys::{KeyRing, SigningKey};
        use crate::tokens::{AccessClaims, TokenIssuer};
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use p256::ecdsa::signature::Signer;
        use std::sync::RwLock as StdRwLock;

        const ISSUER: &str = "http://127.0.0.1:8080/idp";

        fn setup() -> (Arc<StdRwLock<KeyRing>>, TokenVerifier, TokenIssuer) {
            let mut ring = KeyRing::default();
            ring.ensure_current(at(0.0));
            let ring = Arc::new(StdRwLock::new(ring));
            let verifier = TokenVerifier::embedded_ring(ISSUER, ring.clone());
            (ring, verifier, TokenIssuer::new(ISSUER, 3_600))
        }

        fn issue(ring: &StdRwLock<KeyRing>, issuer: &TokenIssuer, tenant: Option<TenantId>, now: Timestamp) -> String {
            let claims = AccessClaims { sub: "user-1".into(), tenant_id: tenant, extra: None };
            issuer.issue(&ring.read().expect("ring"), &claims, now).expect("issued").token
        }

        fn current(ring: &StdRwLock<KeyRing>) -> SigningKey {
            ring.read().expect("ring").current().cloned().expect("current key")
        }

        /// A token with any header and claims, validly signed by `key`.
        fn signed(key: &SigningKey, header: serde_json::Value, claims: serde_json::Value) -> String {
            let input = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(header.to_string()),
                URL_SAFE_NO_PAD.encode(claims.to_string())
            );
            let signature: p256::ecdsa::Signature = p256::ecdsa::SigningKey::from(&key.secret).sign(input.as_bytes());
            format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
        }

        fn claims_at(now: Timestamp) -> serde_json::Value {
            let iat = now.as_micros() / 1_000_000;
            json!({ "iss": ISSUER, "sub": "s", "iat": iat, "exp": iat + 60 })
        }

        #[tokio::test]
        async fn issued_tokens_verify_without_http() {
            let (ring, verifier, issuer) = setup();
            let tenant = TenantId(Uuid::now_v7());
            let token = issue(&ring, &issuer, Some(tenant), at(0.0));
            let claims = verifier.verify(&token, at(1.0)).await.expect("verifies");
            assert_eq!(claims.subject, "user-1");
            assert_eq!(claims.tenant, Some(tenant));
            assert_eq!(claims.expires_at, at(3_600.0));
            let platform = issue(&ring, &issuer, None, at(0.0));
            assert_eq!(verifier.verify(&platform, at(1.0)).await.expect("verifies").tenant, None);
            assert_eq!(verifier.issuer(), ISSUER);
            assert!(verifier.remote_settings().is_none());
        }

        #[tokio::test]
        async fn a_remembered_signature_holds_only_for_its_token_and_key() {
            let (ring, verifier, issuer) = setup();
            let token = issue(&ring, &issuer, None, at(0.0));
            let kid = current(&ring).kid;
            assert!(verifier.checked.get(&token).is_none(), "nothing checked yet");
            assert!(verifier.verify(&token, at(1.0)).await.is_ok());
            let remembered = verifier.checked.get(&token).expect("checked once, remembered");
            assert_eq!((remembered.kid.as_str(), remembered.generation), (kid.as_str(), 0));
            // The same claims under a forged signature are another token: checked, and refused.
            let forged = format!("{}.{}", token.rsplit_once('.').expect("signed").0, "AAAA");
            assert_eq!(verifier.verify(&forged, at(1.0)).await, Err(VerifyError::Invalid));
        }

        /// A remote issuer's token, checked once, is checked again in full when its key set
        /// changes, and refused while its key is withdrawn, remembered or not.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_remembered_token_holds_only_while_its_key_set_does() {
            let (ring, _, _) = setup();
            let key = current(&ring);
            let remote = Issuer::start(&[]);
            remote.publish_real(vec![key.public_jwk()]);
            let v = verifier(&remote);
            let token = signed(
                &key,
                json!({ "alg": "ES256", "typ": "JWT", "kid": key.kid }),
                json!({ "iss": "https://idp.example", "sub": "s", "exp": (T0 / 1_000_000) + 3_600 }),
            );
            assert!(v.verify(&token, at(0.0)).await.is_ok());
            let first = v.checked.get(&token).expect("remembered");
            assert_eq!((first.algorithm, first.generation), (Algorithm::ES256, 1));
            assert!(v.verify(&token, at(59.0)).await.is_ok(), "remembered, the set still fresh");
            assert_eq!(remote.requests(), 1);
            remote.publish_real(Vec::new());
            assert_eq!(v.verify(&token, at(60.0)).await, Err(VerifyError::UnknownKey), "the key withdrawn");
            remote.publish_real(vec![key.public_jwk()]);
            assert!(v.verify(&token, at(120.0)).await.is_ok(), "published again: checked anew");
            assert_eq!(v.checked.get(&token).expect("remembered").generation, 3);
            assert_eq!(v.verify(&token, at(3_630.0)).await, Err(VerifyError::Expired));
        }

        #[tokio::test]
        async fn expiry_and_issuer_still_apply() {
            let (ring, verifier, issuer) = setup();
            let token = issue(&ring, &issuer, None, at(0.0));
            assert!(verifier.verify(&token, at(3_629.0)).await.is_ok(), "within the leeway");
            assert_eq!(verifier.verify(&token, at(3_630.0)).await, Err(VerifyError::Expired));
            assert_eq!(verifier.verify(&token, at(-31.0)).await, Err(VerifyError::NotYetValid));
            let other = TokenVerifier::embedded_ring("https://elsewhere.example", ring.clone());
            assert_eq!(other.verify(&token, at(1.0)).await, Err(VerifyError::Invalid));
        }

        #[tokio::test]
        async fn rotated_keys_verify_until_retired_and_then_not() {
            let (ring, verifier, issuer) = setup();
            let old = issue(&ring, &issuer, None, at(0.0));
            ring.write().expect("ring").rotate(at(100.0), issuer.minimum_key_overlap());
            let new = issue(&ring, &issuer, None, at(100.0));
            assert!(verifier.verify(&old, at(101.0)).await.is_ok(), "old key still published");
            assert!(verifier.verify(&new, at(101.0)).await.is_ok(), "new key at once, no refresh");
            // The old key retires at 100 + 3660 s, after every token it signed has expired. A
            // token it signed with a longer life (not one this issuer makes) shows the cut-off.
            let old_key = ring.read().expect("ring").keys[0].clone();
            let long_lived = signed(
                &old_key,
                json!({ "alg": "ES256", "typ": "JWT", "kid": old_key.kid }),
                json!({ "iss": ISSUER, "sub": "s", "exp": (T0 / 1_000_000) + 86_400 }),
            );
            assert!(verifier.verify(&long_lived, at(3_759.0)).await.is_ok());
            assert_eq!(verifier.verify(&long_lived, at(3_760.0)).await, Err(VerifyError::UnknownKey));
            assert!(verifier.verify(&new, at(3_729.0)).await.is_ok(), "the current key is unaffected");
            assert_eq!(ring.write().expect("ring").prune(at(3_760.0)), std::slice::from_ref(&old_key.kid));
            // A key the ring never held: an unknown kid.
            let mut elsewhere = KeyRing::default();
            elsewhere.ensure_current(at(0.0));
            let foreign = issuer
                .issue(&elsewhere, &AccessClaims { sub: "x".into(), tenant_id: None, extra: None }, at(0.0))
                .expect("issued")
                .token;
            assert_eq!(verifier.verify(&foreign, at(1.0)).await, Err(VerifyError::UnknownKey));
        }

        #[tokio::test]
        async fn a_token_that_names_its_own_key_is_refused_even_when_validly_signed() {
            let (ring, verifier, _) = setup();
            let key = current(&ring);
            let (kid, jwk) = (key.kid.clone(), key.public_jwk());
            for (member, value) in [
                ("jku", json!("https://attacker.example/jwks.json")),
                ("x5u", json!("https://attacker.example/cert.pem")),
                ("jwk", jwk),
                ("x5c", json!(["MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"])),
                ("jku", json!(null)),
            ] {
                let mut header = json!({ "alg": "ES256", "typ": "JWT", "kid": kid });
                header[member] = value;
                let token = signed(&key, header, claims_at(at(0.0)));
                assert_eq!(verifier.verify(&token, at(1.0)).await, Err(VerifyError::KeyInHeader), "{member}");
            }
            // The same token without the member verifies: the refusal is the header's doing.
            let plain = signed(&key, json!({ "alg": "ES256", "typ": "JWT", "kid": kid }), claims_at(at(0.0)));
            assert!(verifier.verify(&plain, at(1.0)).await.is_ok());
            let critical = signed(&key, json!({ "alg": "ES256", "kid": kid, "crit": ["exp"] }), claims_at(at(0.0)));
            assert_eq!(verifier.verify(&critical, at(1.0)).await, Err(VerifyError::Malformed));
        }

        #[tokio::test]
        async fn a_token_for_another_use_is_refused() {
            let (ring, verifier, _) = setup();
            let key = current(&ring);
            let header = json!({ "alg": "ES256", "typ": "JWT", "kid": key.kid });
            for (token_use, ok) in [
                (json!("access"), true),
                (json!("refresh"), false),
                (json!("id"), false),
                (json!(""), false),
                (json!(null), false),
                (json!(["access"]), false),
            ] {
                let mut claims = claims_at(at(0.0));
                claims["token_use"] = token_use.clone();
                let result = verifier.verify(&signed(&key, header.clone(), claims), at(1.0)).await;
                if ok {
                    assert!(result.is_ok(), "{token_use}");
                } else {
                    assert_eq!(result, Err(VerifyError::NotAnAccessToken), "{token_use}");
                }
            }
        }

        #[tokio::test]
        async fn the_usual_attacks_are_refused() {
            let (ring, verifier, issuer) = setup();
            let key = current(&ring);
            let good = issue(&ring, &issuer, None, at(0.0));
            let [h, c, _] = <[&str; 3]>::try_from(good.split('.').collect::<Vec<_>>()).expect("three parts");
            // alg none, unsigned.
            let none = format!("{}.{c}.", URL_SAFE_NO_PAD.encode(json!({ "alg": "none", "kid": key.kid }).to_string()));
            assert_eq!(verifier.verify(&none, at(1.0)).await, Err(VerifyError::Malformed));
            // HS256 "signed" with the public key's JWK text as the secret.
            let mut hs = Header::new(Algorithm::HS256);
            hs.kid = Some(key.kid.clone());
            let secret = key.public_jwk().to_string();
            let confused = jsonwebtoken::encode(&hs, &claims_at(at(0.0)), &EncodingKey::from_secret(secret.as_bytes()))
                .expect("hs");
            assert_eq!(verifier.verify(&confused, at(1.0)).await, Err(VerifyError::WrongAlgorithm));
            // A changed payload.
            let forged_claims =
                URL_SAFE_NO_PAD.encode(json!({ "iss": ISSUER, "sub": "admin", "exp": 9_999_999_999i64 }).to_string());
            let sig = good.rsplit('.').next().expect("signature");
            assert_eq!(
                verifier.verify(&format!("{h}.{forged_claims}.{sig}"), at(1.0)).await,
                Err(VerifyError::Invalid)
            );
            // No kid.
            let no_kid = signed(&key, json!({ "alg": "ES256" }), claims_at(at(0.0)));
            assert_eq!(verifier.verify(&no_kid, at(1.0)).await, Err(VerifyError::UnknownKey));
            // A refresh token (opaque) or other junk where an access token belongs.
            let (refresh, _) = crate::opaque::new_opaque_token();
            assert_eq!(verifier.verify(&refresh, at(1.0)).await, Err(VerifyError::Malformed));
            for junk in ["", "a.b", "a.b.c.d", &format!("{good}.x"), "e30.e30.e30"] {
                assert!(verifier.verify(junk, at(1.0)).await.is_err(), "{junk}");
            }
        }

        #[tokio::test]
        async fn an_unreadable_published_set_is_keys_unavailable() {
            let token = {
                let (ring, _, issuer) = setup();
                issue(&ring, &issuer, None, at(0.0))
            };
            let broken = TokenVerifier::embedded(ISSUER, jwks_fn(|_| json!({ "not": "a key set" })));
            assert_eq!(broken.verify(&token, at(1.0)).await, Err(VerifyError::KeysUnavailable));
            let empty = TokenVerifier::embedded(ISSUER, jwks_fn(|_| json!({ "keys": [] })));
            assert_eq!(empty.verify(&token, at(1.0)).await, Err(VerifyError::UnknownKey));
            struct Down;
            #[async_trait::async_trait]
            impl PublishedKeys for Down {
                async fn published_jwks(&self, _now: Timestamp, _kid: &str) -> Option<serde_json::Value> {
                    None
                }
            }
            let down = TokenVerifier::embedded(ISSUER, Arc::new(Down));
            assert_eq!(down.verify(&token, at(1.0)).await, Err(VerifyError::KeysUnavailable));
        }
    }
}
