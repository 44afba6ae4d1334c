//! Approval groups: create (key unique per organisation, 409), rename, deactivate and
//! reactivate, members added and removed, and the group with one page of its members. A
//! deactivated group is refused (409) wherever it would be used: adding members here, and as an
//! approver (`#key`) when approvals resolve it.

use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::identity::GroupStatus;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::Store;
use tokenops_store::{GroupRecord, Tx};
use uuid::Uuid;

use super::users::{UserSummary, user_not_found};
use crate::error::{AppResult, Code, Error, OrConflict};
use crate::write::{AuditAction, AuditResource, Write};

const GROUP: AuditResource = AuditResource { category: "ORGANISATION", resource_type: "group" };
pub const CREATE: AuditAction = GROUP.action("group.create");
pub const UPDATE: AuditAction = GROUP.action("group.update");
pub const ADD_MEMBER: AuditAction = GROUP.action("group.member.add");
pub const REMOVE_MEMBER: AuditAction = GROUP.action("group.member.remove");

/// An approval group as the API returns it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupOut {
    pub id: Uuid,
    /// Unique in the organisation; approver expressions name it as `#key`.
    pub key: String,
    pub name: String,
    /// ACTIVE or INACTIVE.
    #[schema(example = "ACTIVE")]
    pub status: &'static str,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&GroupRecord> for GroupOut {
    fn from(g: &GroupRecord) -> Self {
        Self {
            id: g.id,
            key: g.key.clone(),
            name: g.name.clone(),
            status: g.status.as_str(),
            created_at: g.created_at,
            updated_at: g.updated_at,
        }
    }
}

/// A validated group change; absent fields stay.
#[derive(Debug, Clone, Default)]
pub struct GroupChange {
    pub name: Option<String>,
    pub status: Option<GroupStatus>,
}

fn not_found(id: Uuid) -> Error {
    Error::not_found(format!("Group {id} not found")).with_code(Code::GroupNotFound)
}

fn not_a_member(group: &GroupRecord, user_id: Uuid) -> Error {
    Error::not_found(format!("User {user_id} is not a member of group {}", group.key)).with_code(Code::MemberNotFound)
}

/// 409: the group is deactivated and cannot be used.
pub fn deactivated(group: &GroupRecord) -> Error {
    Error::conflict(format!("Approval group {} is deactivated", group.key)).with_code(Code::GroupDeactivated)
}

/// The ACTIVE group with this key (case-insensitive): 404 when absent, 409 when deactivated.
pub async fn active_group_by_key(tx: &mut dyn Tx, tenant: TenantId, key: &str) -> AppResult<GroupRecord> {
    let group = tx
        .groups()
        .find_by_key(tenant, key)
        .await?
        .ok_or_else(|| Error::not_found(format!("Group {key} not found")).with_code(Code::GroupNotFound))?;
    if group.status == GroupStatus::Inactive {
        return Err(deactivated(&group));
    }
    Ok(group)
}

pub struct Groups {
    store: Arc<dyn Store>,
}

impl Groups {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }
}

impl Groups {
    pub async fn list(&self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> AppResult<Page<GroupRecord>> {
        let mut tx = self.store.read().await?;
        Ok(tx.groups().list(tenant, sort, page).await?)
    }

    /// A group with one page of its members, ordered by first name then last name.
    pub async fn get(
        &self,
        tenant: TenantId,
        id: Uuid,
        members: PageRequest,
    ) -> AppResult<(GroupRecord, Page<UserSummary>)> {
        let mut tx = self.store.read().await?;
        let group = tx.groups().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let page = tx.groups().list_members(tenant, id, members).await?;
        Ok((group, page.map(|u| UserSummary::from(&u))))
    }

    /// One member of a group, as the group's read lists its members: 404 for no such group,
    /// and MEMBER_NOT_FOUND when the user is not one of its members.
    pub async fn member(&self, tenant: TenantId, id: Uuid, user_id: Uuid) -> AppResult<UserSummary> {
        let mut tx = self.store.read().await?;
        let group = tx.groups().get(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if !tx.groups().groups_of(tenant, user_id).await?.contains(&id) {
            return Err(not_a_member(&group, user_id));
        }
        let user = tx.users().get(tenant, user_id).await?.ok_or_else(|| not_a_member(&group, user_id))?;
        Ok(UserSummary::from(&user))
    }

    pub async fn create(&self, w: &mut Write, key: String, name: String) -> AppResult<GroupRecord> {
        let tenant = w.tenant()?;
        let now = w.now();
        let group = GroupRecord {
            id: new_id(),
            tenant_id: tenant,
            key,
            name,
            status: GroupStatus::Active,
            created_at: now,
            updated_at: now,
        };
        w.tx().groups().insert(&group).await.or_conflict(|| {
            Error::conflict(format!("Group key {} is in use", group.key)).with_code(Code::GroupKeyInUse)
        })?;
        w.set_resource_id(group.id.to_string());
        w.set_audit_detail(serde_json::json!({ "after": GroupOut::from(&group) }));
        Ok(group)
    }

    /// Renames, deactivates or reactivates a group.
    pub async fn update(&self, w: &mut Write, id: Uuid, change: GroupChange) -> AppResult<GroupRecord> {
        let tenant = w.tenant()?;
        let mut group = w.tx().groups().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        let before = GroupOut::from(&group);
        if let Some(name) = change.name {
            group.name = name;
        }
        if let Some(status) = change.status {
            group.status = status;
        }
        group.updated_at = w.now();
        w.tx().groups().update(&group).await?;
        w.set_audit_detail(serde_json::json!({ "before": before, "after": GroupOut::from(&group) }));
        Ok(group)
    }

    /// Adds a user of the organisation; `true` when newly added (adding a member again
    /// changes nothing). A deactivated group is a 409.
    pub async fn add_member(
        &self,
        w: &mut Write,
        id: Uuid,
        user_id: Uuid,
    ) -> AppResult<(GroupRecord, UserSummary, bool)> {
        let tenant = w.tenant()?;
        let group = w.tx().groups().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if group.status == GroupStatus::Inactive {
            return Err(deactivated(&group));
        }
        // Locked, so a removal of the user racing this waits for it (and takes the membership
        // away) or is read by it (404), never leaving a member that is no user.
        let user = w.tx().users().get_for_update(tenant, user_id).await?.ok_or_else(|| user_not_found(user_id))?;
        let now = w.now();
        let added = w.tx().groups().add_member(tenant, id, user_id, now).await?;
        w.set_audit_detail(serde_json::json!({ "userId": user_id, "added": added }));
        Ok((group, UserSummary::from(&user), added))
    }

    /// Removes a member (404 when the user is not one).
    pub async fn remove_member(&self, w: &mut Write, id: Uuid, user_id: Uuid) -> AppResult<()> {
        let tenant = w.tenant()?;
        let group = w.tx().groups().get_for_update(tenant, id).await?.ok_or_else(|| not_found(id))?;
        if !w.tx().groups().remove_member(tenant, id, user_id).await? {
            return Err(not_a_member(&group, user_id));
        }
        w.set_audit_detail(serde_json::json!({ "userId": user_id }));
        Ok(())
    }
}
