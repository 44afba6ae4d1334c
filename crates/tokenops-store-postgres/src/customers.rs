//! Customers on PostgreSQL.

use crate::{PostgresTx, query};
use async_trait::async_trait;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows;
use tokenops_store::{CustomerStore, StoreResult};

#[async_trait]
impl CustomerStore for PostgresTx {
    async fn insert(&mut self, customer: &Customer) -> StoreResult<()> {
        // ON CONFLICT keeps the transaction usable after a duplicate (a unique violation would
        // abort it), so callers can go on as they would on SQLite.
        self.insert_new(
            query::insert(&rows::CUSTOMERS)
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
}
