//! The one error type of tokenops. Errors policy:
//! - `store` returns `StoreError`; app services convert it here (`From`), so a database failure
//!   becomes `Code::InternalError` and is logged once, with its cause, where it is rendered.
//! - App services and API extractors build errors with the constructors below, one per HTTP
//!   meaning, refined with `with_code`; every `Error` carries a [`Code`] of the one table
//!   (`crate::codes`), which gives its status. HTTP-only errors are the API's.
//! - Messages are for humans; clients branch on the status and the stable `code`.

use serde_json::{Map, Value};
use std::fmt;
use tokenops_store::StoreError;

pub use crate::codes::Code;

/// One field's complaint, carried in `details`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

#[derive(Debug)]
pub struct Error {
    /// Stable machine-readable code (for example `IDEMPOTENCY_CONFLICT`); it decides the status.
    pub code: Code,
    pub message: String,
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

pub const SYSTEM_ERROR_MESSAGE: &str = match Code::InternalError.default_message() {
    Some(message) => message,
    None => "",
};

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: Vec::new(),
            extra: Map::new(),
            retry_after: None,
            source: None,
            retry_same_key: false,
        }
    }

    /// An error with its code's default message (the code's name where it has none).
    pub fn of(code: Code) -> Self {
        Self::new(code, code.default_message().unwrap_or(code.wire()))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(Code::ValidationFailed, message)
    }

    /// A change that sends none of its fields: 400 `Nothing to change: {what}`, its detail
    /// against the body (no one field is at fault).
    pub fn nothing_to_change(what: &str) -> Self {
        Self::bad_request(format!("Nothing to change: {what}"))
            .with_details(vec![FieldError { field: "body".to_owned(), message: what.to_owned() }])
    }

    /// A 400 naming the offending field, with the field in `details`.
    pub fn invalid_field(field: &str, problem: impl fmt::Display) -> Self {
        let message = format!("{field}: {problem}");
        Self::bad_request(message.clone())
            .with_details(vec![FieldError { field: field.to_owned(), message: problem.to_string() }])
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(Code::Unauthorized, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(Code::Forbidden, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(Code::Conflict, message)
    }

    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(Code::Unprocessable, message)
    }

    /// An unexpected failure: the caller sees only `System error occurred`.
    pub fn internal(source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        let mut e = Self::of(Code::InternalError);
        e.source = Some(source.into());
        e
    }

    /// Refines the constructor's code; the new code answers with the same status.
    pub fn with_code(mut self, code: Code) -> Self {
        debug_assert_eq!(self.code.status(), code.status(), "{code} changes the status of a {}", self.code);
        self.code = code;
        self
    }

    /// The HTTP status of this error: its code's.
    pub fn status(&self) -> u16 {
        self.code.status()
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
        !self.retry_same_key && self.status() < 500
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
        write!(f, "{}: {}", self.code, self.message)?;
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

/// A store write that a unique key may refuse: the refusal (`StoreError::Conflict`) is the
/// caller's mistake, answered by `conflict`; any other store failure stays internal.
pub trait OrConflict<T> {
    fn or_conflict(self, conflict: impl FnOnce() -> Error) -> AppResult<T>;
}

impl<T> OrConflict<T> for Result<T, StoreError> {
    fn or_conflict(self, conflict: impl FnOnce() -> Error) -> AppResult<T> {
        self.map_err(|e| match e {
            StoreError::Conflict(_) => conflict(),
            other => other.into(),
        })
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
