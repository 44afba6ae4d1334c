//! Customers on PostgreSQL.

use crate::PostgresTx;
use async_trait::async_trait;
use tokenops_domain::customer::{CustomerRef, CustomerStatus};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{CustomerStore, StoreResult};

#[async_trait]
impl CustomerStore for PostgresTx {
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
