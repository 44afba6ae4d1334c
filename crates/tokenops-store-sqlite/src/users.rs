//! Users on SQLite: `UserStore`.

use crate::audit::prefix_glob;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Params, params, params_from_iter};
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, USER_COLUMNS};
use tokenops_store::sorting::{USER_SORT, order_by};
use tokenops_store::{StoreResult, UserFilter, UserRecord, UserStore};
use uuid::Uuid;

/// The filter shared by the count and the page: `?1` the tenant, `?2` the status, `?3` the role,
/// `?4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR role_id = ?3)
     AND (?4 IS NULL OR email GLOB ?4 OR first_name GLOB ?4 OR last_name GLOB ?4)";

impl SqliteTx {
    fn fetch_user(&self, condition: &str, binds: &[String]) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {condition}");
        self.fetch_optional(&sql, params_from_iter(binds), codec::decoded)
    }
}

/// A user's values in `USER_COLUMNS` order (the email lower-cased): the insert binds them all,
/// the update the columns it may change, each by its place in that list.
fn user_values(user: &UserRecord) -> impl Params + '_ {
    (
        codec::id_text(user.id),
        codec::id_text(user.tenant_id.as_uuid()),
        user.email.to_lowercase(),
        &user.first_name,
        &user.last_name,
        user.status.as_str(),
        codec::id_text(user.role_id),
        user.password_hash.as_deref(),
        user.temporary_password_hash.as_deref(),
        i64::from(user.failed_sign_ins),
        user.first_failed_sign_in_at.map(Timestamp::as_micros),
        user.locked_until.map(Timestamp::as_micros),
        user.created_at.as_micros(),
        user.updated_at.as_micros(),
    )
}

#[async_trait]
impl UserStore for SqliteTx {
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        self.insert_row(&rows::USERS, user_values(user))
    }

    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("id = ?1", &[codec::id_text(id)])
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("email = ?1", &[email.to_lowercase()])
    }

    async fn update(&mut self, user: &UserRecord) -> StoreResult<()> {
        self.execute(
            "UPDATE users SET first_name = ?4, last_name = ?5, status = ?6, role_id = ?7, password_hash = ?8,
                              temporary_password_hash = ?9, failed_sign_ins = ?10, first_failed_sign_in_at = ?11,
                              locked_until = ?12, updated_at = ?14
             WHERE tenant_id = ?2 AND id = ?1",
            user_values(user),
        )?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        let done = self.execute(
            "DELETE FROM users WHERE tenant_id = ?1 AND id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &UserFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let status = filter.status.map(UserStatus::as_str);
        let role = filter.role_id.map(codec::id_text);
        let pattern = filter.search.as_deref().map(prefix_glob);
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, USER_SORT)?;
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {order} LIMIT ?5 OFFSET ?6");
        self.page_where(
            &format!("SELECT COUNT(*) FROM users WHERE {USER_FILTER}"),
            &sql,
            &[&tenant_text, &status, &role.as_deref(), &pattern.as_deref()],
            page,
            codec::decoded,
        )
    }
}
