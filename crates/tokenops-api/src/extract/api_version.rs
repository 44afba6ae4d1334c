//! `API-Version`: required on every API request as `major.minor.patch`; only the versions in
//! [`SUPPORTED`] are served. Missing, malformed or unsupported → 400 naming the supported ones.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, HttpCode};

pub const HEADER: &str = "api-version";
/// The API's version: the document's `info.version`, and the newest version served.
pub const CURRENT: &str = "1.0.0";
pub const SUPPORTED: &[&str] = &[CURRENT];

fn is_semver_triplet(text: &str) -> bool {
    let parts: Vec<&str> = text.split('.').collect();
    parts.len() == 3 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Checks one header value; `Ok` carries the version.
pub fn check(value: Option<&str>) -> Result<&str, ApiError> {
    let supported = SUPPORTED.join(", ");
    let refuse = |problem: String| {
        ApiError::http(HttpCode::UnsupportedApiVersion, format!("{problem}. Supported versions: {supported}"))
    };
    let value = value.ok_or_else(|| refuse("The API-Version header is required".into()))?;
    if !is_semver_triplet(value) {
        return Err(refuse(format!("API-Version {value:?} is not of the form major.minor.patch")));
    }
    if !SUPPORTED.contains(&value) {
        return Err(refuse(format!("API-Version {value} is not supported")));
    }
    Ok(value)
}

pub async fn require_api_version(request: Request, next: Next) -> Response {
    let values: Vec<&str> =
        request.headers().get_all(HEADER).iter().map(|v| v.to_str().unwrap_or("\u{fffd}")).collect();
    // Repeated lines of a header are one comma-joined value (RFC 9110 §5.3), which is no
    // version: the same answer as for `1.0.0, 2.0.0` sent on one line.
    let value = (!values.is_empty()).then(|| values.join(", "));
    match check(value.as_deref()) {
        Ok(_) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_supported_triplets_pass() {
        assert!(check(Some("1.0.0")).is_ok());
        for bad in [
            None,
            Some(""),
            Some("1.0"),
            Some("latest"),
            Some("1.0.0.0"),
            Some("v1.0.0"),
            Some("1.0.0 "),
            Some("2.0.0"),
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }
}
