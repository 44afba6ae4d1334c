//! Users of an organisation: invitation (the spec's rules 1–3, mailed with a temporary
//! password), reads and the list, role changes, suspension and reactivation, and removal. An
//! administrator acts on a user only with the permission that handing out the user's role
//! needs, so an ADMIN cannot suspend a SUPER_ADMIN; nobody changes or removes themselves or the
//! organisation's owner.

use serde::Serialize;
use std::collections::HashMap;
use std::sync::Arc;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::permission::Permission;
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::Store;
use tokenops_store::{Tx, UserFilter, UserRecord};
use uuid::Uuid;

use super::access::{access_revoked, role_grants};
use super::organisations::{Invitee, TemporaryPassword, invite};
use super::roles::{Role, role_by_id, role_name_or_user, role_named, role_not_found};
use crate::context::Principal;
use crate::error::{AppResult, Code, Error};
use crate::write::{AuditAction, AuditResource, Write};

const USER: AuditResource = AuditResource { category: "ORGANISATION", resource_type: "user" };
pub const INVITE: AuditAction = USER.action("user.invite");
pub const UPDATE: AuditAction = USER.action("user.update");
pub const REMOVE: AuditAction = USER.action("user.remove");

/// A user as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserOut {
    /// The identity provider's `sub`.
    pub id: Uuid,
    pub tenant_id: Uuid,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    /// INVITED, ACTIVE or SUSPENDED.
    #[schema(example = "ACTIVE")]
    pub status: &'static str,
    /// The role's name.
    pub role: String,
    pub role_id: Uuid,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

/// A user as role holders and group members are listed.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSummary {
    pub id: Uuid,
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub status: &'static str,
}

impl From<&UserRecord> for UserSummary {
    fn from(u: &UserRecord) -> Self {
        Self {
            id: u.id,
            email: u.email.clone(),
            first_name: u.first_name.clone(),
            last_name: u.last_name.clone(),
            status: u.status.as_str(),
        }
    }
}

fn out(u: &UserRecord, role_name: String) -> UserOut {
    UserOut {
        id: u.id,
        tenant_id: u.tenant_id.as_uuid(),
        email: u.email.clone(),
        first_name: u.first_name.clone(),
        last_name: u.last_name.clone(),
        status: u.status.as_str(),
        role: role_name,
        role_id: u.role_id,
        created_at: u.created_at,
        updated_at: u.updated_at,
    }
}

/// The users with their role names (one lookup per distinct role).
async fn with_role_names(tx: &mut dyn Tx, users: &[UserRecord]) -> AppResult<Vec<UserOut>> {
    let mut names: HashMap<Uuid, String> = HashMap::new();
    let mut result = Vec::with_capacity(users.len());
    for u in users {
        let name = match names.get(&u.role_id) {
            Some(name) => name.clone(),
            None => {
                let name = role_by_id(tx, u.tenant_id, u.role_id)
                    .await?
                    .map(|r| r.record.name)
                    .unwrap_or_else(|| u.role_id.to_string());
                names.insert(u.role_id, name.clone());
                name
            }
        };
        result.push(out(u, name));
    }
    Ok(result)
}

pub fn user_not_found(id: Uuid) -> Error {
    Error::not_found(format!("User {id} not found")).with_code(Code::UserNotFound)
}

/// An invitation as the spec describes it; `tenantId` in the body is ignored. Its body is "not
/// validated up front; email uniqueness, role lookup and the identity provider decide": the
/// route reads the invitee's fields, but what it found wrong with them is answered only where
/// the identity provider creates the account, after the role lookup and the permission check.
#[derive(Debug)]
pub struct Invitation {
    /// The account the identity provider is to create, or its 400 (email missing or not an
    /// address, a name too long).
    pub invitee: Result<InviteeFields, Error>,
    pub role_name: Option<String>,
}

/// The invitee's own fields, as read from the body.
#[derive(Debug, Clone)]
pub struct InviteeFields {
    pub email: String,
    pub first_name: String,
    pub last_name: String,
}

/// What may be changed on a user; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct UserChange {
    pub role_name: Option<String>,
    /// ACTIVE or SUSPENDED.
    pub status: Option<UserStatus>,
}

/// Search, status and role filters of the user list (the role by name).
#[derive(Debug, Clone, Default)]
pub struct UserQuery {
    pub search: Option<String>,
    pub status: Option<UserStatus>,
    pub role_name: Option<String>,
}

pub struct Users {
    store: Arc<dyn Store>,
}

impl Users {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

impl Users {
    /// Invites a user into the caller's organisation (rules 1–3): the role is USER unless named
    /// (404 unless it exists); the caller needs the role's creation permission (403); then the
    /// identity provider creates the account: 400 for the invitee's fields found wrong, 409 for
    /// an email registered in any organisation. The user starts INVITED and is mailed a
    /// temporary password.
    pub async fn invite(
        &self,
        w: &mut Write,
        sealer: &tokenops_identity::Sealer,
        sign_in_url: &str,
        new: Invitation,
        temporary: TemporaryPassword,
    ) -> AppResult<UserOut> {
        let tenant = w.tenant()?;
        let role_name = role_name_or_user(new.role_name.as_deref());
        let role = role_named(w.tx(), tenant, role_name).await?.ok_or_else(|| role_not_found(role_name))?;
        role.check_assignable_by(&w.context().caller)?;
        // The identity provider's part: it refuses an account it cannot create (a well-formed
        // email cannot be taken already, so this goes before the uniqueness check unseen).
        let fields = new.invitee?;
        let organisation =
            w.tx().tenants().get(tenant).await?.map(|t| t.name).unwrap_or_else(|| "your organisation".to_owned());
        let invitee = Invitee {
            id: new_id(),
            tenant,
            email: fields.email,
            first_name: fields.first_name,
            last_name: fields.last_name,
            role_id: role.record.id,
        };
        let user = invite(w, sealer, sign_in_url, invitee, &organisation, temporary).await?;
        let view = out(&user, role.record.name.clone());
        w.set_resource_id(user.id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": view }));
        Ok(view)
    }

    pub async fn get(&self, tenant: TenantId, id: Uuid) -> AppResult<UserOut> {
        let mut tx = self.store.read().await?;
        let user = tx.users().get(tenant, id).await?.ok_or_else(|| user_not_found(id))?;
        Ok(with_role_names(tx.as_mut(), std::slice::from_ref(&user)).await?.remove(0))
    }

    /// `GET /api/users/{id}`: not tenant-scoped (the spec's user-by-id lookup).
    pub async fn get_any(&self, id: Uuid) -> AppResult<UserOut> {
        let mut tx = self.store.read().await?;
        let user = tx.users().get_any(id).await?.ok_or_else(|| user_not_found(id))?;
        Ok(with_role_names(tx.as_mut(), std::slice::from_ref(&user)).await?.remove(0))
    }

    /// The caller's own profile; a machine client or an external subject has none (404).
    pub async fn own_profile(&self, tenant: TenantId, principal: Principal) -> AppResult<UserOut> {
        match principal {
            Principal::User(id) => self.get(tenant, id).await,
            _ => Err(Error::not_found(
                "The caller is not a user of the organisation (a machine client or an external subject)",
            )
            .with_code(Code::UserNotFound)),
        }
    }

    /// One page of the organisation's users. An unknown role name is a 400.
    pub async fn list(
        &self,
        tenant: TenantId,
        query: UserQuery,
        sort: &[SortKey],
        page: PageRequest,
    ) -> AppResult<Page<UserOut>> {
        let mut tx = self.store.read().await?;
        let role_id = match query.role_name.as_deref() {
            None => None,
            Some(name) => Some(
                tx.roles()
                    .find_by_name(tenant, name)
                    .await?
                    .ok_or_else(|| Error::invalid_field("role", format!("names no role of the organisation: {name}")))?
                    .id,
            ),
        };
        let filter = UserFilter { search: query.search, status: query.status, role_id };
        let users = tx.users().list(tenant, &filter, sort, page).await?;
        Ok(Page { items: with_role_names(tx.as_mut(), &users.items).await?, total: users.total })
    }

    /// Changes a user's role and/or status. Suspension revokes the user's refresh tokens and,
    /// through access resolution, every access token at its next use. Reactivating a user who
    /// never set a password makes them INVITED again.
    pub async fn update(&self, w: &mut Write, id: Uuid, change: UserChange) -> AppResult<UserOut> {
        let tenant = w.tenant()?;
        let (mut user, current_role) = self.target(w, tenant, id, Permission::UserUpdate).await?;
        let before = out(&user, current_role.record.name.clone());
        let unchanged = (user.role_id, user.status);
        let mut role_name = current_role.record.name.clone();
        if let Some(name) = change.role_name.as_deref() {
            let name = role_name_or_user(Some(name));
            let role = role_named(w.tx(), tenant, name).await?.ok_or_else(|| role_not_found(name))?;
            role.check_assignable_by(&w.context().caller)?;
            user.role_id = role.record.id;
            role_name = role.record.name;
        }
        if let Some(status) = change.status {
            user.status = match (user.status, status) {
                (current, UserStatus::Suspended) => {
                    if current != UserStatus::Suspended {
                        let now = w.now();
                        w.tx().refresh_tokens().revoke_for_user(user.id, now).await?;
                    }
                    UserStatus::Suspended
                }
                (UserStatus::Suspended, UserStatus::Active) if user.password_hash.is_none() => UserStatus::Invited,
                (UserStatus::Suspended | UserStatus::Active, UserStatus::Active) => UserStatus::Active,
                (UserStatus::Invited, UserStatus::Active) => {
                    return Err(Error::conflict(
                        "An invited user becomes ACTIVE by choosing a password (activate or new-password)",
                    )
                    .with_code(Code::UserNotActivated));
                }
                (_, UserStatus::Invited) => {
                    return Err(Error::invalid_field("status", "must be ACTIVE or SUSPENDED"));
                }
            };
        }
        // A change to what the user already is (SUSPENDED again) moves nothing, updatedAt neither.
        if (user.role_id, user.status) != unchanged {
            user.updated_at = w.now();
            w.tx().users().update(&user).await?;
        }
        let after = out(&user, role_name);
        w.set_audit_detail(serde_json::json!({ "before": before, "after": after }));
        Ok(after)
    }

    /// Removes a user from the organisation: the user, its group memberships and its refresh
    /// tokens go; its access tokens are refused from the next request (`Your access has been
    /// revoked.`). The email may be invited again.
    pub async fn remove(&self, w: &mut Write, id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        let (user, role) = self.target(w, tenant, id, Permission::MemberRemove).await?;
        let now = w.now();
        w.tx().groups().remove_user(tenant, id).await?;
        w.tx().refresh_tokens().revoke_for_user(id, now).await?;
        w.tx().users().delete(tenant, id).await?;
        w.set_audit_detail(serde_json::json!({ "before": out(&user, role.record.name.clone()) }));
        Ok(())
    }

    /// The user an administrator acts on, locked for the write: 404 when absent; 400 for the
    /// caller themselves or the owner; 403 without `needed` (the route's permission, checked
    /// again against the caller as locked) or the permission the user's role needs.
    async fn target(
        &self,
        w: &mut Write,
        tenant: TenantId,
        id: Uuid,
        needed: Permission,
    ) -> AppResult<(UserRecord, Role)> {
        w.set_resource_id(id.to_string());
        if w.context().caller.user_id() == Some(id) {
            return Err(Error::of(Code::SelfChange));
        }
        let user = lock_with_caller(w, tenant, id).await?;
        w.context().caller.require(needed)?;
        let owner = w.tx().tenants().get(tenant).await?.map(|t| t.owner_user_id);
        if owner == Some(id) {
            return Err(Error::of(Code::OwnerChange));
        }
        let role = role_by_id(w.tx(), tenant, user.role_id)
            .await?
            .ok_or_else(|| Error::internal(format!("user {id} holds a role that does not exist")))?;
        role.check_actionable_by(&w.context().caller)?;
        Ok((user, role))
    }
}

/// Locks the user `id` and, when a user calls, the caller's own record too, in id order (two
/// administrators acting on each other at once then wait for one another instead of
/// deadlocking), and holds the caller to its record as locked: a caller suspended, removed or
/// given a lesser role by a write that committed while this request ran is refused (401 or 403)
/// as its next request would be. Without it two administrators suspending or demoting each
/// other at once both succeeded (a race probe saw it in three rounds of four on PostgreSQL).
async fn lock_with_caller(w: &mut Write, tenant: TenantId, id: Uuid) -> AppResult<UserRecord> {
    let caller = w.context().caller.user_id();
    let mut ids: Vec<Uuid> = std::iter::once(id).chain(caller).collect();
    ids.sort();
    let mut target = None;
    for each in ids {
        let row = w.tx().users().get_for_update(tenant, each).await?;
        if each == id {
            target = row;
            continue;
        }
        let me = row.filter(|me| me.status == UserStatus::Active).ok_or_else(access_revoked)?;
        let grants = role_grants(w.tx(), tenant, me.role_id).await?;
        w.hold_caller_to(grants);
    }
    target.ok_or_else(|| user_not_found(id))
}
