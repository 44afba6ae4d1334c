//! The embedded provider's keys: where an embedded verifier reads the set it trusts
//! (`PublishedKeys`), and the key a token names in that set.

use super::{VerifyError, algorithm_of};
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey};
use std::sync::Arc;
use tokenops_domain::Timestamp;

use crate::keys::KeyRing;

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

/// The key `kid` names in the embedded provider's published set.
pub(super) fn embedded_jwk(jwks: &serde_json::Value, kid: &str) -> Result<Jwk, VerifyError> {
    let published = jwks.get("keys").and_then(serde_json::Value::as_array).ok_or(VerifyError::KeysUnavailable)?;
    let jwk = published
        .iter()
        .find(|jwk| jwk.get("kid").and_then(serde_json::Value::as_str) == Some(kid))
        .ok_or(VerifyError::UnknownKey)?;
    serde_json::from_value(jwk.clone()).map_err(|_| VerifyError::KeysUnavailable)
}

/// The key `kid` names in the embedded provider's published set, with its pinned algorithm.
pub(super) fn embedded_key(jwks: &serde_json::Value, kid: &str) -> Result<(DecodingKey, Algorithm), VerifyError> {
    let jwk = embedded_jwk(jwks, kid)?;
    let algorithm = algorithm_of(&jwk).ok_or(VerifyError::UnknownKey)?;
    let key = DecodingKey::from_jwk(&jwk).map_err(|_| VerifyError::KeysUnavailable)?;
    Ok((key, algorithm))
}
