//! Customers on PostgreSQL.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, CUSTOMER_COLUMNS};
use tokenops_store::{CustomerFilter, CustomerStore, StoreResult};

fn decode(row: &PgRow) -> StoreResult<Customer> {
    rows::customer(&codec::Cols(row))
}

#[async_trait]
impl CustomerStore for PostgresTx {
    async fn insert(&mut self, customer: &Customer) -> StoreResult<()> {
        // ON CONFLICT keeps the transaction usable after a duplicate (a unique violation would
        // abort it), so callers can go on as they would on SQLite.
        self.insert_new(
            sqlx::query(
                "INSERT INTO customers (id, tenant_id, customer_ref, display_name, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT DO NOTHING",
            )
            .bind(customer.id)
            .bind(customer.tenant_id.as_uuid())
            .bind(customer.customer_ref.as_str())
            .bind(customer.display_name.as_deref())
            .bind(customer.status.as_str())
            .bind(customer.created_at.as_micros())
            .bind(customer.updated_at.as_micros()),
            "customer reference",
        )
        .await
    }

    async fn get(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        self.fetch_by_key(&rows::CUSTOMERS, tenant, customer_ref.as_str(), "", decode).await
    }

    async fn get_for_update(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        self.fetch_by_key(&rows::CUSTOMERS, tenant, customer_ref.as_str(), "FOR UPDATE", decode).await
    }

    async fn set_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: CustomerStatus,
        now: Timestamp,
    ) -> StoreResult<()> {
        self.execute(
            sqlx::query("UPDATE customers SET status = $1, updated_at = $2 WHERE tenant_id = $3 AND customer_ref = $4")
                .bind(status.as_str())
                .bind(now.as_micros())
                .bind(tenant.as_uuid())
                .bind(customer_ref.as_str()),
        )
        .await?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &CustomerFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Customer>> {
        let status = filter.status.map(CustomerStatus::as_str);
        let sql = format!(
            "SELECT {CUSTOMER_COLUMNS} FROM customers WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2)
             ORDER BY created_at ASC, id ASC LIMIT $3 OFFSET $4"
        );
        self.page_where(
            "SELECT COUNT(*) FROM customers WHERE tenant_id = $1 AND ($2::text IS NULL OR status = $2)",
            sql,
            |q| q.bind(tenant.as_uuid()).bind(status),
            page,
            decode,
        )
        .await
    }
}
