//! Organisations (tenants): `TenantRecord` and `TenantStore`.

use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::rows::{self, Encode};
use crate::{StoreResult, TableWrites};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    /// The user invited as SUPER_ADMIN when the organisation was created.
    pub owner_user_id: Uuid,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait TenantStore: Send + TableWrites {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()> {
        self.insert_row(&rows::TENANTS, tenant.values()?, "organisation id").await
    }
    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>>;
}
