//! Users of an organisation: `UserRecord`, `UserFilter` and `UserStore`.

use async_trait::async_trait;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::{StoreResult, TableRows, TableWrites, rows};

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
pub trait UserStore: Send + TableRows<UserRecord> + TableWrites {
    /// `StoreError::Conflict` when the email is registered in any organisation.
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        self.insert_row(&rows::USERS, user.values()?, "user id or email").await
    }
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.row_by_key(tenant, &rows::USERS, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction (`FOR UPDATE` on PostgreSQL;
    /// SQLite's single writer serialises writes anyway): sign-in counters and administrative
    /// changes of one user apply one after the other.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.row_by_key(tenant, &rows::USERS, KeyValue::Id(id), true).await
    }
    /// Not tenant-scoped: the spec's `GET /api/users/{id}` and token subjects.
    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>>;
    /// Sign-in: the email is the username, unique across organisations (`email` lower-cased).
    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>>;
    /// Replaces every mutable field (names, status, role, hashes, lockout, updated_at).
    async fn update(&mut self, user: &UserRecord) -> StoreResult<()> {
        let set = [
            "first_name",
            "last_name",
            "status",
            "role_id",
            "password_hash",
            "temporary_password_hash",
            "failed_sign_ins",
            "first_failed_sign_in_at",
            "locked_until",
            "updated_at",
        ];
        self.update_row(&rows::USERS, user.values()?, &set).await.map(drop)
    }
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
