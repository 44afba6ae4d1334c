//! Identity and organisations on SQLite: tenants, users, machine clients and their one-time
//! secret reveals, roles, approval groups, signing keys, refresh tokens and challenge sessions.
//!
//! Role names and group keys are compared ignoring case through a folded copy stored beside them
//! (`codec::folded`), which carries the uniqueness.

use crate::audit::prefix_glob;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::{Row, params, params_from_iter};
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    ChallengeRecord, ChallengeStore, GroupRecord, GroupStatus, GroupStore, MachineClientRecord, MachineClientStore,
    RefreshTokenRecord, RefreshTokenStore, RoleRecord, RoleStore, SecretRevealRecord, SecretRevealStore,
    SigningKeyRecord, SigningKeyStore, Standing, StoreError, StoreResult, SubjectStanding, TenantRecord, TenantStore,
    UserFilter, UserRecord, UserStatus, UserStore,
};
use uuid::Uuid;

fn text(row: &Row<'_>, name: &str) -> StoreResult<String> {
    codec::get(row, name)
}

fn opt_text(row: &Row<'_>, name: &str) -> StoreResult<Option<String>> {
    codec::get(row, name)
}

fn int(row: &Row<'_>, name: &str) -> StoreResult<i64> {
    codec::get(row, name)
}

fn opt_ts(row: &Row<'_>, name: &str) -> StoreResult<Option<Timestamp>> {
    Ok(codec::get::<Option<i64>>(row, name)?.map(codec::ts))
}

/// The `ORDER BY` of a list: each key's column as the list sorts by it (`columns` maps the names
/// a list accepts to SQL), then the id, ascending. Keys come from an endpoint's allow list, never
/// from the request; a column the list does not know is refused rather than placed in SQL.
fn order_by(sort: &[SortKey], columns: &[(&str, &str)]) -> StoreResult<String> {
    let mut order = Vec::with_capacity(sort.len() + 1);
    for key in sort {
        let (_, sql) = columns
            .iter()
            .find(|(name, _)| *name == key.column)
            .ok_or_else(|| StoreError::Backend(format!("the list cannot sort by {:?}", key.column).into()))?;
        order.push(format!("{sql} {}", key.direction.sql()));
    }
    order.push("id ASC".to_owned());
    Ok(order.join(", "))
}

fn page_limits(page: PageRequest) -> (i64, i64) {
    (i64::from(page.size), i64::try_from(page.offset()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------------
// Organisations

fn decode_tenant(row: &Row<'_>) -> StoreResult<TenantRecord> {
    Ok(TenantRecord {
        id: codec::tenant(&text(row, "id")?)?,
        name: text(row, "name")?,
        owner_user_id: codec::uuid(&text(row, "owner_user_id")?)?,
        created_at: codec::ts(int(row, "created_at")?),
        updated_at: codec::ts(int(row, "updated_at")?),
    })
}

#[async_trait]
impl TenantStore for SqliteTx {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO tenants (id, name, owner_user_id, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                codec::id_text(tenant.id.as_uuid()),
                &tenant.name,
                codec::id_text(tenant.owner_user_id),
                tenant.created_at.as_micros(),
                tenant.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        self.fetch_optional(
            "SELECT id, name, owner_user_id, created_at, updated_at FROM tenants WHERE id = ?1",
            params![codec::id_text(id.as_uuid())],
            decode_tenant,
        )
    }
}

// ---------------------------------------------------------------------------------------------
// Users

const USER_COLUMNS: &str = "id, tenant_id, email, first_name, last_name, status, role_id, password_hash, temporary_password_hash, failed_sign_ins, first_failed_sign_in_at, locked_until, created_at, updated_at";

/// The columns users sort by. `role_name` is the name of the user's role: a platform role or a
/// custom role of the user's organisation (NULL, so first ascending, for an unknown role).
const USER_SORT: &[(&str, &str)] = &[
    ("email", "email"),
    ("first_name", "first_name"),
    ("last_name", "last_name"),
    ("status", "status"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
    (
        "role_name",
        "(SELECT r.name FROM roles r WHERE r.id = users.role_id AND (r.tenant_id = users.tenant_id OR r.tenant_id IS NULL))",
    ),
];

/// The filter shared by the count and the page: `?1` the tenant, `?2` the status, `?3` the role,
/// `?4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = ?1 AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR role_id = ?3)
     AND (?4 IS NULL OR email GLOB ?4 OR first_name GLOB ?4 OR last_name GLOB ?4)";

fn decode_user(row: &Row<'_>) -> StoreResult<UserRecord> {
    let status = text(row, "status")?;
    let failed = int(row, "failed_sign_ins")?;
    Ok(UserRecord {
        id: codec::uuid(&text(row, "id")?)?,
        tenant_id: codec::tenant(&text(row, "tenant_id")?)?,
        email: text(row, "email")?,
        first_name: text(row, "first_name")?,
        last_name: text(row, "last_name")?,
        status: UserStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("user status {status:?}")))?,
        role_id: codec::uuid(&text(row, "role_id")?)?,
        password_hash: opt_text(row, "password_hash")?,
        temporary_password_hash: opt_text(row, "temporary_password_hash")?,
        failed_sign_ins: u32::try_from(failed).map_err(|_| StoreError::Corrupt(format!("failed sign-ins {failed}")))?,
        first_failed_sign_in_at: opt_ts(row, "first_failed_sign_in_at")?,
        locked_until: opt_ts(row, "locked_until")?,
        created_at: codec::ts(int(row, "created_at")?),
        updated_at: codec::ts(int(row, "updated_at")?),
    })
}

impl SqliteTx {
    fn fetch_user(&self, condition: &str, binds: &[String]) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {condition}");
        self.fetch_optional(&sql, params_from_iter(binds), decode_user)
    }
}

#[async_trait]
impl UserStore for SqliteTx {
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO users ({USER_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)"
        );
        self.execute(
            &sql,
            params![
                codec::id_text(user.id),
                codec::id_text(user.tenant_id.as_uuid()),
                user.email.to_lowercase(),
                &user.first_name,
                &user.last_name,
                user.status.as_str(),
                codec::id_text(user.role_id),
                user.password_hash.as_deref(),
                user.temporary_password_hash.as_deref(),
                i64::from(user.failed_sign_ins),
                user.first_failed_sign_in_at.map(Timestamp::as_micros),
                user.locked_until.map(Timestamp::as_micros),
                user.created_at.as_micros(),
                user.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("tenant_id = ?1 AND id = ?2", &[codec::id_text(tenant.as_uuid()), codec::id_text(id)])
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a user for update")?;
        UserStore::get(self, tenant, id).await
    }

    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("id = ?1", &[codec::id_text(id)])
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("email = ?1", &[email.to_lowercase()])
    }

    async fn update(&mut self, user: &UserRecord) -> StoreResult<()> {
        self.execute(
            "UPDATE users SET first_name = ?1, last_name = ?2, status = ?3, role_id = ?4, password_hash = ?5,
                              temporary_password_hash = ?6, failed_sign_ins = ?7, first_failed_sign_in_at = ?8,
                              locked_until = ?9, updated_at = ?10
             WHERE tenant_id = ?11 AND id = ?12",
            params![
                &user.first_name,
                &user.last_name,
                user.status.as_str(),
                codec::id_text(user.role_id),
                user.password_hash.as_deref(),
                user.temporary_password_hash.as_deref(),
                i64::from(user.failed_sign_ins),
                user.first_failed_sign_in_at.map(Timestamp::as_micros),
                user.locked_until.map(Timestamp::as_micros),
                user.updated_at.as_micros(),
                codec::id_text(user.tenant_id.as_uuid()),
                codec::id_text(user.id),
            ],
        )?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        let done = self.execute(
            "DELETE FROM users WHERE tenant_id = ?1 AND id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &UserFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let status = filter.status.map(UserStatus::as_str);
        let role = filter.role_id.map(codec::id_text);
        let pattern = filter.search.as_deref().map(prefix_glob);
        let total: i64 = self.scalar(
            &format!("SELECT COUNT(*) FROM users WHERE {USER_FILTER}"),
            params![&tenant_text, status, role.as_deref(), pattern.as_deref()],
        )?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, USER_SORT)?;
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {order} LIMIT ?5 OFFSET ?6");
        let (limit, offset) = page_limits(page);
        let items = self.fetch_all(
            &sql,
            params![&tenant_text, status, role.as_deref(), pattern.as_deref(), limit, offset],
            decode_user,
        )?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }
}

// ---------------------------------------------------------------------------------------------
// Machine clients

const CLIENT_COLUMNS: &str = "id, tenant_id, name, role_id, secret_hash, active, created_at";

fn decode_client(row: &Row<'_>) -> StoreResult<MachineClientRecord> {
    Ok(MachineClientRecord {
        id: codec::uuid(&text(row, "id")?)?,
        tenant_id: codec::opt_tenant(opt_text(row, "tenant_id")?)?,
        name: text(row, "name")?,
        role_id: codec::opt_uuid(opt_text(row, "role_id")?)?,
        secret_hash: text(row, "secret_hash")?,
        active: int(row, "active")? != 0,
        created_at: codec::ts(int(row, "created_at")?),
    })
}

#[async_trait]
impl MachineClientStore for SqliteTx {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO machine_clients (id, tenant_id, name, role_id, secret_hash, active, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                codec::id_text(client.id),
                client.tenant_id.map(|t| codec::id_text(t.as_uuid())),
                &client.name,
                client.role_id.map(codec::id_text),
                &client.secret_hash,
                i64::from(client.active),
                client.created_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE id = ?1");
        self.fetch_optional(&sql, params![codec::id_text(id)], decode_client)
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let count: i64 = self.scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id IS NULL", [])?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let total: i64 =
            self.scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id = ?1", params![&tenant_text])?;
        let sql = format!(
            "SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE tenant_id = ?1
             ORDER BY created_at ASC, id ASC LIMIT ?2 OFFSET ?3"
        );
        let (limit, offset) = page_limits(page);
        let items = self.fetch_all(&sql, params![&tenant_text, limit, offset], decode_client)?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }

    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let done = self.execute(
            "UPDATE machine_clients SET active = ?1 WHERE tenant_id = ?2 AND id = ?3",
            params![i64::from(active), codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }
}

// ---------------------------------------------------------------------------------------------
// One-time reveals of machine-client secrets

const REVEAL_COLUMNS: &str = "token_hash, client_id, sealed_secret, expires_at, created_at";

fn decode_reveal(row: &Row<'_>) -> StoreResult<SecretRevealRecord> {
    Ok(SecretRevealRecord {
        token_hash: text(row, "token_hash")?,
        client_id: codec::uuid(&text(row, "client_id")?)?,
        sealed_secret: text(row, "sealed_secret")?,
        expires_at: codec::ts(int(row, "expires_at")?),
        created_at: codec::ts(int(row, "created_at")?),
    })
}

#[async_trait]
impl SecretRevealStore for SqliteTx {
    async fn insert(&mut self, reveal: &SecretRevealRecord) -> StoreResult<()> {
        let sql = format!("INSERT INTO secret_reveals ({REVEAL_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5)");
        self.execute(
            &sql,
            params![
                &reveal.token_hash,
                codec::id_text(reveal.client_id),
                &reveal.sealed_secret,
                reveal.expires_at.as_micros(),
                reveal.created_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>> {
        // An expired reveal is deleted too: it can never be used again.
        let sql = format!("DELETE FROM secret_reveals WHERE token_hash = ?1 RETURNING {REVEAL_COLUMNS}");
        let Some(reveal) = self.fetch_optional(&sql, params![token_hash], decode_reveal)? else { return Ok(None) };
        Ok((now < reveal.expires_at).then_some(reveal))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM secret_reveals WHERE expires_at < ?1", params![now.as_micros()])?;
        Ok(done as u64)
    }
}

// ---------------------------------------------------------------------------------------------
// Roles

const ROLE_COLUMNS: &str = "id, tenant_id, name, description, permissions, created_at, updated_at";

/// The roles an organisation sees, `?1` the tenant: the platform rows (NULL tenant) and its own.
const ROLE_SCOPE: &str = "(tenant_id = ?1 OR tenant_id IS NULL)";

const ROLE_SORT: &[(&str, &str)] = &[
    ("name", "name"),
    ("description", "description"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
];

fn decode_role(row: &Row<'_>) -> StoreResult<RoleRecord> {
    Ok(RoleRecord {
        id: codec::uuid(&text(row, "id")?)?,
        tenant_id: codec::opt_tenant(opt_text(row, "tenant_id")?)?,
        name: text(row, "name")?,
        description: text(row, "description")?,
        permissions: codec::names(&text(row, "permissions")?)?,
        created_at: codec::ts(int(row, "created_at")?),
        updated_at: codec::ts(int(row, "updated_at")?),
    })
}

/// The organisation of a custom role; platform roles are never written through the store.
fn custom_role_tenant(role: &RoleRecord) -> StoreResult<TenantId> {
    role.tenant_id.ok_or_else(|| StoreError::Backend("only an organisation's custom role can be written".into()))
}

fn role_name_conflict() -> StoreError {
    StoreError::Conflict("role name already exists".to_owned())
}

impl SqliteTx {
    fn fetch_role(&self, tenant: TenantId, condition: &str, value: String) -> StoreResult<Option<RoleRecord>> {
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} AND {condition}");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), value], decode_role)
    }

    /// Whether a role the organisation sees, other than `except`, has the folded name: platform
    /// names are taken in every organisation, which no unique index can say.
    fn role_name_taken(&self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool> {
        let sql = format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE} AND name_folded = ?2 AND id <> ?3");
        let count: i64 =
            self.scalar(&sql, params![codec::id_text(tenant.as_uuid()), name_folded, codec::id_text(except)])?;
        Ok(count > 0)
    }
}

#[async_trait]
impl RoleStore for SqliteTx {
    async fn insert(&mut self, role: &RoleRecord) -> StoreResult<()> {
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        if self.role_name_taken(tenant, &name_folded, role.id)? {
            return Err(role_name_conflict());
        }
        self.execute(
            "INSERT INTO roles (id, tenant_id, name, name_folded, description, permissions, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                codec::id_text(role.id),
                codec::id_text(tenant.as_uuid()),
                &role.name,
                &name_folded,
                &role.description,
                codec::names_text(&role.permissions),
                role.created_at.as_micros(),
                role.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(tenant, "id = ?2", codec::id_text(id))
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a role for update")?;
        RoleStore::get(self, tenant, id).await
    }

    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(tenant, "name_folded = ?2", codec::folded(name))
    }

    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()> {
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        if self.role_name_taken(tenant, &name_folded, role.id)? {
            return Err(role_name_conflict());
        }
        self.execute(
            "UPDATE roles SET name = ?1, name_folded = ?2, description = ?3, permissions = ?4, updated_at = ?5
             WHERE tenant_id = ?6 AND id = ?7",
            params![
                &role.name,
                &name_folded,
                &role.description,
                codec::names_text(&role.permissions),
                role.updated_at.as_micros(),
                codec::id_text(tenant.as_uuid()),
                codec::id_text(role.id),
            ],
        )?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        // `tenant_id = ?1` never matches a platform row (NULL).
        let done = self.execute(
            "DELETE FROM roles WHERE tenant_id = ?1 AND id = ?2",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(id)],
        )?;
        Ok(done == 1)
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let total: i64 =
            self.scalar(&format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE}"), params![&tenant_text])?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, ROLE_SORT)?;
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} ORDER BY {order} LIMIT ?2 OFFSET ?3");
        let (limit, offset) = page_limits(page);
        let items = self.fetch_all(&sql, params![&tenant_text, limit, offset], decode_role)?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }

    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64> {
        let count: i64 = self.scalar(
            "SELECT (SELECT COUNT(*) FROM users WHERE tenant_id = ?1 AND role_id = ?2)
                  + (SELECT COUNT(*) FROM machine_clients WHERE tenant_id = ?1 AND role_id = ?2 AND active = 1)",
            params![codec::id_text(tenant.as_uuid()), codec::id_text(role_id)],
        )?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

// ---------------------------------------------------------------------------------------------
// Approval groups

const GROUP_COLUMNS: &str = "id, tenant_id, group_key, name, status, created_at, updated_at";

const GROUP_SORT: &[(&str, &str)] = &[
    ("key", "group_key"),
    ("name", "name"),
    ("status", "status"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
];

fn decode_group(row: &Row<'_>) -> StoreResult<GroupRecord> {
    let status = text(row, "status")?;
    Ok(GroupRecord {
        id: codec::uuid(&text(row, "id")?)?,
        tenant_id: codec::tenant(&text(row, "tenant_id")?)?,
        key: text(row, "group_key")?,
        name: text(row, "name")?,
        status: GroupStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("group status {status:?}")))?,
        created_at: codec::ts(int(row, "created_at")?),
        updated_at: codec::ts(int(row, "updated_at")?),
    })
}

/// The user columns of a join with `users u`, named as in `users`.
fn member_columns() -> String {
    USER_COLUMNS.split(", ").map(|c| format!("u.{c} AS {c}")).collect::<Vec<_>>().join(", ")
}

/// A group's members (`?1` the tenant, `?2` the group): memberships of users still in the
/// organisation.
const MEMBERS: &str = "approval_group_members m JOIN users u ON u.id = m.user_id AND u.tenant_id = m.tenant_id
     WHERE m.tenant_id = ?1 AND m.group_id = ?2";

impl SqliteTx {
    fn fetch_group(&self, tenant: TenantId, condition: &str, value: String) -> StoreResult<Option<GroupRecord>> {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM approval_groups WHERE tenant_id = ?1 AND {condition}");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), value], decode_group)
    }
}

#[async_trait]
impl GroupStore for SqliteTx {
    async fn insert(&mut self, group: &GroupRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO approval_groups (id, tenant_id, group_key, key_folded, name, status, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                codec::id_text(group.id),
                codec::id_text(group.tenant_id.as_uuid()),
                &group.key,
                codec::folded(&group.key),
                &group.name,
                group.status.as_str(),
                group.created_at.as_micros(),
                group.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        self.fetch_group(tenant, "id = ?2", codec::id_text(id))
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a group for update")?;
        GroupStore::get(self, tenant, id).await
    }

    async fn find_by_key(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<GroupRecord>> {
        self.fetch_group(tenant, "key_folded = ?2", codec::folded(key))
    }

    async fn update(&mut self, group: &GroupRecord) -> StoreResult<()> {
        self.execute(
            "UPDATE approval_groups SET name = ?1, status = ?2, updated_at = ?3 WHERE tenant_id = ?4 AND id = ?5",
            params![
                &group.name,
                group.status.as_str(),
                group.updated_at.as_micros(),
                codec::id_text(group.tenant_id.as_uuid()),
                codec::id_text(group.id),
            ],
        )?;
        Ok(())
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<GroupRecord>> {
        let tenant_text = codec::id_text(tenant.as_uuid());
        let total: i64 =
            self.scalar("SELECT COUNT(*) FROM approval_groups WHERE tenant_id = ?1", params![&tenant_text])?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, GROUP_SORT)?;
        let sql = format!(
            "SELECT {GROUP_COLUMNS} FROM approval_groups WHERE tenant_id = ?1 ORDER BY {order} LIMIT ?2 OFFSET ?3"
        );
        let (limit, offset) = page_limits(page);
        let items = self.fetch_all(&sql, params![&tenant_text, limit, offset], decode_group)?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }

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
        let total: i64 = self.scalar(&format!("SELECT COUNT(*) FROM {MEMBERS}"), params![&tenant_text, &group_text])?;
        let sql = format!(
            "SELECT {} FROM {MEMBERS} ORDER BY u.first_name ASC, u.last_name ASC, u.id ASC LIMIT ?3 OFFSET ?4",
            member_columns()
        );
        let (limit, offset) = page_limits(page);
        let items = self.fetch_all(&sql, params![&tenant_text, &group_text, limit, offset], decode_user)?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
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

// ---------------------------------------------------------------------------------------------
// Signing keys

#[async_trait]
impl SigningKeyStore for SqliteTx {
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>> {
        self.fetch_all(
            "SELECT kid, sealed_key, created_at, retire_at FROM signing_keys ORDER BY created_at ASC, kid ASC",
            [],
            |row| {
                Ok(SigningKeyRecord {
                    kid: text(row, "kid")?,
                    sealed_key: text(row, "sealed_key")?,
                    created_at: codec::ts(int(row, "created_at")?),
                    retire_at: opt_ts(row, "retire_at")?,
                })
            },
        )
    }

    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO signing_keys (kid, sealed_key, created_at, retire_at) VALUES (?1, ?2, ?3, ?4)",
            params![&key.kid, &key.sealed_key, key.created_at.as_micros(), key.retire_at.map(Timestamp::as_micros)],
        )?;
        Ok(())
    }

    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()> {
        self.execute("UPDATE signing_keys SET retire_at = ?1 WHERE kid = ?2", params![retire_at.as_micros(), kid])?;
        Ok(())
    }

    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = self.execute(
            "DELETE FROM signing_keys WHERE retire_at IS NOT NULL AND retire_at < ?1",
            params![cutoff.as_micros()],
        )?;
        Ok(done as u64)
    }
}

// ---------------------------------------------------------------------------------------------
// Refresh tokens and challenge sessions

#[async_trait]
impl RefreshTokenStore for SqliteTx {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO refresh_tokens (token_hash, user_id, tenant_id, expires_at, revoked_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                &token.token_hash,
                codec::id_text(token.user_id),
                codec::id_text(token.tenant_id.as_uuid()),
                token.expires_at.as_micros(),
                token.revoked_at.map(Timestamp::as_micros),
                token.created_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>> {
        self.fetch_optional(
            "SELECT token_hash, user_id, tenant_id, expires_at, revoked_at, created_at
             FROM refresh_tokens WHERE token_hash = ?1",
            params![token_hash],
            |row| {
                Ok(RefreshTokenRecord {
                    token_hash: text(row, "token_hash")?,
                    user_id: codec::uuid(&text(row, "user_id")?)?,
                    tenant_id: codec::tenant(&text(row, "tenant_id")?)?,
                    expires_at: codec::ts(int(row, "expires_at")?),
                    revoked_at: opt_ts(row, "revoked_at")?,
                    created_at: codec::ts(int(row, "created_at")?),
                })
            },
        )
    }

    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute(
            "UPDATE refresh_tokens SET revoked_at = ?1 WHERE user_id = ?2 AND revoked_at IS NULL",
            params![now.as_micros(), codec::id_text(user_id)],
        )?;
        Ok(done as u64)
    }

    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM refresh_tokens WHERE expires_at < ?1", params![cutoff.as_micros()])?;
        Ok(done as u64)
    }
}

#[async_trait]
impl ChallengeStore for SqliteTx {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()> {
        self.execute(
            "INSERT INTO challenges (session_hash, user_id, expires_at) VALUES (?1, ?2, ?3)",
            params![&challenge.session_hash, codec::id_text(challenge.user_id), challenge.expires_at.as_micros()],
        )?;
        Ok(())
    }

    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>> {
        // An expired challenge is deleted too: it can never be used again.
        let challenge = self.fetch_optional(
            "DELETE FROM challenges WHERE session_hash = ?1 RETURNING session_hash, user_id, expires_at",
            params![session_hash],
            |row| {
                Ok(ChallengeRecord {
                    session_hash: text(row, "session_hash")?,
                    user_id: codec::uuid(&text(row, "user_id")?)?,
                    expires_at: codec::ts(int(row, "expires_at")?),
                })
            },
        )?;
        let Some(challenge) = challenge else { return Ok(None) };
        Ok((now < challenge.expires_at).then_some(challenge))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = self.execute("DELETE FROM challenges WHERE expires_at < ?1", params![now.as_micros()])?;
        Ok(done as u64)
    }
}

/// See `Store::subject_standing`: both lookups in one statement, on a connection outside any
/// transaction.
pub(crate) fn subject_standing(
    conn: &rusqlite::Connection,
    tenant: Option<TenantId>,
    id: Uuid,
) -> StoreResult<SubjectStanding> {
    let mut statement = conn
        .prepare_cached(
            "SELECT 'user' AS kind, tenant_id, status = 'ACTIVE' AS active, role_id FROM users
             WHERE id = ?1 AND tenant_id = ?2
             UNION ALL
             SELECT 'client', tenant_id, active, role_id FROM machine_clients WHERE id = ?1",
        )
        .map_err(codec::backend)?;
    let tenant_text = tenant.map(|t| codec::id_text(t.as_uuid()));
    let mut rows = statement.query(params![codec::id_text(id), tenant_text]).map_err(codec::backend)?;
    let mut standing = SubjectStanding::default();
    while let Some(row) = rows.next().map_err(codec::backend)? {
        let kind: String = codec::get(row, "kind")?;
        let found = Standing {
            tenant: codec::opt_tenant(codec::get(row, "tenant_id")?)?,
            active: codec::get::<i64>(row, "active")? != 0,
            role_id: codec::opt_uuid(codec::get(row, "role_id")?)?,
        };
        match kind.as_str() {
            "user" => standing.user = Some(found),
            _ => standing.client = Some(found),
        }
    }
    Ok(standing)
}
