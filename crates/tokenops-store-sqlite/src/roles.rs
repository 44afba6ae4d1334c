//! Roles on SQLite: `RoleStore`.
//!
//! Role names are compared ignoring case through a folded copy stored beside them
//! (`codec::folded`), which carries the uniqueness.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::{self, Encode, ROLE_COLUMNS, ROLE_UPDATE_COLUMNS};
use tokenops_store::sorting::{ROLE_SORT, order_by};
use tokenops_store::{RoleRecord, RoleStore, StoreResult, TableWrites};
use uuid::Uuid;

/// The roles an organisation sees, `?1` the tenant: the platform rows (NULL tenant) and its own.
const ROLE_SCOPE: &str = "(tenant_id = ?1 OR tenant_id IS NULL)";

impl SqliteTx {
    fn fetch_role(&self, tenant: TenantId, condition: &str, value: String) -> StoreResult<Option<RoleRecord>> {
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} AND {condition}");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), value], codec::decoded)
    }
}

#[async_trait]
impl RoleStore for SqliteTx {
    async fn name_taken(&mut self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool> {
        let sql = format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE} AND name_folded = ?2 AND id <> ?3");
        let count: i64 =
            self.scalar(&sql, params![codec::id_text(tenant.as_uuid()), name_folded, codec::id_text(except)])?;
        Ok(count > 0)
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(tenant, "id = ?2", codec::id_text(id))
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a role for update")?;
        RoleStore::get(self, tenant, id).await
    }

    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(tenant, "name_folded = ?2", codec::folded(name))
    }

    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()> {
        self.check_name(role).await?;
        self.update_row(&rows::ROLES, role.values()?, &ROLE_UPDATE_COLUMNS).await.map(drop)
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        // `tenant_id = ?1` never matches a platform row (NULL).
        let done = self.execute(
            "DELETE FROM roles WHERE tenant_id = ?1 AND id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, ROLE_SORT)?;
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} ORDER BY {order} LIMIT ?2 OFFSET ?3");
        self.page_where(
            &format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE}"),
            &sql,
            &[&tenant_text],
            page,
            codec::decoded,
        )
    }

    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64> {
        let count: i64 = self.scalar(
            "SELECT (SELECT COUNT(*) FROM users WHERE tenant_id = ?1 AND role_id = ?2)
                  + (SELECT COUNT(*) FROM machine_clients WHERE tenant_id = ?1 AND role_id = ?2 AND active = 1)",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(role_id)],
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}
