//! Identity and organisation persistence: organisations (tenants), users, roles, approval
//! groups, machine clients and their one-time secret reveals, the embedded provider's signing
//! keys, refresh tokens and sign-in challenge sessions. Secrets are
//! only ever stored hashed (passwords: argon2id PHC strings; opaque tokens: SHA-256 hex) or
//! sealed (signing keys: AES-256-GCM under the master key).

use async_trait::async_trait;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

// ---------------------------------------------------------------------------------------------
// Organisations

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    /// The user invited as SUPER_ADMIN when the organisation was created.
    pub owner_user_id: Uuid,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait TenantStore: Send {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()>;
    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>>;
}

// ---------------------------------------------------------------------------------------------
// Users

/// INVITED until the first password is set; ACTIVE; SUSPENDED by an administrator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UserStatus {
    Invited,
    Active,
    Suspended,
}

impl UserStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Invited => "INVITED",
            UserStatus::Active => "ACTIVE",
            UserStatus::Suspended => "SUSPENDED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "INVITED" => Some(UserStatus::Invited),
            "ACTIVE" => Some(UserStatus::Active),
            "SUSPENDED" => Some(UserStatus::Suspended),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRecord {
    /// The identity provider's `sub`.
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// Lower-cased; unique across all organisations (it is the username).
    pub email: String,
    pub first_name: String,
    pub last_name: String,
    pub status: UserStatus,
    /// A platform role's fixed id, or a custom role of the organisation.
    pub role_id: Uuid,
    /// argon2id PHC string of the chosen password; `None` until the user sets one.
    pub password_hash: Option<String>,
    /// argon2id PHC string of the invitation's temporary password; cleared once used.
    pub temporary_password_hash: Option<String>,
    /// Consecutive failed sign-ins and the lock they caused (brute-force protection).
    pub failed_sign_ins: u32,
    /// When the current window of failed sign-ins began; `None` without failures.
    pub first_failed_sign_in_at: Option<Timestamp>,
    pub locked_until: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct UserFilter {
    /// Case-insensitive prefix on email, first name or last name.
    pub search: Option<String>,
    pub status: Option<UserStatus>,
    pub role_id: Option<Uuid>,
}

#[async_trait]
pub trait UserStore: Send {
    /// `StoreError::Conflict` when the email is registered in any organisation.
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>>;
    /// As `get`, locking the row for the rest of the transaction (`FOR UPDATE` on PostgreSQL;
    /// SQLite's single writer serialises writes anyway): sign-in counters and administrative
    /// changes of one user apply one after the other.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>>;
    /// Not tenant-scoped: the spec's `GET /api/users/{id}` and token subjects.
    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>>;
    /// Sign-in: the email is the username, unique across organisations (`email` lower-cased).
    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>>;
    /// Replaces every mutable field (names, status, role, hashes, lockout, updated_at).
    async fn update(&mut self, user: &UserRecord) -> StoreResult<()>;
    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool>;
    /// `sort` columns come from the endpoint's allow list: email, first_name, last_name, status,
    /// created_at, updated_at, id, role_name (the name of the user's role, from `roles`). The
    /// id is always the last tie-breaker.
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &UserFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>>;
}

// ---------------------------------------------------------------------------------------------
// Machine clients

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineClientRecord {
    /// The OAuth `client_id`, and the `sub` of its tokens.
    pub id: Uuid,
    /// `None` for a platform operator client.
    pub tenant_id: Option<TenantId>,
    pub name: String,
    /// The role it acts with (tenant clients); `None` for operator clients.
    pub role_id: Option<Uuid>,
    /// SHA-256 hex of the secret (256 random bits, so a fast hash is safe).
    pub secret_hash: String,
    pub active: bool,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait MachineClientStore: Send {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()>;
    /// Not tenant-scoped: the token endpoint authenticates any client.
    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>>;
    async fn count_operator_clients(&mut self) -> StoreResult<u64>;
    /// The organisation's clients, oldest first (then by id).
    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>>;
    /// Sets `active` of the organisation's client; `false` when it has no such client.
    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool>;
}

// ---------------------------------------------------------------------------------------------
// One-time reveals of machine-client secrets

/// A client secret waiting to be revealed once through a one-time URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretRevealRecord {
    /// SHA-256 hex of the one-time token carried in the URL.
    pub token_hash: String,
    pub client_id: Uuid,
    /// The secret sealed under the master key (associated data names the client).
    pub sealed_secret: String,
    pub expires_at: Timestamp,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait SecretRevealStore: Send {
    async fn insert(&mut self, reveal: &SecretRevealRecord) -> StoreResult<()>;
    /// Removes and returns the reveal when it exists and has not expired at `now`.
    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>>;
    /// Removes reveals that expired before `now`; returns how many.
    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64>;
}

// ---------------------------------------------------------------------------------------------
// Roles

/// A role: one of the platform roles (rows shared by every organisation, `tenant_id` `None`,
/// whose grants are fixed in code) or a custom role of one organisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRecord {
    pub id: Uuid,
    /// `None` for a platform role.
    pub tenant_id: Option<TenantId>,
    /// As given; unique per organisation case-insensitively, and never a platform role's name.
    pub name: String,
    pub description: String,
    /// Permission names granted (custom roles; empty on platform rows).
    pub permissions: Vec<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait RoleStore: Send {
    /// A custom role. `StoreError::Conflict` when the organisation has a role of that name
    /// (compared case-insensitively), platform names included.
    async fn insert(&mut self, role: &RoleRecord) -> StoreResult<()>;
    /// A platform role, or a custom role of `tenant`.
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>>;
    /// As `get`, locking a custom role's row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>>;
    /// A platform role or a custom role of `tenant`, by name compared case-insensitively.
    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>>;
    /// Replaces name, description, permissions and updated_at of a custom role of `role.tenant_id`.
    /// `StoreError::Conflict` on a name in use.
    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()>;
    /// Deletes a custom role of `tenant`; `false` when there is none.
    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool>;
    /// The platform roles and `tenant`'s custom roles. `sort` columns: name, description,
    /// created_at, updated_at, id; the id is always the last tie-breaker.
    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>>;
    /// How many of `tenant`'s users (whatever their status) and enabled machine clients hold the
    /// role: a disabled client is never enabled again, so it does not keep a role alive.
    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64>;
}

// ---------------------------------------------------------------------------------------------
// Approval groups

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GroupStatus {
    Active,
    Inactive,
}

impl GroupStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            GroupStatus::Active => "ACTIVE",
            GroupStatus::Inactive => "INACTIVE",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ACTIVE" => Some(GroupStatus::Active),
            "INACTIVE" => Some(GroupStatus::Inactive),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// As given; unique per organisation, compared case-insensitively (`#key` in approver
    /// expressions).
    pub key: String,
    pub name: String,
    pub status: GroupStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait GroupStore: Send {
    /// `StoreError::Conflict` when the organisation has a group with that key (case-insensitively).
    async fn insert(&mut self, group: &GroupRecord) -> StoreResult<()>;
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>>;
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>>;
    /// By key, compared case-insensitively.
    async fn find_by_key(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<GroupRecord>>;
    /// Replaces name, status and updated_at.
    async fn update(&mut self, group: &GroupRecord) -> StoreResult<()>;
    /// `sort` columns: key, name, status, created_at, updated_at, id; the id is always the last
    /// tie-breaker.
    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<GroupRecord>>;
    /// `false` when the user is a member already.
    async fn add_member(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        user_id: Uuid,
        now: Timestamp,
    ) -> StoreResult<bool>;
    /// `false` when the user was not a member.
    async fn remove_member(&mut self, tenant: TenantId, group_id: Uuid, user_id: Uuid) -> StoreResult<bool>;
    /// The members, ordered by first name, then last name, then id.
    async fn list_members(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>>;
    /// Ids of the groups the user belongs to, by key.
    async fn groups_of(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<Vec<Uuid>>;
    /// Removes the user from every group of the organisation (the user is being removed).
    async fn remove_user(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<u64>;
}

// ---------------------------------------------------------------------------------------------
// The embedded provider's signing keys

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigningKeyRecord {
    pub kid: String,
    /// The private key sealed under the master key (associated data: the kid).
    pub sealed_key: String,
    pub created_at: Timestamp,
    /// When the key stops being published (set when a newer key takes over).
    pub retire_at: Option<Timestamp>,
}

#[async_trait]
pub trait SigningKeyStore: Send {
    /// Oldest first.
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>>;
    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()>;
    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()>;
    /// Removes keys retired before `cutoff`; returns how many.
    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
}

// ---------------------------------------------------------------------------------------------
// Refresh tokens and challenge sessions (opaque; stored as SHA-256 hex)

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefreshTokenRecord {
    pub token_hash: String,
    pub user_id: Uuid,
    pub tenant_id: TenantId,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait RefreshTokenStore: Send {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()>;
    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>>;
    /// Revokes every live refresh token of the user (suspension, removal); returns how many.
    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64>;
    /// Removes tokens that expired before `cutoff`; returns how many.
    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64>;
}

/// A NEW_PASSWORD_REQUIRED challenge handed out by login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeRecord {
    pub session_hash: String,
    pub user_id: Uuid,
    pub expires_at: Timestamp,
}

#[async_trait]
pub trait ChallengeStore: Send {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()>;
    /// Removes and returns the challenge when it exists and has not expired at `now`.
    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>>;
    /// Removes challenges that expired before `now`; returns how many.
    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64>;
}

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
