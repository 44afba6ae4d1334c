//! Customers on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params};
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, CUSTOMER_COLUMNS};
use tokenops_store::{CustomerFilter, CustomerStore, StoreResult};

fn decode(row: &Row<'_>) -> StoreResult<Customer> {
    rows::customer(&codec::Cols(row))
}

#[async_trait]
impl CustomerStore for SqliteTx {
    async fn insert(&mut self, customer: &Customer) -> StoreResult<()> {
        self.execute(
            "INSERT INTO customers (id, tenant_id, customer_ref, display_name, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                codec::id_text(customer.id),
                codec::id_text(customer.tenant_id.as_uuid()),
                customer.customer_ref.as_str(),
                customer.display_name.as_deref(),
                customer.status.as_str(),
                customer.created_at.as_micros(),
                customer.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        self.fetch_by_key(&rows::CUSTOMERS, tenant, customer_ref.as_str(), decode)
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
        self.execute(
            "UPDATE customers SET status = ?1, updated_at = ?2 WHERE tenant_id = ?3 AND customer_ref = ?4",
            params![status.as_str(), now.as_micros(), codec::id_text(tenant.as_uuid()), customer_ref.as_str()],
        )?;
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
        let sql = format!(
            "SELECT {CUSTOMER_COLUMNS} FROM customers WHERE tenant_id = ?1 AND (?2 IS NULL OR status = ?2)
             ORDER BY created_at ASC, id ASC LIMIT ?3 OFFSET ?4"
        );
        self.page_where(
            "SELECT COUNT(*) FROM customers WHERE tenant_id = ?1 AND (?2 IS NULL OR status = ?2)",
            &sql,
            &[&tenant_text, &status],
            page,
            decode,
        )
    }
}
