//! A token subject's standing (`SubjectStanding`, `Standing`), read by `Store::subject_standing`.

use tokenops_domain::TenantId;
use uuid::Uuid;

/// Where a token's subject stands, as access resolution needs it on every request: the user of
/// the token's organisation with that id, and the machine client with that id (of any
/// organisation, or the platform's), each with what decides its access.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectStanding {
    pub user: Option<Standing>,
    pub client: Option<Standing>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// `None` for a platform operator client.
    pub tenant: Option<TenantId>,
    /// A user that is ACTIVE, a client that is enabled.
    pub active: bool,
    pub role_id: Option<Uuid>,
}
