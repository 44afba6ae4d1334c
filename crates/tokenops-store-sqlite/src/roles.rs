//! Roles on SQLite: `RoleStore`.
//!
//! Role names are compared ignoring case through a folded copy stored beside them
//! (`codec::folded`), which carries the uniqueness.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::rows::ROLE_COLUMNS;
use tokenops_store::sorting::{ROLE_SORT, order_by};
use tokenops_store::{RoleRecord, RoleStore, StoreError, StoreResult};
use uuid::Uuid;

/// The roles an organisation sees, `?1` the tenant: the platform rows (NULL tenant) and its own.
const ROLE_SCOPE: &str = "(tenant_id = ?1 OR tenant_id IS NULL)";

/// The organisation of a custom role; platform roles are never written through the store.
fn custom_role_tenant(role: &RoleRecord) -> StoreResult<TenantId> {
    role.tenant_id.ok_or_else(|| StoreError::Backend("only an organisation's custom role can be written".into()))
}

fn role_name_conflict() -> StoreError {
    StoreError::Conflict("role name already exists".to_owned())
}

impl SqliteTx {
    fn fetch_role(&self, tenant: TenantId, condition: &str, value: String) -> StoreResult<Option<RoleRecord>> {
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} AND {condition}");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), value], codec::decoded)
    }

    /// Whether a role the organisation sees, other than `except`, has the folded name: platform
    /// names are taken in every organisation, which no unique index can say.
    fn role_name_taken(&self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool> {
        let sql = format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE} AND name_folded = ?2 AND id <> ?3");
        let count: i64 =
            self.scalar(&sql, params![codec::id_text(tenant.as_uuid()), name_folded, codec::id_text(except)])?;
        Ok(count > 0)
    }
}

#[async_trait]
impl RoleStore for SqliteTx {
    async fn insert(&mut self, role: &RoleRecord) -> StoreResult<()> {
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        if self.role_name_taken(tenant, &name_folded, role.id)? {
            return Err(role_name_conflict());
        }
        self.execute(
            "INSERT INTO roles (id, tenant_id, name, name_folded, description, permissions, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                codec::id_text(role.id),
                codec::id_text(tenant.as_uuid()),
                &role.name,
                &name_folded,
                &role.description,
                codec::names_text(&role.permissions),
                role.created_at.as_micros(),
                role.updated_at.as_micros(),
            ],
        )?;
        Ok(())
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
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        if self.role_name_taken(tenant, &name_folded, role.id)? {
            return Err(role_name_conflict());
        }
        self.execute(
            "UPDATE roles SET name = ?1, name_folded = ?2, description = ?3, permissions = ?4, updated_at = ?5
             WHERE tenant_id = ?6 AND id = ?7",
            params![
                &role.name,
                &name_folded,
                &role.description,
                codec::names_text(&role.permissions),
                role.updated_at.as_micros(),
                codec::id_text(tenant.as_uuid()),
                codec::id_text(role.id),
            ],
        )?;
        Ok(())
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
