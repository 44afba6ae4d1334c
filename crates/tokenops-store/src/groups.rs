//! Approval groups and their members: `GroupRecord` and `GroupStore`.

use async_trait::async_trait;
use tokenops_domain::identity::GroupStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use uuid::Uuid;

use crate::encode::folded;
use crate::keyset::KeyValue;
use crate::rows::Encode;
use crate::sorting::{GROUP_SORT, order_by};
use crate::{StoreResult, TableRows, TableWrites, UserRecord, rows};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    pub id: Uuid,
    pub tenant_id: TenantId,
    /// As given; unique per organisation, compared case-insensitively (`#key` in approver
    /// expressions).
    pub key: String,
    pub name: String,
    pub status: GroupStatus,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait GroupStore: Send + TableRows<GroupRecord> + TableWrites {
    /// `StoreError::Conflict` when the organisation has a group with that key (case-insensitively).
    async fn insert(&mut self, group: &GroupRecord) -> StoreResult<()> {
        self.insert_row(&rows::GROUPS, group.values()?, "group id or key").await
    }
    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        self.row_by_key(tenant, &rows::GROUPS, KeyValue::Id(id), false).await
    }
    /// As `get`, locking the row for the rest of the transaction.
    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        self.row_by_key(tenant, &rows::GROUPS, KeyValue::Id(id), true).await
    }
    /// By key, compared case-insensitively.
    async fn find_by_key(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<GroupRecord>> {
        self.row_by_key(tenant, &rows::GROUPS_BY_KEY, KeyValue::Text(folded(key)), false).await
    }
    /// Replaces name, status and updated_at.
    async fn update(&mut self, group: &GroupRecord) -> StoreResult<()> {
        let set = ["name", "status", "updated_at"];
        let values = vec![
            (&group.name).into(),
            group.status.as_str().into(),
            group.updated_at.into(),
            group.tenant_id.into(),
            group.id.into(),
        ];
        self.update_by_key(&rows::GROUPS, &set, values).await.map(drop)
    }
    /// `sort` columns: key, name, status, created_at, updated_at, id; the id is always the last
    /// tie-breaker.
    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<GroupRecord>> {
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, GROUP_SORT)?;
        self.page_rows(tenant, &rows::GROUPS, Vec::new(), &order, page).await
    }
    /// `false` when the user is a member already.
    async fn add_member(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        user_id: Uuid,
        now: Timestamp,
    ) -> StoreResult<bool>;
    /// `false` when the user was not a member.
    async fn remove_member(&mut self, tenant: TenantId, group_id: Uuid, user_id: Uuid) -> StoreResult<bool>;
    /// The members, ordered by first name, then last name, then id.
    async fn list_members(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>>;
    /// Ids of the groups the user belongs to, by key.
    async fn groups_of(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<Vec<Uuid>>;
    /// Removes the user from every group of the organisation (the user is being removed).
    async fn remove_user(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<u64>;
}
