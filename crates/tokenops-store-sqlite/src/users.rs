//! Users on SQLite: `UserStore`.

use crate::audit::prefix_glob;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{params, params_from_iter};
use tokenops_domain::TenantId;
use tokenops_domain::identity::UserStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::USER_COLUMNS;
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

#[async_trait]
impl UserStore for SqliteTx {
    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("id = ?1", &[codec::id_text(id)])
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("email = ?1", &[email.to_lowercase()])
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
