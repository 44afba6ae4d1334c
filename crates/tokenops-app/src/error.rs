//! The one error type of tokenops. Errors policy:
//! - `store` returns `StoreError`; app services convert it here (`From`), so a database failure
//!   becomes `Kind::Internal` and is logged once, with its cause, where it is rendered.
//! - App services and API extractors build errors with the constructors below, one per HTTP
//!   meaning; the API renders every `Error` through one table (`tokenops_api::error`).
//! - Messages are for humans; clients branch on the status and the stable `code`.

use serde_json::{Map, Value};
use std::fmt;
use tokenops_store::StoreError;

/// What went wrong, in HTTP terms. Every variant is matched explicitly where it is rendered, so a
/// new one forces a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    BadRequest,
    Unauthorized,
    Forbidden,
    NotFound,
    MethodNotAllowed,
    Conflict,
    PayloadTooLarge,
    UnsupportedMediaType,
    Unprocessable,
    Internal,
    Unavailable,
}

/// One field's complaint, carried in `details`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

#[derive(Debug)]
pub struct Error {
    pub kind: Kind,
    pub message: String,
    /// Stable machine-readable code (for example `IDEMPOTENCY_CONFLICT`).
    pub code: &'static str,
    pub details: Vec<FieldError>,
    /// Extra top-level body members some errors carry (for example `customerRef`, `existingStatus`).
    pub extra: Map<String, Value>,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
    /// The cause of an internal failure: logged, never shown.
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
    /// A caller's error that a retry with the same Idempotency-Key may outgrow (for example a
    /// lock that is not visible yet): not stored as the key's outcome.
    pub retry_same_key: bool,
}

pub type AppResult<T> = Result<T, Error>;

pub const SYSTEM_ERROR_MESSAGE: &str = "System error occurred";

impl Error {
    pub fn new(kind: Kind, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            code,
            details: Vec::new(),
            extra: Map::new(),
            retry_after: None,
            source: None,
            retry_same_key: false,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Kind::BadRequest, "VALIDATION_FAILED", message)
    }

    /// A 400 naming the offending field, with the field in `details`.
    pub fn invalid_field(field: &str, problem: impl fmt::Display) -> Self {
        let message = format!("{field}: {problem}");
        Self::bad_request(message.clone())
            .with_details(vec![FieldError { field: field.to_owned(), message: problem.to_string() }])
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(Kind::Unauthorized, "UNAUTHORIZED", message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Kind::Forbidden, "FORBIDDEN", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Kind::NotFound, "NOT_FOUND", message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Kind::Conflict, "CONFLICT", message)
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(Kind::Unprocessable, "UNPROCESSABLE", message)
    }

    /// An unexpected failure: the caller sees only `System error occurred`.
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let mut e = Self::new(Kind::Internal, "INTERNAL_ERROR", SYSTEM_ERROR_MESSAGE);
        e.source = Some(source.into());
        e
    }

    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = code;
        self
    }

    pub fn with_details(mut self, details: Vec<FieldError>) -> Self {
        self.details = details;
        self
    }

    pub fn with_extra(mut self, name: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(name.to_owned(), value.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// Whether this outcome is the caller's (and so is stored under its Idempotency-Key and
    /// replayed), rather than the service's own failure or a state the request may outgrow
    /// (both release the key for a retry).
    pub fn is_final_outcome(&self) -> bool {
        !self.retry_same_key && !matches!(self.kind, Kind::Internal | Kind::Unavailable)
    }

    /// Marks a caller's error as one the same request may outgrow, so that its key is released
    /// rather than bound to this answer.
    pub fn retry_with_same_key(mut self) -> Self {
        self.retry_same_key = true;
        self
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        if let Some(source) = &self.source {
            write!(f, " (cause: {source})")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::internal(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callers_errors_are_final_unless_the_request_may_outgrow_them() {
        assert!(Error::not_found("x").is_final_outcome());
        assert!(Error::conflict("x").is_final_outcome());
        assert!(!Error::not_found("lock not visible yet").retry_with_same_key().is_final_outcome());
        assert!(!Error::internal(std::io::Error::other("disk")).is_final_outcome());
    }
}
