//! A remote issuer's key set: the JWKS URL's rule (https unless loopback), the fetch and its
//! redirects, and the cache with its TTL, rate-limited refreshes and single fetch gate.

use super::{VerifierSettings, VerifyError, algorithm_of};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey};
use std::collections::HashMap;
use std::time::Duration;
use tokenops_domain::Timestamp;
use tokio::sync::{Mutex, RwLock};

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

/// A remote issuer's key set, cached.
pub(super) struct RemoteKeys {
    pub(super) settings: VerifierSettings,
    http: reqwest::Client,
    /// Held only to read or to swap in a fetched set, never across a fetch.
    cache: RwLock<KeyCache>,
    /// Held for the duration of a fetch, so that only one runs at a time.
    fetch_gate: Mutex<()>,
}

/// Redirects the JWKS fetch follows at most.
const MAX_REDIRECTS: usize = 5;

impl RemoteKeys {
    /// A client for the JWKS URL whose redirects meet the URL's rule, and an empty cache.
    pub(super) fn new(settings: VerifierSettings) -> Result<Self, reqwest::Error> {
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
        Ok(Self { settings, http, cache: RwLock::new(cache), fetch_gate: Mutex::new(()) })
    }

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
    pub(super) async fn key(&self, kid: &str, now: Timestamp) -> Result<(DecodingKey, Algorithm, u64), VerifyError> {
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

#[cfg(test)]
mod tests {
    use super::super::test_issuer::*;
    use super::*;

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
}
