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

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokenops_domain::{TenantId, Timestamp};
use tokio::sync::{Mutex, RwLock};
use uuid::Uuid;

use crate::keys::KeyRing;
use crate::tokens::ACCESS_TOKEN_USE;

/// Clock skew tolerated on `exp` and `nbf` by default, in seconds.
pub const DEFAULT_LEEWAY_SECS: i64 = 30;

/// Where an embedded verifier reads the keys it trusts: the embedded provider's published set.
#[async_trait::async_trait]
pub trait PublishedKeys: Send + Sync {
    /// The JWKS document published at `now` (as `KeyRing::jwks` makes it), or `None` when it
    /// cannot be read now (the token is then refused as `KeysUnavailable`, not as invalid).
    /// `kid` is the key the token names: a source whose copy of the keys may be stale (another
    /// node rotated) may reload when it is missing, rate-limited as it sees fit.
    async fn published_jwks(&self, now: Timestamp, kid: &str) -> Option<serde_json::Value>;
}

/// A ring held in this process is always current.
#[async_trait::async_trait]
impl PublishedKeys for std::sync::RwLock<KeyRing> {
    async fn published_jwks(&self, now: Timestamp, _kid: &str) -> Option<serde_json::Value> {
        // A writer that panicked mid-change leaves the lock poisoned: trust no key rather than a
        // half-changed ring.
        self.read().ok().map(|ring| ring.jwks(now))
    }
}

/// `PublishedKeys` from a function of the instant, for sources that need no I/O.
pub fn jwks_fn<F>(published: F) -> Arc<dyn PublishedKeys>
where
    F: Fn(Timestamp) -> serde_json::Value + Send + Sync + 'static,
{
    struct FromFn<F>(F);
    #[async_trait::async_trait]
    impl<F: Fn(Timestamp) -> serde_json::Value + Send + Sync> PublishedKeys for FromFn<F> {
        async fn published_jwks(&self, now: Timestamp, _kid: &str) -> Option<serde_json::Value> {
            Some((self.0)(now))
        }
    }
    Arc::new(FromFn(published))
}

/// Header members that carry or point at a key. A verifier that used them would let the token
/// choose the key that verifies it.
const KEY_BEARING_HEADERS: [&str; 4] = ["jku", "x5u", "jwk", "x5c"];

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

/// Why `url` cannot be the JWKS URL, if it cannot. Keys fetched over plain http can be replaced
/// in transit, which would let anyone on the path mint accepted tokens; so http is allowed only
/// for a loopback host (a local issuer, a sidecar, tests).
pub fn check_jwks_url(url: &str) -> Result<(), String> {
    // The same parser the fetch uses, so the host checked here is the host connected to.
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("not a valid URL ({e})"))?;
    match parsed.scheme() {
        "https" => Ok(()),
        "http" if is_loopback_host(&parsed) => Ok(()),
        "http" => Err("must use https:// (plain http:// is accepted only for a loopback host: \
                       127.0.0.0/8, ::1 or localhost), since keys fetched over http can be replaced in transit"
            .to_owned()),
        other => Err(format!("unsupported scheme {other:?}: use https://")),
    }
}

fn is_loopback_host(url: &reqwest::Url) -> bool {
    let Some(host) = url.host_str() else { return false };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    // IPv6 hosts come bracketed.
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[derive(Clone, Deserialize)]
struct RawClaims {
    sub: Option<String>,
    tenant_id: Option<String>,
    /// A space-separated string (RFC 9068); anything else is ignored rather than refused.
    scope: Option<serde_json::Value>,
    exp: Option<i64>,
    nbf: Option<i64>,
    /// Kept loose so that, with no audience configured, an odd `aud` is ignored as before.
    aud: Option<serde_json::Value>,
    /// Kept loose: when present, any value but the string `access` is refused, whatever its
    /// type, `null` included.
    #[serde(default, deserialize_with = "present")]
    token_use: Option<serde_json::Value>,
}

/// `Some` whenever the member is present, even as `null`, which plain `Option` reads as absent.
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(Some)
}

type Keys = HashMap<String, (DecodingKey, Algorithm)>;

struct KeyCache {
    keys: Keys,
    /// Counts the key sets fetched: a remembered signature holds only for the set it was
    /// checked with.
    generation: u64,
    /// When the key set was last fetched successfully, by the service's clock: the TTL runs from
    /// here.
    fetched_at: Option<Timestamp>,
    /// When a fetch was last attempted, successfully or not, by the service's clock: the next one
    /// waits `refresh_interval` from here, so neither unknown kids nor an outage make every
    /// request call the issuer.
    attempted_at: Option<Timestamp>,
    /// Whether that attempt failed: an unknown kid is then "cannot tell now", not "invalid".
    last_failed: bool,
}

/// What the cache says about one kid at one instant.
struct Lookup {
    key: Option<(DecodingKey, Algorithm)>,
    generation: u64,
    /// The set is older than the TTL.
    expired: bool,
    /// A fetch was attempted within `refresh_interval`.
    recently_attempted: bool,
    last_failed: bool,
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

/// A remote issuer's key set, cached.
struct RemoteKeys {
    settings: VerifierSettings,
    http: reqwest::Client,
    /// Held only to read or to swap in a fetched set, never across a fetch.
    cache: RwLock<KeyCache>,
    /// Held for the duration of a fetch, so that only one runs at a time.
    fetch_gate: Mutex<()>,
}

/// Redirects the JWKS fetch follows at most.
const MAX_REDIRECTS: usize = 5;

impl TokenVerifier {
    /// Verifies tokens of a remote issuer (the bank's own provider, or a test issuer) against
    /// its JWKS URL.
    pub fn new(settings: VerifierSettings) -> Result<Self, reqwest::Error> {
        // A redirect must meet the same rule as the configured URL, or an https URL could hand
        // the fetch over to plain http.
        let redirects = reqwest::redirect::Policy::custom(|attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                attempt.error("too many redirects")
            } else if let Err(problem) = check_jwks_url(attempt.url().as_str()) {
                let message = format!("redirect to {} refused: {problem}", attempt.url());
                attempt.error(message)
            } else {
                attempt.follow()
            }
        });
        let http = reqwest::Client::builder().timeout(Duration::from_secs(5)).redirect(redirects).build()?;
        let cache =
            KeyCache { keys: HashMap::new(), generation: 0, fetched_at: None, attempted_at: None, last_failed: false };
        Ok(Self {
            issuer: settings.issuer.clone(),
            audience: settings.audience.clone(),
            leeway_secs: settings.leeway_secs,
            source: KeySource::Remote(RemoteKeys {
                settings,
                http,
                cache: RwLock::new(cache),
                fetch_gate: Mutex::new(()),
            }),
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

    /// The signature, algorithm and issuer checks; the claims the token carries.
    fn check_signature(&self, token: &str, key: &DecodingKey, algorithm: Algorithm) -> Result<RawClaims, VerifyError> {
        let mut validation = Validation::new(algorithm);
        validation.set_issuer(&[self.issuer.as_str()]);
        // Expiry is checked below against the service's Clock, not the library's system time.
        validation.validate_exp = false;
        // The audience is checked below, only when configured.
        validation.validate_aud = false;
        validation.required_spec_claims = ["iss".to_owned()].into_iter().collect();
        let data = jsonwebtoken::decode::<RawClaims>(token, key, &validation).map_err(|e| match e.kind() {
            jsonwebtoken::errors::ErrorKind::InvalidAlgorithm => VerifyError::WrongAlgorithm,
            jsonwebtoken::errors::ErrorKind::Json(_) | jsonwebtoken::errors::ErrorKind::Base64(_) => {
                VerifyError::Malformed
            }
            _ => VerifyError::Invalid,
        })?;
        Ok(data.claims)
    }

    /// The checks that depend on the configuration and the claims alone: audience, use, form.
    /// Returns the claims and the `nbf` instant, for `check_instant`.
    fn check_claims(&self, claims: RawClaims) -> Result<(Claims, Option<Timestamp>), VerifyError> {
        if let Some(audience) = &self.audience
            && !carries_audience(claims.aud.as_ref(), audience)
        {
            return Err(VerifyError::WrongAudience);
        }
        if claims.token_use.as_ref().is_some_and(|used| used.as_str() != Some(ACCESS_TOKEN_USE)) {
            return Err(VerifyError::NotAnAccessToken);
        }
        let exp = claims.exp.ok_or(VerifyError::Malformed)?;
        let expires_at = Timestamp::from_micros(exp.saturating_mul(1_000_000));
        let not_before = claims.nbf.map(|nbf| Timestamp::from_micros(nbf.saturating_mul(1_000_000)));
        let subject = claims.sub.filter(|s| !s.trim().is_empty()).ok_or(VerifyError::Malformed)?;
        let tenant = match claims.tenant_id {
            None => None,
            Some(text) => Some(TenantId(Uuid::parse_str(&text).map_err(|_| VerifyError::Malformed)?)),
        };
        let scope = match claims.scope {
            Some(serde_json::Value::String(text)) => text.split_whitespace().map(str::to_owned).collect(),
            _ => Vec::new(),
        };
        Ok((Claims { subject, tenant, expires_at, scope }, not_before))
    }

    /// Expiry and `nbf` against `now`, with the leeway.
    fn check_instant(
        &self,
        claims: Claims,
        not_before: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<Claims, VerifyError> {
        let leeway_ms = self.leeway_secs.saturating_mul(1_000);
        if claims.expires_at.plus_millis(leeway_ms) <= now {
            return Err(VerifyError::Expired);
        }
        if not_before.is_some_and(|nbf| nbf.minus_millis(leeway_ms) > now) {
            return Err(VerifyError::NotYetValid);
        }
        Ok(claims)
    }
}

/// Refuses a token whose protected header carries or points at a key, or lists critical
/// extensions. Read from the raw header rather than the library's parsed one, so a member the
/// library would drop or fail on is still seen.
fn refuse_key_bearing_header(token: &str) -> Result<(), VerifyError> {
    let mut parts = token.split('.');
    let (Some(header), Some(_), Some(_), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
        return Err(VerifyError::Malformed);
    };
    let bytes = URL_SAFE_NO_PAD.decode(header).map_err(|_| VerifyError::Malformed)?;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes).map_err(|_| VerifyError::Malformed)?;
    if KEY_BEARING_HEADERS.iter().any(|member| header.contains_key(*member)) {
        return Err(VerifyError::KeyInHeader);
    }
    // RFC 7515 §4.1.11: a recipient must refuse a token whose `crit` names extensions it does
    // not understand, and this verifier understands none.
    if header.contains_key("crit") {
        return Err(VerifyError::Malformed);
    }
    Ok(())
}

/// The key `kid` names in the embedded provider's published set.
fn embedded_jwk(jwks: &serde_json::Value, kid: &str) -> Result<Jwk, VerifyError> {
    let published = jwks.get("keys").and_then(serde_json::Value::as_array).ok_or(VerifyError::KeysUnavailable)?;
    let jwk = published
        .iter()
        .find(|jwk| jwk.get("kid").and_then(serde_json::Value::as_str) == Some(kid))
        .ok_or(VerifyError::UnknownKey)?;
    serde_json::from_value(jwk.clone()).map_err(|_| VerifyError::KeysUnavailable)
}

/// The key `kid` names in the embedded provider's published set, with its pinned algorithm.
fn embedded_key(jwks: &serde_json::Value, kid: &str) -> Result<(DecodingKey, Algorithm), VerifyError> {
    let jwk = embedded_jwk(jwks, kid)?;
    let algorithm = algorithm_of(&jwk).ok_or(VerifyError::UnknownKey)?;
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| VerifyError::KeysUnavailable)?;
    Ok((key, algorithm))
}

impl RemoteKeys {
    async fn lookup(&self, kid: &str, now: Timestamp) -> Lookup {
        let cache = self.cache.read().await;
        let ttl_ms = millis(self.settings.keys_ttl);
        let interval_ms = millis(self.settings.refresh_interval);
        Lookup {
            key: cache.keys.get(kid).cloned(),
            generation: cache.generation,
            expired: cache.fetched_at.is_none_or(|at| at.plus_millis(ttl_ms) <= now),
            recently_attempted: cache.attempted_at.is_some_and(|at| at.plus_millis(interval_ms) > now),
            last_failed: cache.last_failed,
        }
    }

    /// The key `kid` names, its algorithm and the generation of the set it came from.
    async fn key(&self, kid: &str, now: Timestamp) -> Result<(DecodingKey, Algorithm, u64), VerifyError> {
        let seen = self.lookup(kid, now).await;
        let with_generation = |(key, algorithm): (DecodingKey, Algorithm), generation| (key, algorithm, generation);
        let _gate = match seen.key {
            // The common case: a known key of a fresh set (or of an expired one whose refresh was
            // just tried and failed). Nothing to fetch, nothing to wait for.
            Some(key) if !seen.expired || seen.recently_attempted => return Ok(with_generation(key, seen.generation)),
            // A known key of an expired set: refresh before trusting it again. If a fetch is
            // already running, use the set we have rather than queue behind a possibly slow
            // issuer; that fetch refreshes the set for the verifications after it.
            Some(key) => match self.fetch_gate.try_lock() {
                Ok(gate) => gate,
                Err(_) => return Ok(with_generation(key, seen.generation)),
            },
            // An unknown kid: a running fetch may be bringing it (a rotation reaching many
            // callers at once), so wait for it.
            None => self.fetch_gate.lock().await,
        };
        // Under the gate: another verification may have fetched meanwhile.
        let seen = self.lookup(kid, now).await;
        if seen.recently_attempted || (!seen.expired && seen.key.is_some()) {
            return match seen.key {
                Some(key) => Ok(with_generation(key, seen.generation)),
                None if seen.last_failed => Err(VerifyError::KeysUnavailable),
                None => Err(VerifyError::UnknownKey),
            };
        }
        let fetched = self.fetch().await;
        let mut cache = self.cache.write().await;
        cache.attempted_at = Some(now);
        match fetched {
            Ok(keys) => {
                // A key the issuer no longer publishes is dropped here, and with it its tokens.
                cache.keys = keys;
                cache.generation += 1;
                cache.fetched_at = Some(now);
                cache.last_failed = false;
                let generation = cache.generation;
                cache.keys.get(kid).cloned().map(|key| with_generation(key, generation)).ok_or(VerifyError::UnknownKey)
            }
            Err(e) => {
                cache.last_failed = true;
                match seen.key {
                    // Availability over freshness: an unreachable issuer must not lock every
                    // caller out, so the keys it published last stay trusted until it answers.
                    Some(key) => {
                        tracing::warn!(
                            url = %self.settings.jwks_url,
                            keys = cache.keys.len(),
                            "JWKS refresh failed; keeping the previously fetched keys"
                        );
                        Ok(with_generation(key, seen.generation))
                    }
                    None => Err(e),
                }
            }
        }
    }

    async fn fetch(&self) -> Result<Keys, VerifyError> {
        let url = &self.settings.jwks_url;
        let response = self.http.get(url).send().await.map_err(|e| {
            tracing::warn!(%url, error = %e, "JWKS fetch failed");
            VerifyError::KeysUnavailable
        })?;
        let response = response.error_for_status().map_err(|e| {
            tracing::warn!(%url, error = %e, "JWKS fetch failed");
            VerifyError::KeysUnavailable
        })?;
        let set: JwkSet = response.json().await.map_err(|e| {
            tracing::warn!(%url, error = %e, "JWKS response is not a key set");
            VerifyError::KeysUnavailable
        })?;
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let (Some(kid), Some(algorithm)) = (jwk.common.key_id.clone(), algorithm_of(jwk)) else { continue };
            if let Ok(key) = DecodingKey::from_jwk(jwk) {
                keys.insert(kid, (key, algorithm));
            }
        }
        Ok(keys)
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// RFC 7519 §4.1.3: `aud` is one string or an array of strings; the token is for us when one of
/// them is ours.
fn carries_audience(aud: Option<&serde_json::Value>, expected: &str) -> bool {
    match aud {
        Some(serde_json::Value::String(one)) => one == expected,
        Some(serde_json::Value::Array(many)) => many.iter().any(|v| v.as_str() == Some(expected)),
        _ => false,
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
    use super::*;
    use jsonwebtoken::{EncodingKey, Header};
    use serde_json::json;
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex as StdMutex};

    // RFC 7517 Appendix A.1's example P-256 public key: a real curve point, and no secret.
    const X: &str = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4";
    const Y: &str = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM";

    struct IssuerState {
        kids: Vec<String>,
        /// Real keys published beside the `kids` (whose key has no private half).
        real: Vec<serde_json::Value>,
        status: u16,
        /// When set, the next request waits for a message before it is answered.
        stall: Option<mpsc::Receiver<()>>,
    }

    /// A JWKS endpoint on a blocking thread (no test-only dependencies), counting requests.
    struct Issuer {
        url: String,
        state: Arc<StdMutex<IssuerState>>,
        requests: Arc<AtomicUsize>,
    }

    impl Issuer {
        fn start(kids: &[&str]) -> Self {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            let url = format!("http://{}/jwks.json", listener.local_addr().expect("addr"));
            let state = Arc::new(StdMutex::new(IssuerState {
                kids: kids.iter().map(|k| (*k).to_owned()).collect(),
                real: Vec::new(),
                status: 200,
                stall: None,
            }));
            let requests = Arc::new(AtomicUsize::new(0));
            let (shared, counter) = (state.clone(), requests.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    let Ok(mut stream) = stream else { continue };
                    let (shared, counter) = (shared.clone(), counter.clone());
                    std::thread::spawn(move || {
                        let mut request = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => request.extend_from_slice(&buf[..n]),
                            }
                        }
                        counter.fetch_add(1, Ordering::SeqCst);
                        let stall = shared.lock().expect("state").stall.take();
                        if let Some(release) = stall {
                            let _ = release.recv();
                        }
                        let (status, body) = {
                            let state = shared.lock().expect("state");
                            let mut keys: Vec<_> = state
                                .kids
                                .iter()
                                .map(|kid| json!({"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": kid, "x": X, "y": Y}))
                                .collect();
                            keys.extend(state.real.iter().cloned());
                            (state.status, json!({ "keys": keys }).to_string())
                        };
                        let response = format!(
                            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = stream.write_all(response.as_bytes());
                    });
                }
            });
            Self { url, state, requests }
        }

        fn publish(&self, kids: &[&str]) {
            self.state.lock().expect("state").kids = kids.iter().map(|k| (*k).to_owned()).collect();
        }

        fn publish_real(&self, keys: Vec<serde_json::Value>) {
            self.state.lock().expect("state").real = keys;
        }

        fn answer(&self, status: u16) {
            self.state.lock().expect("state").status = status;
        }

        /// Makes the next request hang until the returned sender sends (or is dropped).
        fn stall(&self) -> mpsc::Sender<()> {
            let (release, wait) = mpsc::channel();
            self.state.lock().expect("state").stall = Some(wait);
            release
        }

        fn requests(&self) -> usize {
            self.requests.load(Ordering::SeqCst)
        }

        async fn wait_for_requests(&self, n: usize) {
            for _ in 0..500 {
                if self.requests() >= n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the issuer saw {} requests, expected {n}", self.requests());
        }
    }

    fn verifier(issuer: &Issuer) -> Arc<TokenVerifier> {
        crate::install_crypto_provider();
        Arc::new(
            TokenVerifier::new(VerifierSettings {
                issuer: "https://idp.example".into(),
                jwks_url: issuer.url.clone(),
                audience: None,
                leeway_secs: 30,
                refresh_interval: Duration::from_secs(10),
                keys_ttl: Duration::from_secs(60),
            })
            .expect("verifier"),
        )
    }

    /// A token naming `kid` but signed with HS256: verification gets past the key lookup and
    /// then fails with `WrongAlgorithm` when the kid is cached, `UnknownKey` when it is not. No
    /// private key is needed to observe the cache.
    fn token(kid: &str) -> String {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, &json!({ "sub": "s" }), &EncodingKey::from_secret(b"k")).expect("encode")
    }

    const T0: i64 = 1_700_000_000_000_000;

    fn at(secs: f64) -> Timestamp {
        Timestamp::from_micros(T0 + (secs * 1_000_000.0) as i64)
    }

    const KNOWN: Result<Claims, VerifyError> = Err(VerifyError::WrongAlgorithm);

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fresh_set_is_not_refetched_and_an_expired_one_drops_withdrawn_keys() {
        let issuer = Issuer::start(&["a"]);
        let v = verifier(&issuer);
        assert_eq!(v.verify(&token("a"), at(0.0)).await, KNOWN);
        assert_eq!(issuer.requests(), 1);
        issuer.publish(&["b"]);
        assert_eq!(v.verify(&token("a"), at(59.9)).await, KNOWN);
        assert_eq!(issuer.requests(), 1, "a set younger than the TTL is not refetched");
        assert_eq!(v.verify(&token("a"), at(60.0)).await, Err(VerifyError::UnknownKey));
        assert_eq!(issuer.requests(), 2);
        assert_eq!(v.verify(&token("b"), at(60.0)).await, KNOWN);
        assert_eq!(issuer.requests(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_refresh_keeps_the_previous_keys_and_is_retried_after_the_interval() {
        let issuer = Issuer::start(&["a"]);
        let v = verifier(&issuer);
        assert_eq!(v.verify(&token("a"), at(0.0)).await, KNOWN);
        issuer.answer(503);
        assert_eq!(v.verify(&token("a"), at(60.0)).await, KNOWN);
        assert_eq!(issuer.requests(), 2);
        // Within the interval neither known nor unknown kids call the failing issuer again; an
        // unknown kid is "cannot tell now", not "invalid".
        assert_eq!(v.verify(&token("a"), at(65.0)).await, KNOWN);
        assert_eq!(v.verify(&token("c"), at(65.0)).await, Err(VerifyError::KeysUnavailable));
        assert_eq!(issuer.requests(), 2);
        assert_eq!(v.verify(&token("a"), at(70.0)).await, KNOWN);
        assert_eq!(issuer.requests(), 3);
        // Once the issuer answers again, its answer is what counts.
        issuer.answer(200);
        issuer.publish(&["b"]);
        assert_eq!(v.verify(&token("a"), at(80.0)).await, Err(VerifyError::UnknownKey));
        assert_eq!(v.verify(&token("b"), at(80.0)).await, KNOWN);
        assert_eq!(issuer.requests(), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn known_keys_do_not_wait_for_a_running_fetch() {
        let issuer = Issuer::start(&["a"]);
        let v = verifier(&issuer);
        assert_eq!(v.verify(&token("a"), at(0.0)).await, KNOWN);
        let release = issuer.stall();
        let waiting = tokio::spawn({
            let v = v.clone();
            async move { v.verify(&token("b"), at(11.0)).await }
        });
        issuer.wait_for_requests(2).await;
        let quick = Duration::from_secs(1);
        // A fresh set: a read of the cache, nothing else.
        assert_eq!(tokio::time::timeout(quick, v.verify(&token("a"), at(11.0))).await.expect("not blocked"), KNOWN);
        // An expired set while a fetch runs: the set at hand serves, rather than queueing.
        assert_eq!(tokio::time::timeout(quick, v.verify(&token("a"), at(61.0))).await.expect("not blocked"), KNOWN);
        assert!(!waiting.is_finished(), "the unknown kid waits for the fetch");
        issuer.publish(&["a", "b"]);
        release.send(()).expect("release");
        assert_eq!(waiting.await.expect("task"), KNOWN);
        assert_eq!(issuer.requests(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_unknown_kids_share_one_fetch() {
        let issuer = Issuer::start(&["a", "b"]);
        let release = issuer.stall();
        let v = verifier(&issuer);
        let tasks: Vec<_> = (0..5)
            .map(|_| {
                let v = v.clone();
                tokio::spawn(async move { v.verify(&token("b"), at(0.0)).await })
            })
            .collect();
        issuer.wait_for_requests(1).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        release.send(()).expect("release");
        for task in tasks {
            assert_eq!(task.await.expect("task"), KNOWN);
        }
        assert_eq!(issuer.requests(), 1);
    }

    #[test]
    fn audience_is_a_string_or_a_member_of_an_array() {
        let ours = "https://api.example";
        assert!(carries_audience(Some(&json!(ours)), ours));
        assert!(carries_audience(Some(&json!(["other", ours])), ours));
        assert!(!carries_audience(None, ours));
        assert!(!carries_audience(Some(&json!("other")), ours));
        assert!(!carries_audience(Some(&json!(["other"])), ours));
        assert!(!carries_audience(Some(&json!([])), ours));
        assert!(!carries_audience(Some(&json!(42)), ours));
        assert!(!carries_audience(Some(&json!({ "aud": ours })), ours));
    }

    #[test]
    fn jwks_url_needs_https_unless_loopback() {
        for ok in [
            "https://idp.example.com/.well-known/jwks.json",
            "https://10.0.0.5/jwks",
            "http://127.0.0.1:8080/idp/.well-known/jwks.json",
            "http://127.10.20.30/jwks",
            "http://[::1]:9000/jwks",
            "http://localhost:9000/jwks",
            "http://LOCALHOST/jwks",
        ] {
            assert_eq!(check_jwks_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://idp.example.com/jwks",
            "http://10.0.0.5/jwks",
            "http://128.0.0.1/jwks",
            "http://[::2]/jwks",
            "http://127.0.0.1.evil.example/jwks",
            "http://localhost.evil.example/jwks",
            "http://127.0.0.1@evil.example/jwks",
            "ftp://idp.example.com/jwks",
            "not a url",
        ] {
            assert!(check_jwks_url(bad).is_err(), "{bad}");
        }
    }

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
