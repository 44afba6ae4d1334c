//! Roles on PostgreSQL: `RoleStore`.
//!
//! Role names are compared ignoring case through a folded copy stored beside them
//! (`codec::folded`), which carries the uniqueness. Renaming a role, the one update that can
//! violate a unique index, runs under a savepoint.

use crate::clause::{Pg, bind_values};
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::Postgres;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_store::conditions::Dialect;
use tokenops_store::rows::{self, Encode, ROLE_COLUMNS, ROLE_UPDATE_COLUMNS};
use tokenops_store::sorting::{ROLE_SORT, order_by};
use tokenops_store::{RoleRecord, RoleStore, StoreResult};
use uuid::Uuid;

/// The roles an organisation sees, `$1` the tenant: the platform rows (NULL tenant) and its own.
const ROLE_SCOPE: &str = "(tenant_id = $1 OR tenant_id IS NULL)";

impl PostgresTx {
    /// The role matching `condition`, in which `$1` is the tenant and `$2` the value.
    async fn fetch_role<T>(&mut self, condition: &str, tenant: TenantId, value: T) -> StoreResult<Option<RoleRecord>>
    where
        T: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send + 'static,
    {
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {condition}");
        self.fetch_optional(sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(value), codec::decoded)
            .await
    }
}

#[async_trait]
impl RoleStore for PostgresTx {
    async fn name_taken(&mut self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool> {
        let sql = format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE} AND name_folded = $2 AND id <> $3");
        let count: i64 = self
            .scalar(sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).bind(tenant.as_uuid()).bind(name_folded).bind(except))
            .await?;
        Ok(count > 0)
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(&format!("{ROLE_SCOPE} AND id = $2"), tenant, id).await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        // Only a custom role is locked: platform rows never change, and every organisation reads
        // them.
        let custom = self.fetch_role("tenant_id = $1 AND id = $2 FOR UPDATE", tenant, id).await?;
        match custom {
            Some(role) => Ok(Some(role)),
            None => RoleStore::get(self, tenant, id).await,
        }
    }

    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(&format!("{ROLE_SCOPE} AND name_folded = $2"), tenant, codec::folded(name)).await
    }

    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()> {
        self.check_name(role).await?;
        let values = rows::ROLES.update_values(&role.values()?, &ROLE_UPDATE_COLUMNS)?;
        // A concurrent role of the same name can still meet the unique index here. Under a
        // savepoint, that violation leaves the transaction usable, as it does on SQLite.
        self.flush().await?;
        let mut savepoint = sqlx::Acquire::begin(&mut self.tx).await.map_err(codec::backend)?;
        let sql = rows::ROLES.update_sql(Pg::SIGIL, &ROLE_UPDATE_COLUMNS);
        let outcome = bind_values(sqlx::query(sqlx::AssertSqlSafe(sql)), values).execute(&mut *savepoint).await;
        match outcome {
            Ok(_) => savepoint.commit().await.map_err(codec::backend),
            Err(error) => {
                savepoint.rollback().await.map_err(codec::backend)?;
                Err(codec::backend(error))
            }
        }
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        // `tenant_id = $1` never matches a platform row (NULL).
        let done = self
            .execute(sqlx::query("DELETE FROM roles WHERE tenant_id = $1 AND id = $2").bind(tenant.as_uuid()).bind(id))
            .await?;
        Ok(done == 1)
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>> {
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, ROLE_SORT)?;
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} ORDER BY {order} LIMIT $2 OFFSET $3");
        self.page_where(
            format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE}"),
            sql,
            |q| q.bind(tenant.as_uuid()),
            page,
            codec::decoded,
        )
        .await
    }

    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64> {
        let count: i64 = self
            .scalar(
                sqlx::query_scalar(
                    "SELECT (SELECT COUNT(*) FROM users WHERE tenant_id = $1 AND role_id = $2)
                  + (SELECT COUNT(*) FROM machine_clients WHERE tenant_id = $1 AND role_id = $2 AND active)",
                )
                .bind(tenant.as_uuid())
                .bind(role_id),
            )
            .await?;
        Ok(codec::count(count))
    }
}
