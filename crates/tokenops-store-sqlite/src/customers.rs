//! Customers on SQLite.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::customer::{CustomerRef, CustomerStatus};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{CustomerStore, StoreResult};

#[async_trait]
impl CustomerStore for SqliteTx {
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
}
