//! The embedded provider's signing keys: ES256 (P-256) keys, generated on first start, stored
//! sealed, published as a JWKS, and rotated with overlap.
//!
//! Rotation never withdraws a key at once. The newest key that has no retirement time is the
//! current one and signs; the keys it replaces stay published until their `retire_at`, which
//! rotation sets to `now + overlap`. The overlap must cover the longest-lived token the old key
//! may have signed, plus the verifiers' clock leeway (`TokenIssuer::minimum_key_overlap`), or
//! tokens issued just before a rotation would be refused before they expire.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::elliptic_curve::sec1::ToEncodedPoint;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::fmt;
use std::time::Duration;
use tokenops_domain::Timestamp;
use zeroize::Zeroizing;

use tokenops_secrets::{SealError, Sealer};

/// Domain separation for sealed signing keys: the associated data is this prefix and the
/// `kid`, so a sealed key opens only as the key of its own row and never as another kind of
/// sealed secret.
const SEAL_CONTEXT: &[u8] = b"tokenops/signing-key/";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("the sealed signing key does not open: {0}")]
    Seal(#[from] SealError),
    #[error("the sealed value is not a P-256 private key")]
    NotAKey,
}

/// One ES256 signing key with its life cycle.
#[derive(Clone)]
pub struct SigningKey {
    /// The RFC 7638 JWK thumbprint of the public key: stable, derived, checkable by anyone.
    pub kid: String,
    pub created_at: Timestamp,
    /// When set, the key signs no more and is published until then.
    pub retire_at: Option<Timestamp>,
    /// Zeroized on drop by `p256`.
    pub secret: p256::SecretKey,
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the secret: this may end up in a log.
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .field("created_at", &self.created_at)
            .field("retire_at", &self.retire_at)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new key from the OS generator, current from `now`.
    pub fn generate(now: Timestamp) -> Self {
        let secret = p256::SecretKey::random(&mut rand::rngs::OsRng);
        Self::from_secret(secret, now, None)
    }

    fn from_secret(secret: p256::SecretKey, created_at: Timestamp, retire_at: Option<Timestamp>) -> Self {
        Self { kid: Es256PublicKey::of(&secret.public_key()).thumbprint(), created_at, retire_at, secret }
    }

    /// The private scalar sealed for storage, bound to this key's `kid`.
    pub fn to_sealed(&self, sealer: &Sealer) -> String {
        let scalar = Zeroizing::new(self.secret.to_bytes());
        sealer.seal(&scalar[..], &seal_aad(&self.kid))
    }

    /// A key read back from storage (the arguments in the order of its stored row). The `kid`
    /// must be the one it was sealed under.
    pub fn from_sealed(
        kid: &str,
        sealed: &str,
        created_at: Timestamp,
        retire_at: Option<Timestamp>,
        sealer: &Sealer,
    ) -> Result<Self, KeyError> {
        let scalar = sealer.open(sealed, &seal_aad(kid))?;
        let secret = p256::SecretKey::from_slice(&scalar).map_err(|_| KeyError::NotAKey)?;
        Ok(Self { kid: kid.to_owned(), created_at, retire_at, secret })
    }

    /// The public half as a JWK: `{kty, crv, x, y, kid, alg: "ES256", use: "sig"}`. `alg` is
    /// always present, so verifiers pin the algorithm to it.
    pub fn public_jwk(&self) -> Value {
        Es256PublicKey::of(&self.secret.public_key()).jwk(&self.kid)
    }

    /// Whether the key is still in the published set at `now`.
    pub fn is_published(&self, now: Timestamp) -> bool {
        self.retire_at.is_none_or(|at| at > now)
    }
}

fn seal_aad(kid: &str) -> Vec<u8> {
    [SEAL_CONTEXT, kid.as_bytes()].concat()
}

/// The public half of a P-256 key as a JWKS publishes it: the provider's signing keys and the
/// webhook JWS key both name themselves by its thumbprint and publish its JWK.
pub struct Es256PublicKey {
    x: String,
    y: String,
}

impl Es256PublicKey {
    /// The public point's affine coordinates, unpadded base64url (RFC 7518 §6.2.1.2).
    pub fn of(public: &p256::PublicKey) -> Self {
        let point = public.to_encoded_point(false);
        // An uncompressed point of a valid key always has both coordinates.
        let x = point.x().map(|x| URL_SAFE_NO_PAD.encode(x)).unwrap_or_default();
        let y = point.y().map(|y| URL_SAFE_NO_PAD.encode(y)).unwrap_or_default();
        Self { x, y }
    }

    /// RFC 7638: SHA-256 of the required members in lexicographic order, without white space.
    pub fn thumbprint(&self) -> String {
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#, self.x, self.y);
        URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
    }

    /// `{kty, crv, x, y, kid, alg: "ES256", use: "sig"}`. `alg` is always present, so verifiers
    /// pin the algorithm to it.
    pub fn jwk(&self, kid: &str) -> Value {
        json!({ "kty": "EC", "crv": "P-256", "x": self.x, "y": self.y, "kid": kid, "alg": "ES256", "use": "sig" })
    }
}

/// All signing keys the provider knows, current and retiring.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    pub keys: Vec<SigningKey>,
}

impl KeyRing {
    pub fn new(keys: Vec<SigningKey>) -> Self {
        Self { keys }
    }

    /// The key that signs: the newest without a retirement time.
    pub fn current(&self) -> Option<&SigningKey> {
        self.keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.retire_at.is_none())
            .max_by_key(|(i, k)| (k.created_at, *i))
            .map(|(_, k)| k)
    }

    /// Makes a current key if there is none (first start, or every key retired), and returns it
    /// so the caller can store it; `None` when a current key already existed.
    pub fn ensure_current(&mut self, now: Timestamp) -> Option<&SigningKey> {
        if self.current().is_some() {
            return None;
        }
        self.keys.push(SigningKey::generate(now));
        self.keys.last()
    }

    /// Generates a new current key and schedules every other unretired key to retire at
    /// `now + overlap`; keys already retiring keep their time. Returns the new key, for the
    /// caller to store along with the changed `retire_at`s.
    pub fn rotate(&mut self, now: Timestamp, overlap: Duration) -> &SigningKey {
        let retire_at = now.plus_millis(i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX));
        for key in self.keys.iter_mut().filter(|k| k.retire_at.is_none()) {
            key.retire_at = Some(retire_at);
        }
        self.keys.push(SigningKey::generate(now));
        let last = self.keys.len() - 1;
        &self.keys[last]
    }

    /// The keys a verifier should accept at `now`, newest first.
    pub fn published(&self, now: Timestamp) -> Vec<&SigningKey> {
        let mut keys: Vec<&SigningKey> = self.keys.iter().filter(|k| k.is_published(now)).collect();
        keys.sort_by_key(|k| std::cmp::Reverse(k.created_at));
        keys
    }

    /// The published keys as a JWKS document.
    pub fn jwks(&self, now: Timestamp) -> Value {
        let keys: Vec<Value> = self.published(now).into_iter().map(SigningKey::public_jwk).collect();
        json!({ "keys": keys })
    }

    /// Drops the keys past their retirement and returns their kids, for the caller to delete.
    pub fn prune(&mut self, now: Timestamp) -> Vec<String> {
        let (kept, dropped): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.keys).into_iter().partition(|k| k.is_published(now));
        self.keys = kept;
        dropped.into_iter().map(|k| k.kid).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::jwk::{Jwk, ThumbprintHash};

    const T0: i64 = 1_700_000_000_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_micros(T0 + secs * 1_000_000)
    }

    const HOUR: Duration = Duration::from_secs(3_600);

    #[test]
    fn the_public_jwk_is_complete_and_its_kid_is_the_rfc7638_thumbprint() {
        let key = SigningKey::generate(at(0));
        let jwk = key.public_jwk();
        for member in ["kty", "crv", "x", "y", "kid", "alg", "use"] {
            assert!(jwk[member].is_string(), "{member} in {jwk}");
        }
        assert_eq!((jwk["kty"].as_str(), jwk["crv"].as_str()), (Some("EC"), Some("P-256")));
        assert_eq!((jwk["alg"].as_str(), jwk["use"].as_str()), (Some("ES256"), Some("sig")));
        assert!(jwk.get("d").is_none(), "no private member");
        // An independent implementation of RFC 7638 agrees.
        let parsed: Jwk = serde_json::from_value(jwk.clone()).expect("a JWK");
        assert_eq!(parsed.thumbprint(ThumbprintHash::SHA256).expect("thumbprint"), key.kid);
        assert_eq!(jwk["kid"], key.kid);
        assert!(!format!("{key:?}").contains("secret"));
    }

    /// RFC 7517 Appendix A.2's example P-256 private key: the JWK derived from `d` is the
    /// document's public key.
    #[test]
    fn the_jwk_of_the_rfc_7517_example_key() {
        let d = URL_SAFE_NO_PAD.decode("870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE").expect("d");
        let secret = p256::SecretKey::from_slice(&d).expect("scalar");
        let jwk = SigningKey::from_secret(secret, at(0), None).public_jwk();
        assert_eq!(jwk["x"], "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4");
        assert_eq!(jwk["y"], "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM");
    }

    #[test]
    fn a_sealed_key_opens_only_under_its_kid() {
        let sealer = Sealer::new([3; 32]);
        let key = SigningKey::generate(at(0));
        let sealed = key.to_sealed(&sealer);
        let back = SigningKey::from_sealed(&key.kid, &sealed, at(0), Some(at(10)), &sealer).expect("opens");
        assert_eq!(back.public_jwk(), key.public_jwk());
        assert_eq!(back.retire_at, Some(at(10)));
        let other = SigningKey::generate(at(0));
        assert_eq!(
            SigningKey::from_sealed(&other.kid, &sealed, at(0), None, &sealer).expect_err("wrong kid"),
            KeyError::Seal(SealError::Unauthentic)
        );
        // Sealed under the bare kid (another kind of secret): not a signing key's seal.
        let foreign = sealer.seal(&key.secret.to_bytes()[..], key.kid.as_bytes());
        assert!(SigningKey::from_sealed(&key.kid, &foreign, at(0), None, &sealer).is_err());
        let not_a_scalar = sealer.seal(&[0u8; 32], &seal_aad("k"));
        assert_eq!(
            SigningKey::from_sealed("k", &not_a_scalar, at(0), None, &sealer).expect_err("zero"),
            KeyError::NotAKey
        );
    }

    #[test]
    fn a_ring_starts_with_one_current_key() {
        let mut ring = KeyRing::default();
        assert!(ring.current().is_none());
        assert_eq!(ring.jwks(at(0)), json!({ "keys": [] }));
        let kid = ring.ensure_current(at(0)).expect("generated").kid.clone();
        assert!(ring.ensure_current(at(1)).is_none(), "only when missing");
        assert_eq!(ring.current().map(|k| k.kid.as_str()), Some(kid.as_str()));
        assert_eq!(ring.keys.len(), 1);
    }

    #[test]
    fn rotation_keeps_old_keys_published_for_the_overlap() {
        let mut ring = KeyRing::default();
        let first = ring.ensure_current(at(0)).expect("generated").kid.clone();
        let second = ring.rotate(at(100), HOUR).kid.clone();
        assert_eq!(ring.current().map(|k| k.kid.clone()), Some(second.clone()));
        let kids = |ring: &KeyRing, now| ring.published(now).iter().map(|k| k.kid.clone()).collect::<Vec<_>>();
        assert_eq!(kids(&ring, at(100)), [second.clone(), first.clone()], "newest first");
        assert_eq!(kids(&ring, at(100 + 3_599)), [second.clone(), first.clone()]);
        assert_eq!(kids(&ring, at(100 + 3_600)), std::slice::from_ref(&second), "retired at now + overlap");
        let jwks = ring.jwks(at(100));
        assert_eq!(jwks["keys"].as_array().map(Vec::len), Some(2));
        assert_eq!(jwks["keys"][0]["kid"], second);

        // A second rotation inside the overlap keeps the first key's earlier retirement.
        let third = ring.rotate(at(200), HOUR).kid.clone();
        let retire = |kid: &str| ring.keys.iter().find(|k| k.kid == kid).and_then(|k| k.retire_at);
        assert_eq!(retire(&first), Some(at(3_700)));
        assert_eq!(retire(&second), Some(at(3_800)));
        assert_eq!(retire(&third), None);

        let mut pruned = ring.clone();
        assert!(pruned.prune(at(3_699)).is_empty());
        assert_eq!(pruned.prune(at(3_700)), [first]);
        assert_eq!(pruned.prune(at(10_000)), [second]);
        assert_eq!(pruned.keys.len(), 1);
        assert_eq!(pruned.current().map(|k| k.kid.clone()), Some(third));
    }

    #[test]
    fn the_newest_unretired_key_is_current_whatever_the_order() {
        let older = SigningKey::generate(at(0));
        let newer = SigningKey::generate(at(50));
        let ring = KeyRing::new(vec![newer.clone(), older.clone()]);
        assert_eq!(ring.current().map(|k| &k.kid), Some(&newer.kid));
        let retiring = SigningKey { retire_at: Some(at(100)), ..SigningKey::generate(at(90)) };
        let ring = KeyRing::new(vec![older.clone(), retiring]);
        assert_eq!(ring.current().map(|k| &k.kid), Some(&older.kid));
    }
}
