//! Approval groups and their members on SQLite: `GroupStore`.
//!
//! Group keys are compared ignoring case through a folded copy stored beside them
//! (`encode::folded`, written with the row by the store's `rows::GROUPS`), which carries the
//! uniqueness.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::params;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows;
use tokenops_store::{GroupStore, StoreResult, UserRecord};
use uuid::Uuid;

/// A group's members (`?1` the tenant, `?2` the group): memberships of users still in the
/// organisation.
const MEMBERS: &str = "approval_group_members m JOIN users u ON u.id = m.user_id AND u.tenant_id = m.tenant_id
     WHERE m.tenant_id = ?1 AND m.group_id = ?2";

#[async_trait]
impl GroupStore for SqliteTx {
    async fn add_member(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        user_id: Uuid,
        now: Timestamp,
    ) -> StoreResult<bool> {
        // Only a group and a user of the organisation: anything else adds nothing, like a member
        // already there.
        let done = self.execute(
            "INSERT INTO approval_group_members (group_id, user_id, tenant_id, added_at)
             SELECT ?1, ?2, ?3, ?4
             WHERE EXISTS (SELECT 1 FROM approval_groups WHERE tenant_id = ?3 AND id = ?1)
               AND EXISTS (SELECT 1 FROM users WHERE tenant_id = ?3 AND id = ?2)
             ON CONFLICT DO NOTHING",
            params![
                codec::id_text(group_id),
                codec::id_text(user_id),
                codec::id_text(tenant.as_uuid()),
                now.as_micros()
            ],
        )?;
        Ok(done == 1)
    }

    async fn remove_member(&mut self, tenant: TenantId, group_id: Uuid, user_id: Uuid) -> StoreResult<bool> {
        let done = self.execute(
            "DELETE FROM approval_group_members WHERE tenant_id = ?1 AND group_id = ?2 AND user_id = ?3",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(group_id), codec::id_text(user_id)],
        )?;
        Ok(done == 1)
    }

    async fn list_members(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let group_text = codec::id_text(group_id);
        let sql = format!(
            "SELECT {} FROM {MEMBERS} ORDER BY LOWER(u.first_name) ASC, LOWER(u.last_name) ASC, u.first_name ASC, u.last_name ASC, u.id ASC LIMIT ?3 OFFSET ?4",
            rows::joined_user_columns()
        );
        self.page_where(
            &format!("SELECT COUNT(*) FROM {MEMBERS}"),
            &sql,
            &[&tenant_text, &group_text],
            page,
            codec::decoded,
        )
    }

    async fn groups_of(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<Vec<Uuid>> {
        let ids: Vec<String> = self.fetch_all(
            "SELECT g.id FROM approval_group_members m
             JOIN approval_groups g ON g.id = m.group_id AND g.tenant_id = m.tenant_id
             WHERE m.tenant_id = ?1 AND m.user_id = ?2
             ORDER BY g.group_key ASC, g.id ASC",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(user_id)],
            |row| row.get(0).map_err(codec::backend),
        )?;
        ids.iter().map(|id| codec::uuid(id)).collect()
    }

    async fn remove_user(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<u64> {
        let done = self.execute(
            "DELETE FROM approval_group_members WHERE tenant_id = ?1 AND user_id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(user_id)],
        )?;
        Ok(done as u64)
    }
}
