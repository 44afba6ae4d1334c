//! The audit vocabulary: an audit record per write attempt, with the spec's audit fields plus
//! the idempotency key, the HTTP outcome and a free-form detail; the criteria of the trail's list.

use crate::wire::wire_enum;
use crate::{TenantId, Timestamp};
use uuid::Uuid;

wire_enum! {
    AuditOutcome {
        Success => "SUCCESS",
        Failure => "FAILURE",
    }
}

wire_enum! {
    /// Where the audited action came from.
    AuditSource {
        /// A request to the HTTP API.
        Api => "API",
        /// A background job acting on the service's own behalf.
        Worker => "WORKER",
        /// The service itself at start, or an operator command (`tokenops operator …`).
        System => "SYSTEM",
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub id: Uuid,
    pub tenant_id: Option<TenantId>,
    pub occurred_at: Timestamp,
    pub created_at: Timestamp,
    /// Dotted verb on a resource, for example `customer.create`.
    pub action: String,
    /// The spec area, for example `CUSTOMERS`.
    pub category: String,
    pub source: AuditSource,
    /// The token's `sub`, or `None` for the service itself.
    pub actor_id: Option<String>,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub outcome: AuditOutcome,
    pub request_id: Option<String>,
    pub idempotency_key: Option<String>,
    /// HTTP status returned to the caller, when the action came over HTTP.
    pub http_status: Option<u16>,
    /// What changed, or why the attempt failed.
    pub detail: serde_json::Value,
    /// Where the record stands in its organisation's sealed chain; `None` until the sealer has
    /// taken it (and always when it is written).
    pub seal: Option<AuditSeal>,
}

/// A sealed record's place in its chain (`audit_chain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSeal {
    /// 1, 2, … in the chain's order, without gaps.
    pub chain_seq: i64,
    pub block_number: i64,
    /// Lower-case hex SHA-256 of the record's canonical bytes, as computed when it was sealed.
    pub record_hash: String,
}

/// Which audit records a list shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AuditFilter {
    pub occurred_from: Option<Timestamp>,
    pub occurred_to: Option<Timestamp>,
    pub actor_ids: Vec<String>,
    pub request_id: Option<String>,
    pub action: Option<String>,
    /// Beyond the spec's filters: the spec area and the outcome (find the failures).
    pub category: Option<String>,
    pub outcome: Option<String>,
    pub source: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// Case-insensitive prefix match on the identifier fields.
    pub query: Option<String>,
}

/// A text of the caller's making (a path value, an error quoting it) as an audit record can
/// hold it: a NUL becomes U+FFFD, since PostgreSQL keeps none in text or JSON, and a refusal
/// must be recorded whatever the request named.
pub fn storable_text(text: String) -> String {
    if text.contains('\0') { text.replace('\0', "\u{FFFD}") } else { text }
}
