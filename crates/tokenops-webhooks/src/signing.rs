//! How a delivery is signed: the HMAC_SHA256 secret and `Webhook-Signature`, the
//! `Content-Digest` of the body, and for JWS_ES256 the platform key, the claims set and the
//! compact JWS of `X-JWS-Signature`.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use p256::ecdsa::signature::Signer;
use p256::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::fmt;

use tokenops_identity::keys::Es256PublicKey;

use crate::url::WebhookUrl;

/// The spec's default JWS lifetime.
pub const JWS_LIFETIME_SECS: i64 = 60;

/// The `body_hash_alg` value, spelt as the spec's claims table spells it. Verifiers compare it
/// without regard to case: IANA's registry (and `Content-Digest`) spell it `sha-256`.
pub const BODY_HASH_ALG: &str = "SHA-256";

/// A new HMAC_SHA256 secret: 32 random bytes, base64url without padding (43 characters).
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// base64 (standard, padded) of HMAC-SHA256 over `"{timestamp}." + body`, keyed with the
/// secret's UTF-8 bytes, as the reference verifiers use it (spec, HMAC_SHA256 signature, 4).
pub fn hmac_signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    STANDARD.encode(hmac_bytes(secret, timestamp, body))
}

pub(crate) fn hmac_bytes(secret: &str, timestamp: i64, body: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret.as_bytes()) else {
        return Vec::new();
    };
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().to_vec()
}

/// `Webhook-Signature`: `v1,<current>`, and during a rotation's overlap `v1,<current>,v1,<previous>`
/// (newest first).
pub fn signature_header(current: &str, previous: Option<&str>, timestamp: i64, body: &[u8]) -> String {
    let mut header = format!("v1,{}", hmac_signature(current, timestamp, body));
    if let Some(previous) = previous {
        header.push_str(",v1,");
        header.push_str(&hmac_signature(previous, timestamp, body));
    }
    header
}

/// `Content-Digest` (RFC 9530) of the exact body bytes: `sha-256=:<base64>:`.
pub fn content_digest(body: &[u8]) -> String {
    format!("sha-256=:{}:", STANDARD.encode(Sha256::digest(body)))
}

/// The unpadded base64url SHA-256 of the body: the JWS claims' `body_hash`.
pub fn body_hash(body: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(body))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("the value is not a PKCS#8 P-256 private key")]
    NotAKey,
}

/// The platform's ES256 key for JWS_ES256 deliveries. The caller stores it sealed
/// ([`JwsKey::to_pkcs8_der`]) and publishes [`JwsKey::public_jwk`] in the webhook JWKS.
#[derive(Clone)]
pub struct JwsKey {
    /// Zeroized on drop by `p256`.
    secret: p256::SecretKey,
    kid: String,
}

impl fmt::Debug for JwsKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never the private key: this may end up in a log.
        f.debug_struct("JwsKey").field("kid", &self.kid).finish_non_exhaustive()
    }
}

impl JwsKey {
    pub fn generate() -> Self {
        Self::from_secret(p256::SecretKey::random(&mut rand::rngs::OsRng))
    }

    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, KeyError> {
        p256::SecretKey::from_pkcs8_der(der).map(Self::from_secret).map_err(|_| KeyError::NotAKey)
    }

    /// The private key as PKCS#8 DER, for the caller to seal; the caller should zeroize it
    /// once sealed.
    pub fn to_pkcs8_der(&self) -> Vec<u8> {
        // Encoding a valid P-256 key as PKCS#8 does not fail.
        self.secret.to_pkcs8_der().map(|doc| doc.as_bytes().to_vec()).unwrap_or_default()
    }

    /// The RFC 7638 thumbprint of the public key: stable, derived, checkable by anyone.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// `{kty, crv, x, y, kid, alg: "ES256", use: "sig"}`, for the JWKS.
    pub fn public_jwk(&self) -> Value {
        Es256PublicKey::of(&self.secret.public_key()).jwk(&self.kid)
    }

    fn from_secret(secret: p256::SecretKey) -> Self {
        Self { kid: Es256PublicKey::of(&secret.public_key()).thumbprint(), secret }
    }
}

/// The claims set of `X-JWS-Signature` (spec, JWS_ES256 signature): it signs the attempt, not
/// the event, and binds the body through `body_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryClaims {
    /// The platform issuer.
    pub iss: String,
    /// The platform issuer too, as the spec's table asks.
    pub sub: String,
    /// The registration's id.
    pub aud: String,
    /// Equals `Webhook-Timestamp`.
    pub iat: i64,
    pub exp: i64,
    /// Unique per attempt: a retry has a new one.
    pub jti: String,
    pub htm: String,
    /// The full registered URL.
    pub htu: String,
    pub body_hash_alg: String,
    pub body_hash: String,
}

impl DeliveryClaims {
    /// The claims of one attempt at `timestamp` (Unix seconds), valid for 60 seconds, with a fresh
    /// random `jti`.
    pub fn new(issuer: &str, registration_id: &str, url: &WebhookUrl, timestamp: i64, body: &[u8]) -> Self {
        Self {
            iss: issuer.to_owned(),
            sub: issuer.to_owned(),
            aud: registration_id.to_owned(),
            iat: timestamp,
            exp: timestamp.saturating_add(JWS_LIFETIME_SECS),
            jti: random_uuid(),
            htm: "POST".to_owned(),
            htu: url.as_str().to_owned(),
            body_hash_alg: BODY_HASH_ALG.to_owned(),
            body_hash: body_hash(body),
        }
    }
}

/// A version 4 UUID from the OS generator: unique per attempt without reading the clock.
fn random_uuid() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
}

/// `X-JWS-Signature`: the compact JWS (header `{alg: ES256, kid, typ: JWT}`) of `claims`, signed
/// with RFC 6979 deterministic ECDSA, the signature as `r || s` (RFC 7518 §3.4).
pub fn jws_signature(key: &JwsKey, claims: &DeliveryClaims) -> String {
    let header = json!({ "alg": "ES256", "kid": key.kid, "typ": "JWT" });
    // Serialising a struct of strings and integers does not fail.
    let payload = serde_json::to_vec(claims).unwrap_or_default();
    let signing_input = format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(payload));
    let signer = p256::ecdsa::SigningKey::from(&key.secret);
    let signature: p256::ecdsa::Signature = signer.sign(signing_input.as_bytes());
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// A compact JWS over `payload` with header `{alg: ES256, kid, typ}`: for statements other than
/// deliveries that the platform signs with the same published key (the audit chain's head), told
/// apart from deliveries by `typ`.
pub fn sign_compact(key: &JwsKey, typ: &str, payload: &[u8]) -> String {
    let header = json!({ "alg": "ES256", "kid": key.kid, "typ": typ });
    let signing_input = format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(payload));
    let signer = p256::ecdsa::SigningKey::from(&key.secret);
    let signature: p256::ecdsa::Signature = signer.sign(signing_input.as_bytes());
    format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

/// How one registration signs its deliveries.
#[derive(Debug, Clone, Copy)]
pub enum DeliverySigning<'a> {
    /// HMAC_SHA256 with the current secret, and the previous one during a rotation's overlap.
    Hmac { current: &'a str, previous: Option<&'a str> },
    /// JWS_ES256 with the platform key.
    Jws { key: &'a JwsKey, issuer: &'a str, registration_id: &'a str, url: &'a WebhookUrl },
}

/// Every header of one delivery attempt (spec, Delivery request), signed at `timestamp` (Unix
/// seconds); `attempt` counts from 1. A JWS is made anew for each call, so a retry has a new
/// `jti`.
pub fn delivery_headers(
    signing: &DeliverySigning<'_>,
    event_id: &str,
    timestamp: i64,
    attempt: u32,
    body: &[u8],
) -> Vec<(String, String)> {
    let mut headers = vec![
        ("Content-Type".to_owned(), "application/json".to_owned()),
        ("Content-Digest".to_owned(), content_digest(body)),
        ("Webhook-Event-Id".to_owned(), event_id.to_owned()),
        ("Webhook-Timestamp".to_owned(), timestamp.to_string()),
        ("Webhook-Delivery-Attempt".to_owned(), attempt.to_string()),
    ];
    match *signing {
        DeliverySigning::Hmac { current, previous } => {
            headers.push(("Webhook-Signature".to_owned(), signature_header(current, previous, timestamp, body)));
        }
        DeliverySigning::Jws { key, issuer, registration_id, url } => {
            let claims = DeliveryClaims::new(issuer, registration_id, url, timestamp, body);
            headers.push(("X-JWS-Signature".to_owned(), jws_signature(key, &claims)));
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_is_32_random_bytes_in_43_base64url_characters() {
        let secret = new_secret();
        assert_eq!(secret.len(), 43);
        assert!(secret.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'), "{secret}");
        assert_eq!(URL_SAFE_NO_PAD.decode(&secret).expect("base64url").len(), 32);
        assert_ne!(secret, new_secret());
    }

    /// Known answer computed independently of this crate, with
    /// `python3 -c 'import hmac,hashlib,base64;print(base64.b64encode(hmac.new(b"whsec_test",
    /// b"1700000000.{\"id\":\"e1\"}", hashlib.sha256).digest()).decode())'`.
    #[test]
    fn the_hmac_signature_matches_a_known_answer() {
        let signature = hmac_signature("whsec_test", 1_700_000_000, br#"{"id":"e1"}"#);
        assert_eq!(signature, "aoXLEXyZNhKjTHK0z7Wha67SWoDSbimM4OZnEyD9B8g=");
    }

    #[test]
    fn the_signature_header_carries_the_previous_secret_second_during_rotation() {
        let body = b"{}";
        let current = hmac_signature("new", 5, body);
        let previous = hmac_signature("old", 5, body);
        assert_eq!(signature_header("new", None, 5, body), format!("v1,{current}"));
        assert_eq!(signature_header("new", Some("old"), 5, body), format!("v1,{current},v1,{previous}"));
    }

    /// Known answer: SHA-256 of "hello" is 2cf24dba…9824 (`python3 -c 'import hashlib,base64;
    /// print(base64.b64encode(hashlib.sha256(b"hello").digest()))'`).
    #[test]
    fn the_content_digest_is_rfc_9530_sha_256() {
        assert_eq!(content_digest(b"hello"), "sha-256=:LPJNul+wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ=:");
        assert_eq!(body_hash(b"hello"), "LPJNul-wow4m6DsqxbninhsWHlwfp0JecwQzYpOLmCQ");
    }

    #[test]
    fn a_jws_key_round_trips_through_pkcs8_and_keeps_its_kid() {
        let key = JwsKey::generate();
        let again = JwsKey::from_pkcs8_der(&key.to_pkcs8_der()).expect("pkcs8");
        assert_eq!(again.kid(), key.kid());
        assert_eq!(again.public_jwk(), key.public_jwk());
        assert_eq!(key.kid().len(), 43);
        assert!(JwsKey::from_pkcs8_der(b"not a key").is_err());
        assert!(!format!("{key:?}").contains("secret"));
    }

    #[test]
    fn the_kid_is_the_rfc_7638_thumbprint() {
        let key = JwsKey::generate();
        let jwk = key.public_jwk();
        let canonical = format!(
            r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
            jwk["x"].as_str().expect("x"),
            jwk["y"].as_str().expect("y")
        );
        assert_eq!(key.kid(), URL_SAFE_NO_PAD.encode(Sha256::digest(canonical)));
        assert_eq!(jwk["kid"], key.kid());
        assert_eq!(jwk["alg"], "ES256");
    }

    #[test]
    fn claims_bind_the_attempt() {
        let url = crate::url::normalise("https://hooks.example.com/in").expect("url");
        let claims = DeliveryClaims::new("https://tokenops.example", "reg-1", &url, 1_000, b"hello");
        assert_eq!(claims.iss, "https://tokenops.example");
        assert_eq!(claims.sub, "https://tokenops.example");
        assert_eq!(claims.aud, "reg-1");
        assert_eq!((claims.iat, claims.exp), (1_000, 1_060));
        assert_eq!(claims.htm, "POST");
        assert_eq!(claims.htu, "https://hooks.example.com/in");
        assert_eq!(claims.body_hash_alg, "SHA-256");
        assert_eq!(claims.body_hash, body_hash(b"hello"));
        let again = DeliveryClaims::new("https://tokenops.example", "reg-1", &url, 1_000, b"hello");
        assert_ne!(claims.jti, again.jti, "a retry has a new jti");
        assert!(uuid::Uuid::parse_str(&claims.jti).is_ok());
    }

    fn header<'h>(headers: &'h [(String, String)], name: &str) -> &'h str {
        headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or_else(|| panic!("no {name}"))
    }

    #[test]
    fn an_hmac_delivery_carries_every_header_and_verifies() {
        let body = br#"{"id":"e1"}"#;
        let signing = DeliverySigning::Hmac { current: "new", previous: Some("old") };
        let headers = delivery_headers(&signing, "e1", 1_000, 3, body);
        assert_eq!(header(&headers, "Content-Type"), "application/json");
        assert_eq!(header(&headers, "Content-Digest"), content_digest(body));
        assert_eq!(header(&headers, "Webhook-Event-Id"), "e1");
        assert_eq!(header(&headers, "Webhook-Timestamp"), "1000");
        assert_eq!(header(&headers, "Webhook-Delivery-Attempt"), "3");
        let signature = header(&headers, "Webhook-Signature");
        assert_eq!(crate::verify::verify_hmac(signature, "old", 1_000, 1_000, body), Ok(()));
        assert!(!headers.iter().any(|(n, _)| n == "X-JWS-Signature"));
    }

    #[test]
    fn a_jws_delivery_carries_a_verifiable_token_and_no_hmac() {
        let body = br#"{"id":"e1"}"#;
        let key = JwsKey::generate();
        let url = crate::url::normalise("https://hooks.example.com/in").expect("url");
        let signing = DeliverySigning::Jws { key: &key, issuer: "iss", registration_id: "reg", url: &url };
        let headers = delivery_headers(&signing, "e1", 1_000, 1, body);
        let expect = crate::verify::JwsExpectations {
            issuer: "iss",
            registration_id: "reg",
            url: url.as_str(),
            timestamp: 1_000,
            now: 1_001,
            body,
        };
        let jwks = json!({ "keys": [key.public_jwk()] });
        assert!(crate::verify::verify_jws(header(&headers, "X-JWS-Signature"), &jwks, &expect).is_ok());
        assert!(!headers.iter().any(|(n, _)| n == "Webhook-Signature"));
    }

    #[test]
    fn the_jws_header_names_alg_kid_and_typ() {
        let key = JwsKey::generate();
        let url = crate::url::normalise("https://hooks.example.com/in").expect("url");
        let token = jws_signature(&key, &DeliveryClaims::new("iss", "reg", &url, 1, b"{}"));
        let parts: Vec<&str> = token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).expect("b64")).expect("json");
        assert_eq!(header, json!({ "alg": "ES256", "kid": key.kid(), "typ": "JWT" }));
        assert_eq!(URL_SAFE_NO_PAD.decode(parts[2]).expect("b64").len(), 64);
    }
}
