//! The receiver's side of both signature schemes, as the spec asks a receiver to check them. The
//! behaviour tests verify real deliveries with it, and the docs show it to integrators.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use p256::ecdsa::signature::Verifier;
use serde_json::Value;
use subtle::ConstantTimeEq;

use crate::signing::{BODY_HASH_ALG, DeliveryClaims, body_hash, hmac_bytes};

/// The receiver's tolerance between `Webhook-Timestamp` and its clock.
pub const TIMESTAMP_TOLERANCE_SECS: i64 = 300;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("the timestamp is more than {TIMESTAMP_TOLERANCE_SECS} seconds from the receiver's clock")]
    StaleTimestamp,
    #[error("the signature header has no v1 signature")]
    NoSignature,
    #[error("no v1 signature matches")]
    NoMatchingSignature,
    #[error("the JWS is not a compact JWS: {0}")]
    Malformed(&'static str),
    #[error("the JWS algorithm must be ES256")]
    Algorithm,
    #[error("the JWS header names its own key ({0}); only the trusted key set is used")]
    KeyInHeader(&'static str),
    #[error("the JWS names no key of the trusted key set")]
    UnknownKey,
    #[error("the JWS signature does not verify")]
    BadSignature,
    #[error("the JWS claim {claim} is wrong")]
    Claim { claim: &'static str },
    #[error("the JWS has expired")]
    Expired,
}

/// Checks `Webhook-Signature` against one secret: the timestamp within 300 seconds of `now`, and
/// any `v1,<signature>` pair matching (several pairs during a rotation), compared in constant
/// time.
pub fn verify_hmac(header: &str, secret: &str, timestamp: i64, now: i64, body: &[u8]) -> Result<(), VerifyError> {
    if now.abs_diff(timestamp) > TIMESTAMP_TOLERANCE_SECS.unsigned_abs() {
        return Err(VerifyError::StaleTimestamp);
    }
    let expected = hmac_bytes(secret, timestamp, body);
    let parts: Vec<&str> = header.split(',').map(str::trim).collect();
    let signatures: Vec<&str> = parts.chunks(2).filter(|p| p.len() == 2 && p[0] == "v1").map(|p| p[1]).collect();
    if signatures.is_empty() {
        return Err(VerifyError::NoSignature);
    }
    // Every pair is compared so the time taken does not say which one matched.
    let matched = signatures
        .iter()
        .filter_map(|s| STANDARD.decode(s).ok())
        .fold(subtle::Choice::from(0), |any, candidate| any | candidate.ct_eq(&expected));
    if bool::from(matched) { Ok(()) } else { Err(VerifyError::NoMatchingSignature) }
}

/// What a receiver knows for checking one JWS_ES256 delivery.
#[derive(Debug, Clone, Copy)]
pub struct JwsExpectations<'a> {
    /// The platform issuer (`iss` and `sub`).
    pub issuer: &'a str,
    /// `aud`.
    pub registration_id: &'a str,
    /// `htu`: the full registered URL, as the registration shows it.
    pub url: &'a str,
    /// `Webhook-Timestamp`, which `iat` must equal.
    pub timestamp: i64,
    /// The receiver's clock, Unix seconds.
    pub now: i64,
    /// The raw body, which `body_hash` must match.
    pub body: &'a [u8],
}

/// Checks `X-JWS-Signature` row by row of the spec's table: ES256 with a `kid` from the trusted
/// key set `jwks` (a key named or carried by the token is refused), then every claim. It does
/// not check `jti` reuse: the receiver keeps the set of `jti`s it has seen (for at least the
/// token's lifetime) and refuses one it has seen; the returned claims carry it.
pub fn verify_jws(token: &str, jwks: &Value, expect: &JwsExpectations<'_>) -> Result<DeliveryClaims, VerifyError> {
    let (_, payload) = verify_signature(token, jwks)?;
    let claims: DeliveryClaims = serde_json::from_slice(&payload)
        .map_err(|_| VerifyError::Malformed("the payload is not the delivery claims set"))?;
    let claim = |ok: bool, claim: &'static str| if ok { Ok(()) } else { Err(VerifyError::Claim { claim }) };
    claim(claims.iss == expect.issuer, "iss")?;
    claim(claims.sub == expect.issuer, "sub")?;
    claim(claims.aud == expect.registration_id, "aud")?;
    claim(claims.iat == expect.timestamp, "iat")?;
    claim(claims.exp > claims.iat, "exp")?;
    if claims.exp <= expect.now {
        return Err(VerifyError::Expired);
    }
    // A token issued further in the future than the HMAC tolerance allows is a clock problem
    // or a forgery, not a delivery.
    claim(claims.iat <= expect.now.saturating_add(TIMESTAMP_TOLERANCE_SECS), "iat")?;
    claim(!claims.jti.is_empty(), "jti")?;
    claim(claims.htm == "POST", "htm")?;
    claim(claims.htu == expect.url, "htu")?;
    claim(claims.body_hash_alg.eq_ignore_ascii_case(BODY_HASH_ALG), "body_hash_alg")?;
    claim(claims.body_hash == body_hash(expect.body), "body_hash")?;
    Ok(claims)
}

/// Checks a compact JWS that the platform signed with [`crate::signing::sign_compact`]: ES256
/// with a `kid` of the trusted key set, header `typ` equal to `typ` (so that a delivery's JWS
/// cannot pass for another statement); its payload bytes.
pub fn verify_compact(token: &str, jwks: &Value, typ: &str) -> Result<Vec<u8>, VerifyError> {
    let (header, payload) = verify_signature(token, jwks)?;
    if header.get("typ").and_then(Value::as_str) != Some(typ) {
        return Err(VerifyError::Claim { claim: "typ" });
    }
    Ok(payload)
}

/// The `kid` a compact JWS's header names, unverified: which key made it, to tell whether it
/// must be signed anew after a rotation.
pub fn compact_kid(token: &str) -> Option<String> {
    let header: Value = decode_json(token.split('.').next()?)?;
    header.get("kid")?.as_str().map(str::to_owned)
}

/// The signature checks every platform JWS passes: three parts, ES256, no key named or carried
/// by the token, a `kid` of `jwks`, a valid signature. The header and the payload's bytes.
fn verify_signature(token: &str, jwks: &Value) -> Result<(Value, Vec<u8>), VerifyError> {
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(VerifyError::Malformed("it does not have three parts"));
    };
    let header: Value = decode_json(header_b64).ok_or(VerifyError::Malformed("the header is not base64url JSON"))?;
    if header.get("alg").and_then(Value::as_str) != Some("ES256") {
        return Err(VerifyError::Algorithm);
    }
    for name in ["jku", "x5u", "jwk", "x5c"] {
        if header.get(name).is_some() {
            return Err(VerifyError::KeyInHeader(name));
        }
    }
    let kid = header.get("kid").and_then(Value::as_str).ok_or(VerifyError::UnknownKey)?;
    let key = trusted_key(jwks, kid).ok_or(VerifyError::UnknownKey)?;
    let signature = URL_SAFE_NO_PAD
        .decode(signature_b64)
        .ok()
        .and_then(|bytes| p256::ecdsa::Signature::from_slice(&bytes).ok())
        .ok_or(VerifyError::BadSignature)?;
    let signing_input = &token[..header_b64.len() + 1 + payload_b64.len()];
    key.verify(signing_input.as_bytes(), &signature).map_err(|_| VerifyError::BadSignature)?;
    let payload =
        URL_SAFE_NO_PAD.decode(payload_b64).map_err(|_| VerifyError::Malformed("the payload is not base64url"))?;
    Ok((header, payload))
}

fn decode_json(part: &str) -> Option<Value> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

/// The P-256 key of `kid` in a JWKS document (`{"keys": [...]}`); a key that says it is for
/// another algorithm or use is not taken.
fn trusted_key(jwks: &Value, kid: &str) -> Option<p256::ecdsa::VerifyingKey> {
    let jwk = jwks.get("keys")?.as_array()?.iter().find(|k| k.get("kid").and_then(Value::as_str) == Some(kid))?;
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    if text("kty") != Some("EC") || text("crv") != Some("P-256") {
        return None;
    }
    if text("alg").is_some_and(|alg| alg != "ES256") || text("use").is_some_and(|u| u != "sig") {
        return None;
    }
    // Only the members that make the key: the JWK parser refuses members it does not know.
    let bare = serde_json::json!({ "kty": "EC", "crv": "P-256", "x": text("x")?, "y": text("y")? });
    let public = p256::PublicKey::from_jwk_str(&bare.to_string()).ok()?;
    Some(p256::ecdsa::VerifyingKey::from(public))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::{JwsKey, hmac_signature, jws_signature, signature_header};
    use serde_json::json;

    const T: i64 = 1_700_000_000;
    const BODY: &[u8] = br#"{"id":"e1","type":"webhook.test"}"#;

    #[test]
    fn a_matching_signature_within_tolerance_verifies() {
        let header = signature_header("s3cret", None, T, BODY);
        assert_eq!(verify_hmac(&header, "s3cret", T, T, BODY), Ok(()));
        assert_eq!(verify_hmac(&header, "s3cret", T, T + 300, BODY), Ok(()));
        assert_eq!(verify_hmac(&header, "s3cret", T, T - 300, BODY), Ok(()));
    }

    #[test]
    fn a_timestamp_more_than_300_seconds_away_is_refused() {
        let header = signature_header("s3cret", None, T, BODY);
        assert_eq!(verify_hmac(&header, "s3cret", T, T + 301, BODY), Err(VerifyError::StaleTimestamp));
        assert_eq!(verify_hmac(&header, "s3cret", T, T - 301, BODY), Err(VerifyError::StaleTimestamp));
    }

    #[test]
    fn any_matching_pair_is_accepted_during_a_rotation() {
        let header = signature_header("new", Some("old"), T, BODY);
        assert_eq!(verify_hmac(&header, "new", T, T, BODY), Ok(()));
        assert_eq!(verify_hmac(&header, "old", T, T, BODY), Ok(()));
        assert_eq!(verify_hmac(&header, "other", T, T, BODY), Err(VerifyError::NoMatchingSignature));
    }

    #[test]
    fn a_changed_body_timestamp_or_header_is_refused() {
        let header = signature_header("s3cret", None, T, BODY);
        assert_eq!(verify_hmac(&header, "s3cret", T, T, b"{}"), Err(VerifyError::NoMatchingSignature));
        assert_eq!(verify_hmac(&header, "s3cret", T + 1, T, BODY), Err(VerifyError::NoMatchingSignature));
        let v0 = format!("v0,{}", hmac_signature("s3cret", T, BODY));
        assert_eq!(verify_hmac(&v0, "s3cret", T, T, BODY), Err(VerifyError::NoSignature));
        assert_eq!(verify_hmac("", "s3cret", T, T, BODY), Err(VerifyError::NoSignature));
        assert_eq!(verify_hmac("v1,not base64!", "s3cret", T, T, BODY), Err(VerifyError::NoMatchingSignature));
    }

    struct Fixture {
        key: JwsKey,
        jwks: Value,
        url: crate::url::WebhookUrl,
    }

    fn fixture() -> Fixture {
        let key = JwsKey::generate();
        let jwks = json!({ "keys": [key.public_jwk()] });
        Fixture { key, jwks, url: crate::url::normalise("https://hooks.example.com/in").expect("url") }
    }

    impl Fixture {
        fn claims(&self) -> DeliveryClaims {
            DeliveryClaims::new("https://tokenops.example", "reg-1", &self.url, T, BODY)
        }

        fn expect(&self) -> JwsExpectations<'_> {
            JwsExpectations {
                issuer: "https://tokenops.example",
                registration_id: "reg-1",
                url: self.url.as_str(),
                timestamp: T,
                now: T + 10,
                body: BODY,
            }
        }

        fn verify_claims(&self, claims: &DeliveryClaims) -> Result<DeliveryClaims, VerifyError> {
            verify_jws(&jws_signature(&self.key, claims), &self.jwks, &self.expect())
        }
    }

    /// A token with the given header and claims, signed with `key`, for the header checks.
    fn forged(key: &JwsKey, header: Value, claims: &Value) -> String {
        use p256::ecdsa::signature::Signer;
        let input =
            format!("{}.{}", URL_SAFE_NO_PAD.encode(header.to_string()), URL_SAFE_NO_PAD.encode(claims.to_string()));
        let secret = p256::SecretKey::from_pkcs8_der(&key.to_pkcs8_der()).expect("key");
        let signature: p256::ecdsa::Signature = p256::ecdsa::SigningKey::from(&secret).sign(input.as_bytes());
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
    }

    use p256::pkcs8::DecodePrivateKey;

    #[test]
    fn a_signed_delivery_verifies_and_returns_its_claims() {
        let f = fixture();
        let claims = f.claims();
        assert_eq!(f.verify_claims(&claims), Ok(claims));
    }

    #[test]
    fn the_algorithm_must_be_es256_and_the_key_from_the_trusted_set() {
        let f = fixture();
        let claims = serde_json::to_value(f.claims()).expect("claims");
        let kid = f.key.kid().to_owned();
        let expect = f.expect();
        let hs256 = forged(&f.key, json!({ "alg": "HS256", "kid": kid }), &claims);
        assert_eq!(verify_jws(&hs256, &f.jwks, &expect), Err(VerifyError::Algorithm));
        let none = forged(&f.key, json!({ "alg": "none", "kid": kid }), &claims);
        assert_eq!(verify_jws(&none, &f.jwks, &expect), Err(VerifyError::Algorithm));
        for name in ["jku", "x5u", "jwk", "x5c"] {
            let token =
                forged(&f.key, json!({ "alg": "ES256", "kid": kid, name: "https://evil.example/keys" }), &claims);
            assert_eq!(verify_jws(&token, &f.jwks, &expect), Err(VerifyError::KeyInHeader(name)));
        }
        let no_kid = forged(&f.key, json!({ "alg": "ES256" }), &claims);
        assert_eq!(verify_jws(&no_kid, &f.jwks, &expect), Err(VerifyError::UnknownKey));
        let other = JwsKey::generate();
        let untrusted = jws_signature(&other, &f.claims());
        assert_eq!(verify_jws(&untrusted, &f.jwks, &expect), Err(VerifyError::UnknownKey));
        // An untrusted key that claims a trusted kid fails on the signature.
        let impostor = forged(&other, json!({ "alg": "ES256", "kid": kid }), &claims);
        assert_eq!(verify_jws(&impostor, &f.jwks, &expect), Err(VerifyError::BadSignature));
    }

    #[test]
    fn a_tampered_or_malformed_token_is_refused() {
        let f = fixture();
        let token = jws_signature(&f.key, &f.claims());
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let mut other = f.claims();
        other.aud = "reg-2".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&other).expect("json"));
        assert_eq!(verify_jws(&parts.join("."), &f.jwks, &f.expect()), Err(VerifyError::BadSignature));
        assert!(matches!(verify_jws("a.b", &f.jwks, &f.expect()), Err(VerifyError::Malformed(_))));
        assert!(matches!(verify_jws(&format!("{token}.x"), &f.jwks, &f.expect()), Err(VerifyError::Malformed(_))));
    }

    type Change = Box<dyn Fn(&mut DeliveryClaims)>;

    #[test]
    fn each_claim_is_checked() {
        let f = fixture();
        let cases: Vec<(&str, Change)> = vec![
            ("iss", Box::new(|c| c.iss = "https://other.example".into())),
            ("sub", Box::new(|c| c.sub = "someone".into())),
            ("aud", Box::new(|c| c.aud = "reg-2".into())),
            ("iat", Box::new(|c| c.iat = T - 1)),
            ("exp", Box::new(|c| c.exp = c.iat)),
            ("jti", Box::new(|c| c.jti = String::new())),
            ("htm", Box::new(|c| c.htm = "GET".into())),
            ("htu", Box::new(|c| c.htu = "https://hooks.example.com/other".into())),
            ("body_hash_alg", Box::new(|c| c.body_hash_alg = "sha-1".into())),
            ("body_hash", Box::new(|c| c.body_hash = body_hash(b"another body"))),
        ];
        for (name, change) in cases {
            let mut claims = f.claims();
            change(&mut claims);
            assert_eq!(f.verify_claims(&claims), Err(VerifyError::Claim { claim: name }), "{name}");
        }
    }

    #[test]
    fn an_expired_token_is_refused() {
        let f = fixture();
        let token = jws_signature(&f.key, &f.claims());
        let late = JwsExpectations { now: T + 60, ..f.expect() };
        assert_eq!(verify_jws(&token, &f.jwks, &late), Err(VerifyError::Expired));
        let in_time = JwsExpectations { now: T + 59, ..f.expect() };
        assert!(verify_jws(&token, &f.jwks, &in_time).is_ok());
    }

    #[test]
    fn a_token_from_the_far_future_is_refused() {
        let f = fixture();
        let mut claims = f.claims();
        claims.iat = T + 1_000;
        claims.exp = T + 1_060;
        let token = jws_signature(&f.key, &claims);
        let expect = JwsExpectations { timestamp: T + 1_000, ..f.expect() };
        assert_eq!(verify_jws(&token, &f.jwks, &expect), Err(VerifyError::Claim { claim: "iat" }));
    }
}
