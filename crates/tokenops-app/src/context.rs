//! Who is acting and on whose behalf: the verified caller and the request's identifiers, passed
//! to every app service that writes.

use tokenops_domain::TenantId;

/// The verified caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's `sub`.
    pub subject: String,
    /// The organisation the token is for; `None` for the platform operator.
    pub tenant: Option<TenantId>,
}

/// Everything a write needs to know about the request that caused it.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub caller: Caller,
    /// The organisation the write acts on: the caller's for tenant endpoints; the new one when
    /// an operator creates an organisation; `None` for platform actions on no organisation
    /// (a sign-in attempt with an unknown email).
    pub tenant: Option<TenantId>,
    pub request_id: String,
    /// Carried into events as `correlationId` (from `X-Correlation-Id`, else the request id).
    pub correlation_id: Option<String>,
}
