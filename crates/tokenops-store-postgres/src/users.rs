//! Users on PostgreSQL: `UserStore`.

use crate::audit::prefix_regex;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::USER_COLUMNS;
use tokenops_store::sorting::{USER_SORT, order_by};
use tokenops_store::{StoreResult, UserFilter, UserRecord, UserStore};
use uuid::Uuid;

/// The filter shared by the count and the page: `$1` the tenant, `$2` the status, `$3` the role,
/// `$4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::uuid IS NULL OR role_id = $3)
     AND ($4::text IS NULL OR email ~ $4 OR first_name ~ $4 OR last_name ~ $4)";

#[async_trait]
impl UserStore for PostgresTx {
    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id), codec::decoded).await
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(email.to_lowercase()), codec::decoded).await
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
