//! The checks of a token's own content: a header that carries or points at a key, the signature,
//! algorithm and issuer, the audience, `token_use` and the claims' form, and expiry and `nbf`.

use super::{Claims, TokenVerifier, VerifyError};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::tokens::ACCESS_TOKEN_USE;

/// Header members that carry or point at a key. A verifier that used them would let the token
/// choose the key that verifies it.
const KEY_BEARING_HEADERS: [&str; 4] = ["jku", "x5u", "jwk", "x5c"];

#[derive(Clone, Deserialize)]
pub(super) struct RawClaims {
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

impl TokenVerifier {
    /// The signature, algorithm and issuer checks; the claims the token carries.
    pub(super) fn check_signature(
        &self,
        token: &str,
        key: &DecodingKey,
        algorithm: Algorithm,
    ) -> Result<RawClaims, VerifyError> {
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
    pub(super) fn check_claims(&self, claims: RawClaims) -> Result<(Claims, Option<Timestamp>), VerifyError> {
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
    pub(super) fn check_instant(
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
pub(super) fn refuse_key_bearing_header(token: &str) -> Result<(), VerifyError> {
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

/// RFC 7519 §4.1.3: `aud` is one string or an array of strings; the token is for us when one of
/// them is ours.
fn carries_audience(aud: Option<&serde_json::Value>, expected: &str) -> bool {
    match aud {
        Some(serde_json::Value::String(one)) => one == expected,
        Some(serde_json::Value::Array(many)) => many.iter().any(|v| v.as_str() == Some(expected)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
}
