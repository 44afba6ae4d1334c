//! Approval groups and their members on PostgreSQL: `GroupStore`.
//!
//! Group keys are compared ignoring case through a folded copy stored beside them
//! (`encode::folded`, written with the row by the store's `rows::GROUPS`), which carries the
//! uniqueness.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows;
use tokenops_store::{GroupStore, StoreResult, UserRecord};
use uuid::Uuid;

/// A group's members (`$1` the tenant, `$2` the group): memberships of users still in the
/// organisation.
const MEMBERS: &str = "approval_group_members m JOIN users u ON u.id = m.user_id AND u.tenant_id = m.tenant_id
     WHERE m.tenant_id = $1 AND m.group_id = $2";

#[async_trait]
impl GroupStore for PostgresTx {
    async fn add_member(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        user_id: Uuid,
        now: Timestamp,
    ) -> StoreResult<bool> {
        // Only a group and a user of the organisation: anything else adds nothing, like a member
        // already there.
        let done = self
            .execute(
                sqlx::query(
                    "INSERT INTO approval_group_members (group_id, user_id, tenant_id, added_at)
             SELECT $1, $2, $3, $4
             WHERE EXISTS (SELECT 1 FROM approval_groups WHERE tenant_id = $3 AND id = $1)
               AND EXISTS (SELECT 1 FROM users WHERE tenant_id = $3 AND id = $2)
             ON CONFLICT DO NOTHING",
                )
                .bind(group_id)
                .bind(user_id)
                .bind(tenant.as_uuid())
                .bind(now.as_micros()),
            )
            .await?;
        Ok(done == 1)
    }

    async fn remove_member(&mut self, tenant: TenantId, group_id: Uuid, user_id: Uuid) -> StoreResult<bool> {
        let done = self
            .execute(
                sqlx::query(
                    "DELETE FROM approval_group_members WHERE tenant_id = $1 AND group_id = $2 AND user_id = $3",
                )
                .bind(tenant.as_uuid())
                .bind(group_id)
                .bind(user_id),
            )
            .await?;
        Ok(done == 1)
    }

    async fn list_members(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let sql = format!(
            "SELECT {} FROM {MEMBERS} ORDER BY LOWER(u.first_name) ASC, LOWER(u.last_name) ASC, u.first_name ASC, u.last_name ASC, u.id ASC LIMIT $3 OFFSET $4",
            rows::joined_user_columns()
        );
        self.page_where(
            format!("SELECT COUNT(*) FROM {MEMBERS}"),
            sql,
            |q| q.bind(tenant.as_uuid()).bind(group_id),
            page,
            codec::decoded,
        )
        .await
    }

    async fn groups_of(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<Vec<Uuid>> {
        self.scalars(
            sqlx::query_scalar(
                "SELECT g.id FROM approval_group_members m
             JOIN approval_groups g ON g.id = m.group_id AND g.tenant_id = m.tenant_id
             WHERE m.tenant_id = $1 AND m.user_id = $2
             ORDER BY g.group_key ASC, g.id ASC",
            )
            .bind(tenant.as_uuid())
            .bind(user_id),
        )
        .await
    }

    async fn remove_user(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<u64> {
        self.execute(
            sqlx::query("DELETE FROM approval_group_members WHERE tenant_id = $1 AND user_id = $2")
                .bind(tenant.as_uuid())
                .bind(user_id),
        )
        .await
    }
}
