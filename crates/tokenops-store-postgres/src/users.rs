//! Users on PostgreSQL: `UserStore`.

use crate::audit::prefix_regex;
use crate::query::PgQuery;
use crate::{PostgresTx, codec, query};
use async_trait::async_trait;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, USER_COLUMNS};
use tokenops_store::sorting::{USER_SORT, order_by};
use tokenops_store::{StoreResult, UserFilter, UserRecord, UserStore};
use uuid::Uuid;

/// The filter shared by the count and the page: `$1` the tenant, `$2` the status, `$3` the role,
/// `$4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::uuid IS NULL OR role_id = $3)
     AND ($4::text IS NULL OR email ~ $4 OR first_name ~ $4 OR last_name ~ $4)";

/// Binds a user's values in `USER_COLUMNS` order (the email lower-cased): the insert binds them
/// all, the update the columns it may change, each by its place in that list.
fn bind_user<'q>(query: PgQuery<'q>, user: &'q UserRecord) -> PgQuery<'q> {
    query
        .bind(user.id)
        .bind(user.tenant_id.as_uuid())
        .bind(user.email.to_lowercase())
        .bind(&user.first_name)
        .bind(&user.last_name)
        .bind(user.status.as_str())
        .bind(user.role_id)
        .bind(user.password_hash.as_deref())
        .bind(user.temporary_password_hash.as_deref())
        .bind(i64::from(user.failed_sign_ins))
        .bind(user.first_failed_sign_in_at.map(Timestamp::as_micros))
        .bind(user.locked_until.map(Timestamp::as_micros))
        .bind(user.created_at.as_micros())
        .bind(user.updated_at.as_micros())
}

#[async_trait]
impl UserStore for PostgresTx {
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        self.insert_new(bind_user(query::insert(&rows::USERS), user), "user id or email").await
    }

    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id), codec::decoded).await
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(email.to_lowercase()), codec::decoded).await
    }

    async fn update(&mut self, user: &UserRecord) -> StoreResult<()> {
        let query = sqlx::query(
            "UPDATE users SET first_name = $4, last_name = $5, status = $6, role_id = $7, password_hash = $8,
                              temporary_password_hash = $9, failed_sign_ins = $10, first_failed_sign_in_at = $11,
                              locked_until = $12, updated_at = $14
             WHERE tenant_id = $2 AND id = $1",
        );
        self.execute(bind_user(query, user)).await?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        let done = self
            .execute(sqlx::query("DELETE FROM users WHERE tenant_id = $1 AND id = $2").bind(tenant.as_uuid()).bind(id))
            .await?;
        Ok(done == 1)
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &UserFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let status = filter.status.map(UserStatus::as_str);
        let pattern = filter.search.as_deref().map(prefix_regex);
        let count_sql = format!("SELECT COUNT(*) AS total FROM users WHERE {USER_FILTER}");
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, USER_SORT)?;
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {order} LIMIT $5 OFFSET $6");
        self.page_where(
            count_sql,
            sql,
            |q| q.bind(tenant.as_uuid()).bind(status).bind(filter.role_id).bind(pattern.as_deref()),
            page,
            codec::decoded,
        )
        .await
    }
}
