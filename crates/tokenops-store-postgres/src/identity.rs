//! Identity and organisations on PostgreSQL: tenants, users, machine clients and their one-time
//! secret reveals, roles, approval groups, signing keys, refresh tokens and challenge sessions.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count: a unique violation would abort the transaction, and callers go on as on SQLite.
//! The one update that can violate a unique index (renaming a role) runs under a savepoint.
//!
//! Role names and group keys are compared ignoring case through a folded copy stored beside them
//! (`codec::folded`), which carries the uniqueness.

use crate::audit::prefix_regex;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::Postgres;
use sqlx::postgres::PgRow;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    ChallengeRecord, ChallengeStore, GroupRecord, GroupStatus, GroupStore, MachineClientRecord, MachineClientStore,
    RefreshTokenRecord, RefreshTokenStore, RoleRecord, RoleStore, SecretRevealRecord, SecretRevealStore,
    SigningKeyRecord, SigningKeyStore, Standing, StoreError, StoreResult, SubjectStanding, TenantRecord, TenantStore,
    UserFilter, UserRecord, UserStatus, UserStore,
};
use uuid::Uuid;

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

// ---------------------------------------------------------------------------------------------
// Organisations

fn decode_tenant(row: &PgRow) -> StoreResult<TenantRecord> {
    Ok(TenantRecord {
        id: TenantId(codec::get(row, "id")?),
        name: codec::get(row, "name")?,
        owner_user_id: codec::get(row, "owner_user_id")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

#[async_trait]
impl TenantStore for PostgresTx {
    async fn insert(&mut self, tenant: &TenantRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO tenants (id, name, owner_user_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT DO NOTHING",
        )
        .bind(tenant.id.as_uuid())
        .bind(&tenant.name)
        .bind(tenant.owner_user_id)
        .bind(tenant.created_at.as_micros())
        .bind(tenant.updated_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("organisation id"));
        }
        Ok(())
    }

    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        let row = sqlx::query("SELECT id, name, owner_user_id, created_at, updated_at FROM tenants WHERE id = $1")
            .bind(id.as_uuid())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_tenant).transpose()
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

/// The filter shared by the count and the page: `$1` the tenant, `$2` the status, `$3` the role,
/// `$4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = $1 AND ($2::text IS NULL OR status = $2) AND ($3::uuid IS NULL OR role_id = $3)
     AND ($4::text IS NULL OR email ~ $4 OR first_name ~ $4 OR last_name ~ $4)";

fn decode_user(row: &PgRow) -> StoreResult<UserRecord> {
    let status: String = codec::get(row, "status")?;
    let failed: i64 = codec::get(row, "failed_sign_ins")?;
    Ok(UserRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        email: codec::get(row, "email")?,
        first_name: codec::get(row, "first_name")?,
        last_name: codec::get(row, "last_name")?,
        status: UserStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("user status {status:?}")))?,
        role_id: codec::get(row, "role_id")?,
        password_hash: codec::get(row, "password_hash")?,
        temporary_password_hash: codec::get(row, "temporary_password_hash")?,
        failed_sign_ins: u32::try_from(failed).map_err(|_| StoreError::Corrupt(format!("failed sign-ins {failed}")))?,
        first_failed_sign_in_at: codec::opt_ts(codec::get(row, "first_failed_sign_in_at")?),
        locked_until: codec::opt_ts(codec::get(row, "locked_until")?),
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

#[async_trait]
impl UserStore for PostgresTx {
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(user.id)
            .bind(user.tenant_id.as_uuid())
            .bind(user.email.to_lowercase())
            .bind(&user.first_name)
            .bind(&user.last_name)
            .bind(user.status.as_str())
            .bind(user.role_id)
            .bind(user.password_hash.as_deref())
            .bind(user.temporary_password_hash.as_deref())
            .bind(i64::from(user.failed_sign_ins))
            .bind(user.first_failed_sign_in_at.map(Timestamp::as_micros))
            .bind(user.locked_until.map(Timestamp::as_micros))
            .bind(user.created_at.as_micros())
            .bind(user.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("user id or email"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_user).transpose()
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE tenant_id = $1 AND id = $2 FOR UPDATE");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_user).transpose()
    }

    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_user).transpose()
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE email = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(email.to_lowercase())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_user).transpose()
    }

    async fn update(&mut self, user: &UserRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE users SET first_name = $1, last_name = $2, status = $3, role_id = $4, password_hash = $5,
                              temporary_password_hash = $6, failed_sign_ins = $7, first_failed_sign_in_at = $8,
                              locked_until = $9, updated_at = $10
             WHERE tenant_id = $11 AND id = $12",
        )
        .bind(&user.first_name)
        .bind(&user.last_name)
        .bind(user.status.as_str())
        .bind(user.role_id)
        .bind(user.password_hash.as_deref())
        .bind(user.temporary_password_hash.as_deref())
        .bind(i64::from(user.failed_sign_ins))
        .bind(user.first_failed_sign_in_at.map(Timestamp::as_micros))
        .bind(user.locked_until.map(Timestamp::as_micros))
        .bind(user.updated_at.as_micros())
        .bind(user.tenant_id.as_uuid())
        .bind(user.id)
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM users WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &UserFilter,
        sort: &[SortKey],
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let status = filter.status.map(UserStatus::as_str);
        let pattern = filter.search.as_deref().map(prefix_regex);
        let count_sql = format!("SELECT COUNT(*) AS total FROM users WHERE {USER_FILTER}");
        let total_row = sqlx::query(sqlx::AssertSqlSafe(count_sql))
            .bind(tenant.as_uuid())
            .bind(status)
            .bind(filter.role_id)
            .bind(pattern.as_deref())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let total: i64 = codec::get(&total_row, "total")?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, USER_SORT)?;
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {order} LIMIT $5 OFFSET $6");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(status)
            .bind(filter.role_id)
            .bind(pattern.as_deref())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_user).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }
}

// ---------------------------------------------------------------------------------------------
// Machine clients

const CLIENT_COLUMNS: &str = "id, tenant_id, name, role_id, secret_hash, active, created_at";

fn decode_client(row: &PgRow) -> StoreResult<MachineClientRecord> {
    Ok(MachineClientRecord {
        id: codec::get(row, "id")?,
        tenant_id: codec::opt_tenant(codec::get(row, "tenant_id")?),
        name: codec::get(row, "name")?,
        role_id: codec::get(row, "role_id")?,
        secret_hash: codec::get(row, "secret_hash")?,
        active: codec::get(row, "active")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
    })
}

#[async_trait]
impl MachineClientStore for PostgresTx {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO machine_clients (id, tenant_id, name, role_id, secret_hash, active, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT DO NOTHING",
        )
        .bind(client.id)
        .bind(client.tenant_id.map(TenantId::as_uuid))
        .bind(&client.name)
        .bind(client.role_id)
        .bind(&client.secret_hash)
        .bind(client.active)
        .bind(client.created_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("machine client id"));
        }
        Ok(())
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let sql = format!("SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_client).transpose()
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS total FROM machine_clients WHERE tenant_id IS NULL")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(codec::count(codec::get(&row, "total")?))
    }

    async fn list(&mut self, tenant: TenantId, page: PageRequest) -> StoreResult<Page<MachineClientRecord>> {
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id = $1")
            .bind(tenant.as_uuid())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {CLIENT_COLUMNS} FROM machine_clients WHERE tenant_id = $1
             ORDER BY created_at ASC, id ASC LIMIT $2 OFFSET $3"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_client).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }

    async fn set_active(&mut self, tenant: TenantId, id: Uuid, active: bool) -> StoreResult<bool> {
        let done = sqlx::query("UPDATE machine_clients SET active = $1 WHERE tenant_id = $2 AND id = $3")
            .bind(active)
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }
}

// ---------------------------------------------------------------------------------------------
// One-time reveals of machine-client secrets

const REVEAL_COLUMNS: &str = "token_hash, client_id, sealed_secret, expires_at, created_at";

fn decode_reveal(row: &PgRow) -> StoreResult<SecretRevealRecord> {
    Ok(SecretRevealRecord {
        token_hash: codec::get(row, "token_hash")?,
        client_id: codec::get(row, "client_id")?,
        sealed_secret: codec::get(row, "sealed_secret")?,
        expires_at: codec::ts(codec::get(row, "expires_at")?),
        created_at: codec::ts(codec::get(row, "created_at")?),
    })
}

#[async_trait]
impl SecretRevealStore for PostgresTx {
    async fn insert(&mut self, reveal: &SecretRevealRecord) -> StoreResult<()> {
        let sql =
            format!("INSERT INTO secret_reveals ({REVEAL_COLUMNS}) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING");
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&reveal.token_hash)
            .bind(reveal.client_id)
            .bind(&reveal.sealed_secret)
            .bind(reveal.expires_at.as_micros())
            .bind(reveal.created_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("secret reveal"));
        }
        Ok(())
    }

    async fn take(&mut self, token_hash: &str, now: Timestamp) -> StoreResult<Option<SecretRevealRecord>> {
        // An expired reveal is deleted too: it can never be used again. Two concurrent takes of
        // one reveal: the second waits for the first's row lock and then deletes nothing.
        let sql = format!("DELETE FROM secret_reveals WHERE token_hash = $1 RETURNING {REVEAL_COLUMNS}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(token_hash)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let Some(reveal) = row.as_ref().map(decode_reveal).transpose()? else { return Ok(None) };
        Ok((now < reveal.expires_at).then_some(reveal))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM secret_reveals WHERE expires_at < $1")
            .bind(now.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

// ---------------------------------------------------------------------------------------------
// Roles

const ROLE_COLUMNS: &str = "id, tenant_id, name, description, permissions, created_at, updated_at";

/// The roles an organisation sees, `$1` the tenant: the platform rows (NULL tenant) and its own.
const ROLE_SCOPE: &str = "(tenant_id = $1 OR tenant_id IS NULL)";

const ROLE_SORT: &[(&str, &str)] = &[
    ("name", "name"),
    ("description", "description"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
];

fn decode_role(row: &PgRow) -> StoreResult<RoleRecord> {
    Ok(RoleRecord {
        id: codec::get(row, "id")?,
        tenant_id: codec::opt_tenant(codec::get(row, "tenant_id")?),
        name: codec::get(row, "name")?,
        description: codec::get(row, "description")?,
        permissions: codec::get(row, "permissions")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

/// The organisation of a custom role; platform roles are never written through the store.
fn custom_role_tenant(role: &RoleRecord) -> StoreResult<TenantId> {
    role.tenant_id.ok_or_else(|| StoreError::Backend("only an organisation's custom role can be written".into()))
}

impl PostgresTx {
    /// The role matching `condition`, in which `$1` is the tenant and `$2` the value.
    async fn fetch_role<T>(&mut self, condition: &str, tenant: TenantId, value: T) -> StoreResult<Option<RoleRecord>>
    where
        T: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send + 'static,
    {
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {condition}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(value)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_role).transpose()
    }

    /// Whether a role the organisation sees, other than `except`, has the folded name: platform
    /// names are taken in every organisation, which no unique index can say.
    async fn role_name_taken(&mut self, tenant: TenantId, name_folded: &str, except: Uuid) -> StoreResult<bool> {
        let sql = format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE} AND name_folded = $2 AND id <> $3");
        let count: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(name_folded)
            .bind(except)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(count > 0)
    }
}

#[async_trait]
impl RoleStore for PostgresTx {
    async fn insert(&mut self, role: &RoleRecord) -> StoreResult<()> {
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        // Platform rows never change, so checking them first cannot race; a concurrent custom
        // role of the same name meets the unique index.
        if self.role_name_taken(tenant, &name_folded, role.id).await? {
            return Err(codec::conflict("role name"));
        }
        let done = sqlx::query(
            "INSERT INTO roles (id, tenant_id, name, name_folded, description, permissions, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT DO NOTHING",
        )
        .bind(role.id)
        .bind(tenant.as_uuid())
        .bind(&role.name)
        .bind(&name_folded)
        .bind(&role.description)
        .bind(&role.permissions)
        .bind(role.created_at.as_micros())
        .bind(role.updated_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("role id or name"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(&format!("{ROLE_SCOPE} AND id = $2"), tenant, id).await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<RoleRecord>> {
        // Only a custom role is locked: platform rows never change, and every organisation reads
        // them.
        let custom = self.fetch_role("tenant_id = $1 AND id = $2 FOR UPDATE", tenant, id).await?;
        match custom {
            Some(role) => Ok(Some(role)),
            None => RoleStore::get(self, tenant, id).await,
        }
    }

    async fn find_by_name(&mut self, tenant: TenantId, name: &str) -> StoreResult<Option<RoleRecord>> {
        self.fetch_role(&format!("{ROLE_SCOPE} AND name_folded = $2"), tenant, codec::folded(name)).await
    }

    async fn update(&mut self, role: &RoleRecord) -> StoreResult<()> {
        let tenant = custom_role_tenant(role)?;
        let name_folded = codec::folded(&role.name);
        if self.role_name_taken(tenant, &name_folded, role.id).await? {
            return Err(codec::conflict("role name"));
        }
        // A concurrent role of the same name can still meet the unique index here. Under a
        // savepoint, that violation leaves the transaction usable, as it does on SQLite.
        let mut savepoint = sqlx::Acquire::begin(&mut self.tx).await.map_err(codec::backend)?;
        let outcome = sqlx::query(
            "UPDATE roles SET name = $1, name_folded = $2, description = $3, permissions = $4, updated_at = $5
             WHERE tenant_id = $6 AND id = $7",
        )
        .bind(&role.name)
        .bind(&name_folded)
        .bind(&role.description)
        .bind(&role.permissions)
        .bind(role.updated_at.as_micros())
        .bind(tenant.as_uuid())
        .bind(role.id)
        .execute(&mut *savepoint)
        .await;
        match outcome {
            Ok(_) => savepoint.commit().await.map_err(codec::backend),
            Err(error) => {
                savepoint.rollback().await.map_err(codec::backend)?;
                Err(codec::backend(error))
            }
        }
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        // `tenant_id = $1` never matches a platform row (NULL).
        let done = sqlx::query("DELETE FROM roles WHERE tenant_id = $1 AND id = $2")
            .bind(tenant.as_uuid())
            .bind(id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<RoleRecord>> {
        let total: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM roles WHERE {ROLE_SCOPE}")))
                .bind(tenant.as_uuid())
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, ROLE_SORT)?;
        let sql = format!("SELECT {ROLE_COLUMNS} FROM roles WHERE {ROLE_SCOPE} ORDER BY {order} LIMIT $2 OFFSET $3");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_role).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }

    async fn count_holders(&mut self, tenant: TenantId, role_id: Uuid) -> StoreResult<u64> {
        let count: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM users WHERE tenant_id = $1 AND role_id = $2)
                  + (SELECT COUNT(*) FROM machine_clients WHERE tenant_id = $1 AND role_id = $2 AND active)",
        )
        .bind(tenant.as_uuid())
        .bind(role_id)
        .fetch_one(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(codec::count(count))
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

fn decode_group(row: &PgRow) -> StoreResult<GroupRecord> {
    let status: String = codec::get(row, "status")?;
    Ok(GroupRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        key: codec::get(row, "group_key")?,
        name: codec::get(row, "name")?,
        status: GroupStatus::parse(&status).ok_or_else(|| StoreError::Corrupt(format!("group status {status:?}")))?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

/// The user columns of a join with `users u`, named as in `users`.
fn member_columns() -> String {
    USER_COLUMNS.split(", ").map(|c| format!("u.{c} AS {c}")).collect::<Vec<_>>().join(", ")
}

/// A group's members (`$1` the tenant, `$2` the group): memberships of users still in the
/// organisation.
const MEMBERS: &str = "approval_group_members m JOIN users u ON u.id = m.user_id AND u.tenant_id = m.tenant_id
     WHERE m.tenant_id = $1 AND m.group_id = $2";

impl PostgresTx {
    /// The group matching `condition`, in which `$1` is the tenant and `$2` the value.
    async fn fetch_group<T>(&mut self, condition: &str, tenant: TenantId, value: T) -> StoreResult<Option<GroupRecord>>
    where
        T: for<'q> sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + Send + 'static,
    {
        let sql = format!("SELECT {GROUP_COLUMNS} FROM approval_groups WHERE {condition}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(value)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_group).transpose()
    }
}

#[async_trait]
impl GroupStore for PostgresTx {
    async fn insert(&mut self, group: &GroupRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO approval_groups (id, tenant_id, group_key, key_folded, name, status, created_at, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT DO NOTHING",
        )
        .bind(group.id)
        .bind(group.tenant_id.as_uuid())
        .bind(&group.key)
        .bind(codec::folded(&group.key))
        .bind(&group.name)
        .bind(group.status.as_str())
        .bind(group.created_at.as_micros())
        .bind(group.updated_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("group id or key"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        self.fetch_group("tenant_id = $1 AND id = $2", tenant, id).await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<GroupRecord>> {
        self.fetch_group("tenant_id = $1 AND id = $2 FOR UPDATE", tenant, id).await
    }

    async fn find_by_key(&mut self, tenant: TenantId, key: &str) -> StoreResult<Option<GroupRecord>> {
        self.fetch_group("tenant_id = $1 AND key_folded = $2", tenant, codec::folded(key)).await
    }

    async fn update(&mut self, group: &GroupRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE approval_groups SET name = $1, status = $2, updated_at = $3 WHERE tenant_id = $4 AND id = $5",
        )
        .bind(&group.name)
        .bind(group.status.as_str())
        .bind(group.updated_at.as_micros())
        .bind(group.tenant_id.as_uuid())
        .bind(group.id)
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(&mut self, tenant: TenantId, sort: &[SortKey], page: PageRequest) -> StoreResult<Page<GroupRecord>> {
        let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM approval_groups WHERE tenant_id = $1")
            .bind(tenant.as_uuid())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let order = order_by(sort, GROUP_SORT)?;
        let sql = format!(
            "SELECT {GROUP_COLUMNS} FROM approval_groups WHERE tenant_id = $1 ORDER BY {order} LIMIT $2 OFFSET $3"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_group).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
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
        let done = sqlx::query(
            "INSERT INTO approval_group_members (group_id, user_id, tenant_id, added_at)
             SELECT $1, $2, $3, $4
             WHERE EXISTS (SELECT 1 FROM approval_groups WHERE tenant_id = $3 AND id = $1)
               AND EXISTS (SELECT 1 FROM users WHERE tenant_id = $3 AND id = $2)
             ON CONFLICT DO NOTHING",
        )
        .bind(group_id)
        .bind(user_id)
        .bind(tenant.as_uuid())
        .bind(now.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn remove_member(&mut self, tenant: TenantId, group_id: Uuid, user_id: Uuid) -> StoreResult<bool> {
        let done =
            sqlx::query("DELETE FROM approval_group_members WHERE tenant_id = $1 AND group_id = $2 AND user_id = $3")
                .bind(tenant.as_uuid())
                .bind(group_id)
                .bind(user_id)
                .execute(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        Ok(done.rows_affected() == 1)
    }

    async fn list_members(
        &mut self,
        tenant: TenantId,
        group_id: Uuid,
        page: PageRequest,
    ) -> StoreResult<Page<UserRecord>> {
        let total: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {MEMBERS}")))
            .bind(tenant.as_uuid())
            .bind(group_id)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let sql = format!(
            "SELECT {} FROM {MEMBERS} ORDER BY u.first_name ASC, u.last_name ASC, u.id ASC LIMIT $3 OFFSET $4",
            member_columns()
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(group_id)
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_user).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: codec::count(total) })
    }

    async fn groups_of(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<Vec<Uuid>> {
        sqlx::query_scalar(
            "SELECT g.id FROM approval_group_members m
             JOIN approval_groups g ON g.id = m.group_id AND g.tenant_id = m.tenant_id
             WHERE m.tenant_id = $1 AND m.user_id = $2
             ORDER BY g.group_key ASC, g.id ASC",
        )
        .bind(tenant.as_uuid())
        .bind(user_id)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(codec::backend)
    }

    async fn remove_user(&mut self, tenant: TenantId, user_id: Uuid) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM approval_group_members WHERE tenant_id = $1 AND user_id = $2")
            .bind(tenant.as_uuid())
            .bind(user_id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

// ---------------------------------------------------------------------------------------------
// Signing keys

#[async_trait]
impl SigningKeyStore for PostgresTx {
    async fn list(&mut self) -> StoreResult<Vec<SigningKeyRecord>> {
        let rows = sqlx::query(
            "SELECT kid, sealed_key, created_at, retire_at FROM signing_keys ORDER BY created_at ASC, kid ASC",
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        rows.iter()
            .map(|row| {
                Ok(SigningKeyRecord {
                    kid: codec::get(row, "kid")?,
                    sealed_key: codec::get(row, "sealed_key")?,
                    created_at: codec::ts(codec::get(row, "created_at")?),
                    retire_at: codec::opt_ts(codec::get(row, "retire_at")?),
                })
            })
            .collect()
    }

    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO signing_keys (kid, sealed_key, created_at, retire_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT DO NOTHING",
        )
        .bind(&key.kid)
        .bind(&key.sealed_key)
        .bind(key.created_at.as_micros())
        .bind(key.retire_at.map(Timestamp::as_micros))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("signing key id"));
        }
        Ok(())
    }

    async fn set_retire_at(&mut self, kid: &str, retire_at: Timestamp) -> StoreResult<()> {
        sqlx::query("UPDATE signing_keys SET retire_at = $1 WHERE kid = $2")
            .bind(retire_at.as_micros())
            .bind(kid)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn delete_retired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM signing_keys WHERE retire_at IS NOT NULL AND retire_at < $1")
            .bind(cutoff.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

// ---------------------------------------------------------------------------------------------
// Refresh tokens and challenge sessions

#[async_trait]
impl RefreshTokenStore for PostgresTx {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO refresh_tokens (token_hash, user_id, tenant_id, expires_at, revoked_at, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT DO NOTHING",
        )
        .bind(&token.token_hash)
        .bind(token.user_id)
        .bind(token.tenant_id.as_uuid())
        .bind(token.expires_at.as_micros())
        .bind(token.revoked_at.map(Timestamp::as_micros))
        .bind(token.created_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("refresh token"));
        }
        Ok(())
    }

    async fn get(&mut self, token_hash: &str) -> StoreResult<Option<RefreshTokenRecord>> {
        let row = sqlx::query(
            "SELECT token_hash, user_id, tenant_id, expires_at, revoked_at, created_at
             FROM refresh_tokens WHERE token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(RefreshTokenRecord {
            token_hash: codec::get(&row, "token_hash")?,
            user_id: codec::get(&row, "user_id")?,
            tenant_id: TenantId(codec::get(&row, "tenant_id")?),
            expires_at: codec::ts(codec::get(&row, "expires_at")?),
            revoked_at: codec::opt_ts(codec::get(&row, "revoked_at")?),
            created_at: codec::ts(codec::get(&row, "created_at")?),
        }))
    }

    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("UPDATE refresh_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
            .bind(now.as_micros())
            .bind(user_id)
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }

    async fn delete_expired(&mut self, cutoff: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM refresh_tokens WHERE expires_at < $1")
            .bind(cutoff.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl ChallengeStore for PostgresTx {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()> {
        let done = sqlx::query(
            "INSERT INTO challenges (session_hash, user_id, expires_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        )
        .bind(&challenge.session_hash)
        .bind(challenge.user_id)
        .bind(challenge.expires_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("challenge session"));
        }
        Ok(())
    }

    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>> {
        // An expired challenge is deleted too: it can never be used again. Two concurrent takes
        // of one session: the second waits for the first's row lock and then deletes nothing.
        let row =
            sqlx::query("DELETE FROM challenges WHERE session_hash = $1 RETURNING session_hash, user_id, expires_at")
                .bind(session_hash)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        let challenge = ChallengeRecord {
            session_hash: codec::get(&row, "session_hash")?,
            user_id: codec::get(&row, "user_id")?,
            expires_at: codec::ts(codec::get(&row, "expires_at")?),
        };
        Ok((now < challenge.expires_at).then_some(challenge))
    }

    async fn delete_expired(&mut self, now: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("DELETE FROM challenges WHERE expires_at < $1")
            .bind(now.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

/// See `Store::subject_standing`: both lookups in one statement, outside any transaction.
pub(crate) async fn subject_standing(
    pool: &sqlx::PgPool,
    tenant: Option<TenantId>,
    id: Uuid,
) -> StoreResult<SubjectStanding> {
    let rows = sqlx::query(
        "SELECT 'user' AS kind, tenant_id, status = 'ACTIVE' AS active, role_id FROM users
         WHERE id = $1 AND tenant_id = $2
         UNION ALL
         SELECT 'client', tenant_id, active, role_id FROM machine_clients WHERE id = $1",
    )
    .bind(id)
    .bind(tenant.map(TenantId::as_uuid))
    .fetch_all(pool)
    .await
    .map_err(codec::backend)?;
    let mut standing = SubjectStanding::default();
    for row in &rows {
        let kind: String = codec::get(row, "kind")?;
        let found = Standing {
            tenant: codec::opt_tenant(codec::get(row, "tenant_id")?),
            active: codec::get(row, "active")?,
            role_id: codec::get(row, "role_id")?,
        };
        match kind.as_str() {
            "user" => standing.user = Some(found),
            _ => standing.client = Some(found),
        }
    }
    Ok(standing)
}
