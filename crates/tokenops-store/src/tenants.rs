//! Organisations (tenants): `TenantRecord` and `TenantStore`.

use async_trait::async_trait;
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;

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
pub trait TenantStore: Send {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()>;
    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>>;
}
