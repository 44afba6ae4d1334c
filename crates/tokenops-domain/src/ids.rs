//! Identifiers: every identifier the service mints is a UUIDv7 (time-ordered), and the tenant
//! has a newtype so that store calls cannot confuse it with another id.

use serde::{Deserialize, Serialize};
use std::fmt;
use uuid::Uuid;

/// Mints a new time-ordered identifier.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// A UUID as the API writes one, 8-4-4-4-12 hex digits (either case): the braced, `urn:uuid:`
/// and undashed spellings the parser would also take are refused, so one resource has one id.
pub fn canonical_uuid(value: &str) -> Option<Uuid> {
    (value.len() == 36).then(|| Uuid::parse_str(value).ok()).flatten()
}

/// The organisation (tenant) a request acts for. Store calls that touch tenant data take it first.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TenantId(pub Uuid);

impl TenantId {
    pub fn as_uuid(self) -> Uuid {
        self.0
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({})", self.0)
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
