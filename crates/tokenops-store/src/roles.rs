//! Roles, platform and custom: `RoleRecord` and `RoleStore`.

use async_trait::async_trait;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::encode::folded;
use crate::rows::{self, Encode};
use crate::{StoreError, StoreResult, TableWrites, conflict};

/// A role: one of the platform roles (rows shared by every organisation, `tenant_id` `None`,
/// whose grants are fixed in code) or a custom role of one organisation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleRecord {
    pub id: Uuid,
    /// `None` for a platform role.
    pub tenant_id: Option<TenantId>,
    /// As given; unique per organisation case-insensitively, and never a platform role's name.
    pub name: String,
    pub description: String,
    /// Permission names granted (custom roles; empty on platform rows).
    pub permissions: Vec<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The organisation of a custom role; platform roles are never written through the store.
pub fn custom_role_tenant(role: &RoleRecord) -> StoreResult<TenantId> {
    role.tenant_id.ok_or_else(|| StoreError::Backend("only an organisation's custom role can be written".into()))
}

#[async_trait]
pub trait RoleStore: Send + TableWrites {
    /// A custom role. `StoreError::Conflict` when the organisation has a role of that name
    /// (compared case-insensitively), platform names included.
    async fn insert(&mut self, role: &RoleRecord) -> StoreResult<()> {
        self.check_name(role).await?;
        self.insert_row(&rows::ROLES, role.values()?, "role id or name").await
    }
    /// The organisation of custom role `role` about to be written, once no other role it sees
    /// has its name (`Conflict` if one has). Platform rows never change, so checking them first
    /// cannot race; a concurrent custom role of the same name meets the unique index.
    async fn check_name(&mut self, role: &RoleRecord) -> StoreResult<TenantId> {
        let tenant = custom_role_tenant(role)?;
        if self.name_taken(tenant, &folded(&role.name), role.id).await? {
            return Err(conflict("role name"));
        }
        Ok(tenant)
    }
    /// Whether a role the organisation sees (a platform role or its own), other than `except`,
    /// has the folded name: platform names are taken in every organisation, which no unique
    /// index can say.
    async fn name_taken(&mut self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool>;
    /// A platform role, or a custom role of `tenant`.
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>>;
    /// As `get`, locking a custom role's row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>>;
    /// A platform role or a custom role of `tenant`, by name compared case-insensitively.
    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>>;
    /// Replaces name, description, permissions and updated_at of a custom role of `role.tenant_id`.
    /// `StoreError::Conflict` on a name in use.
    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()>;
    /// Deletes a custom role of `tenant`; `false` when there is none.
    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool>;
    /// The platform roles and `tenant`'s custom roles. `sort` columns: name, description,
    /// created_at, updated_at, id; the id is always the last tie-breaker.
    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>>;
    /// How many of `tenant`'s users (whatever their status) and enabled machine clients hold the
    /// role: a disabled client is never enabled again, so it does not keep a role alive.
    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64>;
}
