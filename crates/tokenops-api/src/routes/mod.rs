//! One router per area of the spec, and the rules several areas answer by: the routes only the
//! embedded identity provider serves, and responses that are never cached.

pub mod accounts;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod automations;
pub mod clients;
pub mod contracts;
pub mod customers;
pub mod fields;
pub mod groups;
pub mod idp;
pub mod operations;
pub mod policies;
pub mod roles;
pub mod scripts;
pub mod templates;
pub mod tenants;
pub mod transactions;
pub mod users;
pub mod webhook_events;
pub mod webhooks;

use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::ApiState;
use crate::error::{ApiError, HttpCode};

/// 404 for an operation that belongs to the identity provider when the deployment trusts an
/// external one (the bank's provider owns accounts, credentials and sign-in).
pub(crate) fn embedded_provider_only(state: &ApiState, message: &'static str) -> Result<(), ApiError> {
    if state.embedded_provider { Ok(()) } else { Err(ApiError::http(HttpCode::RouteNotFound, message)) }
}

/// A response that carries credentials (tokens, a secret, a sign-in session): never cached.
pub(crate) fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
