//! Customers on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{CustomerFilter, CustomerStore, StoreError, StoreResult};

const COLUMNS: &str = "id, tenant_id, customer_ref, display_name, status, created_at, updated_at";

fn decode(row: &SqliteRow) -> StoreResult<Customer> {
    let status: String = row.try_get("status").map_err(codec::backend)?;
    Ok(Customer {
        id: codec::uuid(row.try_get("id").map_err(codec::backend)?)?,
        tenant_id: codec::tenant(row.try_get("tenant_id").map_err(codec::backend)?)?,
        customer_ref: CustomerRef::from_stored(row.try_get("customer_ref").map_err(codec::backend)?),
        display_name: row.try_get("display_name").map_err(codec::backend)?,
        status: CustomerStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("customer status {status:?}")))?,
        created_at: codec::ts(row.try_get("created_at").map_err(codec::backend)?),
        updated_at: codec::ts(row.try_get("updated_at").map_err(codec::backend)?),
    })
}

#[async_trait]
impl CustomerStore for SqliteTx {
    async fn insert(&mut self, customer: &Customer) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO customers (id, tenant_id, customer_ref, display_name, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(codec::id_text(customer.id))
        .bind(codec::id_text(customer.tenant_id.as_uuid()))
        .bind(customer.customer_ref.as_str())
        .bind(customer.display_name.as_deref())
        .bind(customer.status.as_str())
        .bind(customer.created_at.as_micros())
        .bind(customer.updated_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        let sql = format!("SELECT {COLUMNS} FROM customers WHERE tenant_id = $1 AND customer_ref = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(customer_ref.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode).transpose()
    }

    async fn get_for_update(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a customer for update")?;
        CustomerStore::get(self, tenant, customer_ref).await
    }

    async fn set_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: CustomerStatus,
        now: Timestamp,
    ) -> StoreResult<()> {
        sqlx::query("UPDATE customers SET status = $1, updated_at = $2 WHERE tenant_id = $3 AND customer_ref = $4")
            .bind(status.as_str())
            .bind(now.as_micros())
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(customer_ref.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &CustomerFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Customer>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let status = filter.status.map(CustomerStatus::as_str);
        let total: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM customers WHERE tenant_id = $1 AND ($2 IS NULL OR status = $2)")
                .bind(&tenant_text)
                .bind(status)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {COLUMNS} FROM customers WHERE tenant_id = $1 AND ($2 IS NULL OR status = $2)
             ORDER BY created_at ASC, id ASC LIMIT $3 OFFSET $4"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&tenant_text)
            .bind(status)
            .bind(i64::from(page.size))
            .bind(i64::try_from(page.offset()).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }
}
