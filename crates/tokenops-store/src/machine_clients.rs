//! Machine clients: `MachineClientRecord` and `MachineClientStore`.

use async_trait::async_trait;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::StoreResult;
use crate::rows::{self, Encode};
use crate::sorting::CREATED_ORDER;
use crate::{TableRows, TableWrites};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineClientRecord {
    /// The OAuth `client_id`, and the `sub` of its tokens.
    pub id: Uuid,
    /// `None` for a platform operator client.
    pub tenant_id: Option<TenantId>,
    pub name: String,
    /// The role it acts with (tenant clients); `None` for operator clients.
    pub role_id: Option<Uuid>,
    /// SHA-256 hex of the secret (256 random bits, so a fast hash is safe).
    pub secret_hash: String,
    pub active: bool,
    pub created_at: Timestamp,
}

#[async_trait]
pub trait MachineClientStore: Send + TableRows<MachineClientRecord> + TableWrites {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        self.insert_row(&rows::MACHINE_CLIENTS, client.values()?, "machine client id").await
    }
    /// Not tenant-scoped: the token endpoint authenticates any client.
    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>>;
    async fn count_operator_clients(&mut self) -> StoreResult<u64>;
    /// The organisation's clients, oldest first (then by id).
    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>> {
        self.page_rows(tenant, &rows::MACHINE_CLIENTS, Vec::new(), CREATED_ORDER, page).await
    }
    /// Sets `active` of the organisation's client; `false` when it has no such client.
    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let changed = self
            .update_by_key(&rows::MACHINE_CLIENTS, &["active"], vec![active.into(), tenant.into(), id.into()])
            .await?;
        Ok(changed == 1)
    }
}
