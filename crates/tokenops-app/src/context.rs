//! Who is acting and on whose behalf: the verified caller with what it may do, and the
//! request's identifiers, passed to every app service.

use tokenops_domain::TenantId;
use tokenops_domain::audit::AuditSource;
use tokenops_domain::permission::{Permission, PermissionSet};
use uuid::Uuid;

use crate::error::{Code, Error};

/// Who the token's subject is to tokenops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Principal {
    /// A user of the organisation (embedded provider, or registered under the external
    /// provider's subject).
    User(Uuid),
    /// A machine client of the organisation.
    Client(Uuid),
    /// A platform operator client (no organisation).
    Operator(Uuid),
    /// A subject the external provider vouches for that tokenops has no record of: it acts
    /// with the permissions its token's `scope` names.
    External,
    /// No one yet: a sign-in or another bootstrap operation.
    Anonymous,
}

/// The verified caller of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's `sub`.
    pub subject: String,
    /// The organisation the token is for; `None` for the platform operator.
    pub tenant: Option<TenantId>,
    pub principal: Principal,
    /// What the caller may do in its organisation.
    pub permissions: PermissionSet,
}

impl Caller {
    /// Someone not signed in (sign-in, activation, secret reveal).
    pub fn anonymous(subject: impl Into<String>, tenant: Option<TenantId>) -> Self {
        Self { subject: subject.into(), tenant, principal: Principal::Anonymous, permissions: PermissionSet::EMPTY }
    }

    /// 403 unless the caller holds `permission`.
    pub fn require(&self, permission: Permission) -> Result<(), Error> {
        if self.permissions.contains(permission) { Ok(()) } else { Err(missing_permission(permission)) }
    }

    /// The user id when the caller is a user.
    pub fn user_id(&self) -> Option<Uuid> {
        match self.principal {
            Principal::User(id) => Some(id),
            _ => None,
        }
    }
}

pub fn missing_permission(permission: Permission) -> Error {
    Error::forbidden(format!("Missing permission: {permission}")).with_code(Code::PermissionDenied)
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
    /// Who made the request, as the audit record says: an HTTP request (`Api`, with its status)
    /// or a background worker acting for the caller (`Worker`: an automation's run).
    pub source: AuditSource,
}
