//! Access tokens of the embedded provider: compact ES256 JWTs signed with the key ring's
//! current key.
//!
//! Header `{alg: "ES256", typ: "JWT", kid}`; claims `iss, sub, tenant_id` (absent for the
//! platform operator), `iat, nbf, exp, jti` and `token_use: "access"`, then any extra claims.
//! The verifier refuses a token whose `token_use` is present and not `access`, so nothing else
//! this provider might sign later can pass as an access token. Refresh tokens are opaque
//! (`crate::opaque`) and cannot be mistaken for one at all.
//!
//! Signing uses `p256` directly (RFC 6979 deterministic ECDSA, signature as `r || s`, RFC 7518
//! §3.4) rather than `jsonwebtoken::encode`, so the private scalar is never copied into a key
//! object that does not zeroize it. Verification goes through `jsonwebtoken` like any token.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use p256::ecdsa::signature::Signer;
use rand::RngCore;
use serde_json::{Map, Value, json};
use std::time::Duration;
use tokenops_domain::{TenantId, Timestamp};

use crate::keys::KeyRing;
use crate::verifier::DEFAULT_LEEWAY_SECS;

/// 60 minutes: the spec's example `expiresIn` of 3600.
pub const DEFAULT_ACCESS_TTL_SECS: i64 = 3_600;

/// The `token_use` of an access token.
pub const ACCESS_TOKEN_USE: &str = "access";

/// Claims the issuer sets itself; `extra` may not carry them (it may carry `aud`).
const RESERVED_CLAIMS: [&str; 8] = ["iss", "sub", "tenant_id", "iat", "nbf", "exp", "jti", "token_use"];

/// What an access token says about its holder.
#[derive(Debug, Clone, PartialEq)]
pub struct AccessClaims {
    /// The user's id, or a machine client's id.
    pub sub: String,
    /// `None` for the platform operator.
    pub tenant_id: Option<TenantId>,
    /// Further claims, added after the standard ones.
    pub extra: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// Seconds, for the response's `expiresIn` / `expires_in`.
    pub expires_in: i64,
    pub jti: String,
    /// The signing key's id, for the audit record.
    pub kid: String,
    pub expires_at: Timestamp,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IssueError {
    #[error("the key ring has no current signing key")]
    NoSigningKey,
    #[error("an access token needs a non-blank subject")]
    EmptySubject,
    #[error("the access-token lifetime must be positive")]
    InvalidLifetime,
    #[error("the extra claim {0:?} is one the issuer sets itself")]
    ReservedClaim(String),
}

/// Issues access tokens as `issuer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenIssuer {
    /// `iss`: the provider's `{auth_url}`, exactly as the verifier expects it.
    pub issuer: String,
    pub access_ttl_secs: i64,
}

impl TokenIssuer {
    pub fn new(issuer: impl Into<String>, access_ttl_secs: i64) -> Self {
        Self { issuer: issuer.into(), access_ttl_secs }
    }

    /// The shortest safe `overlap` for `KeyRing::rotate`: a token signed just before the
    /// rotation lives `access_ttl_secs`, and verifiers accept it `DEFAULT_LEEWAY_SECS` past its
    /// `exp`; twice the leeway leaves room for clocks that differ between nodes.
    pub fn minimum_key_overlap(&self) -> Duration {
        let secs = self.access_ttl_secs.max(0).saturating_add(2 * DEFAULT_LEEWAY_SECS);
        Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX))
    }

    /// An access token for `claims`, signed with the ring's current key, valid from `now`.
    pub fn issue(&self, ring: &KeyRing, claims: &AccessClaims, now: Timestamp) -> Result<IssuedToken, IssueError> {
        if self.access_ttl_secs <= 0 {
            return Err(IssueError::InvalidLifetime);
        }
        if claims.sub.trim().is_empty() {
            return Err(IssueError::EmptySubject);
        }
        if let Some(name) =
            claims.extra.iter().flat_map(|extra| extra.keys()).find(|k| RESERVED_CLAIMS.contains(&k.as_str()))
        {
            return Err(IssueError::ReservedClaim(name.clone()));
        }
        let key = ring.current().ok_or(IssueError::NoSigningKey)?;
        // NumericDate is whole seconds (RFC 7519 §2); floor, so `iat` is never in the future.
        let iat = now.as_micros().div_euclid(1_000_000);
        let exp = iat.saturating_add(self.access_ttl_secs);
        let jti = random_uuid();

        let header = json!({ "alg": "ES256", "typ": "JWT", "kid": key.kid });
        let mut body = Map::new();
        body.insert("iss".into(), json!(self.issuer));
        body.insert("sub".into(), json!(claims.sub));
        if let Some(tenant) = claims.tenant_id {
            body.insert("tenant_id".into(), json!(tenant.to_string()));
        }
        body.insert("iat".into(), json!(iat));
        body.insert("nbf".into(), json!(iat));
        body.insert("exp".into(), json!(exp));
        body.insert("jti".into(), json!(jti));
        body.insert("token_use".into(), json!(ACCESS_TOKEN_USE));
        if let Some(extra) = &claims.extra {
            body.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        }

        let signing_input = format!("{}.{}", encode_part(&header), encode_part(&Value::Object(body)));
        let signer = p256::ecdsa::SigningKey::from(&key.secret);
        let signature: p256::ecdsa::Signature = signer.sign(signing_input.as_bytes());
        let token = format!("{signing_input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()));
        Ok(IssuedToken {
            token,
            expires_in: self.access_ttl_secs,
            jti,
            kid: key.kid.clone(),
            expires_at: Timestamp::from_micros(exp.saturating_mul(1_000_000)),
        })
    }
}

fn encode_part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

/// A random (version 4) UUID from the OS generator: unique per token without the system clock
/// that `Uuid::now_v7` would read.
fn random_uuid() -> String {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use jsonwebtoken::jwk::Jwk;
    use jsonwebtoken::{Algorithm, DecodingKey, Validation};
    use uuid::Uuid;

    const T0: i64 = 1_700_000_000_000_000;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_micros(T0 + secs * 1_000_000)
    }

    fn ring() -> KeyRing {
        let mut ring = KeyRing::default();
        ring.ensure_current(at(0));
        ring
    }

    fn issuer() -> TokenIssuer {
        TokenIssuer::new("http://127.0.0.1:8080/idp", DEFAULT_ACCESS_TTL_SECS)
    }

    fn decode_part(part: &str) -> Value {
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).expect("base64url")).expect("json")
    }

    /// RFC 7515 Appendix A.3: the specification's ES256 example verifies with the library the
    /// service verifies with, given the example's public key (raw `r || s` signature form).
    #[test]
    fn the_rfc_7515_es256_example_verifies() {
        let (x, y) = ("f83OJ3D2xF1Bg8vub9tLe1gHMzV76e8Tus9uPHvRVEU", "x_FEzRu9m36HLN_tue659LNpXW6pCyStikYjKIWI5a0");
        let token = "eyJhbGciOiJFUzI1NiJ9.\
                     eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.\
                     DtEhU3ljbEg8L38VWAfUAqOyKAM6-Xx-F4GawxaepmXFCgfTjDxw5djxLa8ISlSApmWQxfKTUJqPP3-Kg6NU1Q";
        let key = DecodingKey::from_ec_components(x, y).expect("key");
        let mut validation = Validation::new(Algorithm::ES256);
        validation.validate_exp = false;
        validation.required_spec_claims.clear();
        let data = jsonwebtoken::decode::<Value>(token, &key, &validation).expect("verifies");
        assert_eq!(data.claims["iss"], "joe");
        let tampered = format!("{}A", &token[..token.len() - 1]);
        assert!(jsonwebtoken::decode::<Value>(&tampered, &key, &validation).is_err());
        // And the example's private key gives the example's public key.
        let d = URL_SAFE_NO_PAD.decode("jpsQnnGQmL-YBIffH1136cspYG6-0iY7X1fCE9-E9LI").expect("d");
        let secret = p256::SecretKey::from_slice(&d).expect("scalar");
        let mut ring = KeyRing::default();
        ring.keys.push(crate::keys::SigningKey { kid: "rfc7515".into(), created_at: at(0), retire_at: None, secret });
        let jwk = ring.jwks(at(0))["keys"][0].clone();
        assert_eq!((jwk["x"].as_str(), jwk["y"].as_str()), (Some(x), Some(y)));
    }

    #[test]
    fn an_access_token_carries_the_documented_header_and_claims() {
        let ring = ring();
        let tenant = TenantId(Uuid::now_v7());
        let claims = AccessClaims { sub: "user-1".into(), tenant_id: Some(tenant), extra: None };
        let issued = issuer().issue(&ring, &claims, at(0).plus_millis(999)).expect("issued");
        assert_eq!(issued.expires_in, 3_600);
        let parts: Vec<&str> = issued.token.split('.').collect();
        assert_eq!(parts.len(), 3);
        let kid = ring.current().map(|k| k.kid.clone()).expect("current");
        assert_eq!(decode_part(parts[0]), json!({ "alg": "ES256", "typ": "JWT", "kid": kid }));
        let iat = T0 / 1_000_000;
        assert_eq!(
            decode_part(parts[1]),
            json!({
                "iss": "http://127.0.0.1:8080/idp", "sub": "user-1", "tenant_id": tenant.to_string(),
                "iat": iat, "nbf": iat, "exp": iat + 3_600, "jti": issued.jti, "token_use": "access"
            })
        );
        assert_eq!(issued.kid, kid);
        assert_eq!(issued.expires_at, at(3_600));
        assert_eq!(URL_SAFE_NO_PAD.decode(parts[2]).expect("sig").len(), 64, "r || s, not DER");
        assert!(Uuid::parse_str(&issued.jti).is_ok());

        // The published JWK verifies it, with the algorithm pinned to ES256.
        let jwk: Jwk = serde_json::from_value(ring.jwks(at(0))["keys"][0].clone()).expect("jwk");
        let mut validation = Validation::new(Algorithm::ES256);
        validation.set_issuer(&["http://127.0.0.1:8080/idp"]);
        validation.validate_exp = false;
        let decoded =
            jsonwebtoken::decode::<Value>(&issued.token, &DecodingKey::from_jwk(&jwk).expect("key"), &validation);
        assert_eq!(decoded.expect("verifies").claims["sub"], "user-1");
    }

    #[test]
    fn a_platform_token_has_no_tenant_and_extras_follow() {
        let mut extra = Map::new();
        extra.insert("client_id".into(), json!("c-1"));
        let claims = AccessClaims { sub: "c-1".into(), tenant_id: None, extra: Some(extra) };
        let issued = issuer().issue(&ring(), &claims, at(0)).expect("issued");
        let body = decode_part(issued.token.split('.').nth(1).expect("claims"));
        assert!(body.get("tenant_id").is_none());
        assert_eq!(body["client_id"], "c-1");
        let keys: Vec<&String> = body.as_object().expect("object").keys().collect();
        assert_eq!(keys, ["iss", "sub", "iat", "nbf", "exp", "jti", "token_use", "client_id"]);
    }

    #[test]
    fn tokens_are_unique_and_need_a_key_a_subject_and_a_lifetime() {
        let ring = ring();
        let claims = AccessClaims { sub: "u".into(), tenant_id: None, extra: None };
        let (a, b) =
            (issuer().issue(&ring, &claims, at(0)).expect("a"), issuer().issue(&ring, &claims, at(0)).expect("b"));
        assert_ne!(a.jti, b.jti);
        assert_ne!(a.token, b.token);
        assert_eq!(issuer().issue(&KeyRing::default(), &claims, at(0)), Err(IssueError::NoSigningKey));
        let blank = AccessClaims { sub: " ".into(), ..claims.clone() };
        assert_eq!(issuer().issue(&ring, &blank, at(0)), Err(IssueError::EmptySubject));
        assert_eq!(TokenIssuer::new("i", 0).issue(&ring, &claims, at(0)), Err(IssueError::InvalidLifetime));
        for reserved in ["exp", "token_use", "tenant_id"] {
            let mut extra = Map::new();
            extra.insert(reserved.into(), json!(1));
            let sneaky = AccessClaims { extra: Some(extra), ..claims.clone() };
            assert_eq!(issuer().issue(&ring, &sneaky, at(0)), Err(IssueError::ReservedClaim(reserved.into())));
        }
    }

    #[test]
    fn a_rotated_ring_signs_with_the_new_key() {
        let mut ring = ring();
        let overlap = issuer().minimum_key_overlap();
        assert_eq!(overlap, Duration::from_secs(3_660));
        let new_kid = ring.rotate(at(10), overlap).kid.clone();
        let claims = AccessClaims { sub: "u".into(), tenant_id: None, extra: None };
        assert_eq!(issuer().issue(&ring, &claims, at(10)).expect("issued").kid, new_kid);
    }
}
