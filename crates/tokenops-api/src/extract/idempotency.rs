//! `Idempotency-Key`: required on the spec's writes, optional on the others (`Option<IdempotencyKey>`,
//! still checked when sent); non-blank, at most 255 characters, each printable ASCII (0x20 to
//! 0x7E: a space inside is allowed, a tab or any other control character is not), and not
//! starting with the prefix of the automation runs' own keys.

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::http::request::Parts;
use tokenops_app::Error;
use tokenops_app::automations::runs::RUN_KEY_PREFIX;

use crate::error::ApiError;

pub const MAX_LEN: usize = 255;

const NOT_PRINTABLE: &str = "The Idempotency-Key header must be printable ASCII (characters 0x20 to 0x7E)";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey(pub String);

pub fn check(value: Option<&str>) -> Result<IdempotencyKey, Error> {
    let value = value.ok_or_else(|| Error::bad_request("The Idempotency-Key header is required on this operation"))?;
    if value.trim().is_empty() {
        return Err(Error::bad_request("The Idempotency-Key header must not be blank"));
    }
    // `HeaderValue::to_str` lets a tab through; a key is compared byte for byte, so a character
    // a log or a copy would not show faithfully is refused rather than stored.
    if !value.bytes().all(|b| (0x20..=0x7E).contains(&b)) {
        return Err(Error::bad_request(NOT_PRINTABLE));
    }
    if value.chars().count() > MAX_LEN {
        return Err(Error::bad_request(format!("The Idempotency-Key header must be at most {MAX_LEN} characters")));
    }
    if value.starts_with(RUN_KEY_PREFIX) {
        return Err(Error::bad_request(format!(
            "The Idempotency-Key prefix {RUN_KEY_PREFIX} is reserved for the service's automation runs"
        )));
    }
    Ok(IdempotencyKey(value.to_owned()))
}

impl<S: Send + Sync> FromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let value = match parts.headers.get("idempotency-key") {
            None => None,
            Some(v) => Some(v.to_str().map_err(|_| Error::bad_request(NOT_PRINTABLE))?),
        };
        Ok(check(value)?)
    }
}

impl<S: Send + Sync> OptionalFromRequestParts<S> for IdempotencyKey {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Option<Self>, Self::Rejection> {
        if parts.headers.contains_key("idempotency-key") {
            Ok(Some(<IdempotencyKey as FromRequestParts<S>>::from_request_parts(parts, state).await?))
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert!(check(None).is_err());
        assert!(check(Some("   ")).is_err());
        assert!(check(Some(&"k".repeat(256))).is_err());
        assert!(check(Some(&"k".repeat(255))).is_ok());
        assert!(check(Some("a b ~!")).is_ok());
        for refused in ["a\tb", "a\u{7f}b", "a\u{1}b", "é", "\tkey"] {
            assert!(check(Some(refused)).is_err(), "{refused:?}");
        }
    }
}
