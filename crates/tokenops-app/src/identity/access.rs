//! Access: who a verified token's subject is to tokenops and what it may do, resolved once per
//! request from the store, so a suspension, removal or role change takes effect at the next
//! request rather than when the token expires.
//!
//! - A user of the token's organisation acts with its role's permissions, and only while
//!   ACTIVE (else 401 `Your access has been revoked.`).
//! - A machine client of the organisation acts with its role's permissions while enabled.
//! - A token without `tenant_id` from an operator client is the platform operator.
//! - A subject tokenops has no record of: with the embedded provider it was removed (401
//!   revoked); with an external provider it acts with the permissions its `scope` claim names
//!   (RFC 9068), the documented way a bank's provider grants them.

use tokenops_domain::TenantId;
use tokenops_domain::permission::{PermissionSet, platform_grants};
use tokenops_domain::role::platform_role;
use tokenops_identity::Claims;
use tokenops_store::{RoleRecord, SubjectStanding, Tx};
use uuid::Uuid;

use crate::App;
use crate::context::{Caller, Principal};
use crate::error::{AppResult, Code, Error};

pub fn access_revoked() -> Error {
    Error::of(Code::AccessRevoked)
}

/// What a custom role's stored permission names grant; names no longer in the catalogue grant
/// nothing.
pub fn grants_of(role: &RoleRecord) -> PermissionSet {
    role.permissions.iter().filter_map(|n| tokenops_domain::permission::Permission::parse(n)).collect()
}

/// What the role `role_id` grants in `tenant`: a platform role's fixed grants, or a custom role's
/// stored ones; nothing when the role is gone.
pub async fn role_grants(tx: &mut dyn Tx, tenant: TenantId, role_id: Uuid) -> AppResult<PermissionSet> {
    if let Some(grants) = platform_role_grants(role_id) {
        return Ok(grants);
    }
    Ok(tx.roles().get(tenant, role_id).await?.map(|r| grants_of(&r)).unwrap_or_default())
}

/// What a platform role grants; `None` for any other role id.
fn platform_role_grants(role_id: Uuid) -> Option<PermissionSet> {
    platform_role(role_id).map(|platform| platform_grants(platform.name).unwrap_or_default())
}

/// Resolves the caller of a verified token. `external_provider`: the token comes from the
/// bank's own provider rather than the embedded one.
pub async fn resolve(app: &App, claims: &Claims, external_provider: bool) -> AppResult<Caller> {
    let caller = |principal, permissions| Caller {
        subject: claims.subject.clone(),
        tenant: claims.tenant,
        principal,
        permissions,
    };
    // One lookup finds whichever the subject is; a subject that is no UUID is neither.
    let (id, standing) = match Uuid::parse_str(&claims.subject) {
        Ok(id) => (Some(id), app.store.subject_standing(claims.tenant, id).await?),
        Err(_) => (None, SubjectStanding::default()),
    };
    let Some(tenant) = claims.tenant else {
        if let (Some(id), Some(client)) = (id, &standing.client)
            && client.tenant.is_none()
        {
            if !client.active {
                return Err(access_revoked());
            }
            return Ok(caller(Principal::Operator(id), PermissionSet::EMPTY));
        }
        if external_provider {
            return Ok(caller(Principal::External, PermissionSet::EMPTY));
        }
        return Err(access_revoked());
    };
    if let Some(id) = id {
        if let Some(user) = &standing.user {
            return Ok(caller(Principal::User(id), member_grants(app, tenant, user.active, user.role_id).await?));
        }
        if let Some(client) = &standing.client
            && client.tenant == Some(tenant)
        {
            return Ok(caller(Principal::Client(id), member_grants(app, tenant, client.active, client.role_id).await?));
        }
    }
    if external_provider {
        let permissions =
            claims.scope.iter().filter_map(|n| tokenops_domain::permission::Permission::parse(n)).collect();
        return Ok(caller(Principal::External, permissions));
    }
    Err(access_revoked())
}

/// What a user or machine client of the organisation may do: its role's grants (none without a
/// role), and only while it is active (401 revoked otherwise).
async fn member_grants(app: &App, tenant: TenantId, active: bool, role_id: Option<Uuid>) -> AppResult<PermissionSet> {
    if !active {
        return Err(access_revoked());
    }
    match role_id {
        Some(role_id) => grants_in(app, tenant, role_id).await,
        None => Ok(PermissionSet::EMPTY),
    }
}

/// `role_grants` for a caller's role: a platform role's need no store; a custom role's are
/// read after the caller's standing (a role changed in between shows at once, as it would at
/// the next request).
async fn grants_in(app: &App, tenant: TenantId, role_id: Uuid) -> AppResult<PermissionSet> {
    if let Some(grants) = platform_role_grants(role_id) {
        return Ok(grants);
    }
    let mut tx = app.store.read().await?;
    role_grants(tx.as_mut(), tenant, role_id).await
}
