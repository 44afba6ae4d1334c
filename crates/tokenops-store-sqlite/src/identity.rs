//! Identity and organisations on SQLite: tenants, users, machine clients, signing keys, refresh
//! tokens and challenge sessions.

use crate::audit::prefix_glob;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    ChallengeRecord, ChallengeStore, MachineClientRecord, MachineClientStore, RefreshTokenRecord, RefreshTokenStore,
    SigningKeyRecord, SigningKeyStore, StoreError, StoreResult, TenantRecord, TenantStore, UserFilter, UserRecord,
    UserStatus, UserStore,
};
use uuid::Uuid;

fn text(row: &SqliteRow, name: &str) -> StoreResult<String> {
    row.try_get(name).map_err(codec::backend)
}

fn opt_text(row: &SqliteRow, name: &str) -> StoreResult<Option<String>> {
    row.try_get(name).map_err(codec::backend)
}

fn int(row: &SqliteRow, name: &str) -> StoreResult<i64> {
    row.try_get(name).map_err(codec::backend)
}

fn opt_ts(row: &SqliteRow, name: &str) -> StoreResult<Option<Timestamp>> {
    Ok(row.try_get::<Option<i64>, _>(name).map_err(codec::backend)?.map(codec::ts))
}

// ---------------------------------------------------------------------------------------------
// Organisations

fn decode_tenant(row: &SqliteRow) -> StoreResult<TenantRecord> {
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
        sqlx::query(
            "INSERT INTO tenants (id, name, owner_user_id, created_at, updated_at) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(codec::id_text(tenant.id.as_uuid()))
        .bind(&tenant.name)
        .bind(codec::id_text(tenant.owner_user_id))
        .bind(tenant.created_at.as_micros())
        .bind(tenant.updated_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, id: TenantId) -> StoreResult<Option<TenantRecord>> {
        let row = sqlx::query("SELECT id, name, owner_user_id, created_at, updated_at FROM tenants WHERE id = $1")
            .bind(codec::id_text(id.as_uuid()))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_tenant).transpose()
    }
}

// ---------------------------------------------------------------------------------------------
// Users

const USER_COLUMNS: &str = "id, tenant_id, email, first_name, last_name, status, role_id, password_hash, temporary_password_hash, failed_sign_ins, first_failed_sign_in_at, locked_until, created_at, updated_at";

/// The filter shared by the count and the page: `$1` the tenant, `$2` the status, `$3` the role,
/// `$4` the search pattern (each NULL when not filtered on).
const USER_FILTER: &str = "tenant_id = $1 AND ($2 IS NULL OR status = $2) AND ($3 IS NULL OR role_id = $3)
     AND ($4 IS NULL OR email GLOB $4 OR first_name GLOB $4 OR last_name GLOB $4)";

fn decode_user(row: &SqliteRow) -> StoreResult<UserRecord> {
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
    async fn fetch_user(&mut self, condition: &str, binds: &[String]) -> StoreResult<Option<UserRecord>> {
        let sql = format!("SELECT {USER_COLUMNS} FROM users WHERE {condition}");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in binds {
            query = query.bind(value.clone());
        }
        let row = query.fetch_optional(&mut *self.tx).await.map_err(codec::backend)?;
        row.as_ref().map(decode_user).transpose()
    }
}

#[async_trait]
impl UserStore for SqliteTx {
    async fn insert(&mut self, user: &UserRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO users ({USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(user.id))
            .bind(codec::id_text(user.tenant_id.as_uuid()))
            .bind(user.email.to_lowercase())
            .bind(&user.first_name)
            .bind(&user.last_name)
            .bind(user.status.as_str())
            .bind(codec::id_text(user.role_id))
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
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("tenant_id = $1 AND id = $2", &[codec::id_text(tenant.as_uuid()), codec::id_text(id)]).await
    }

    async fn get_any(&mut self, id: Uuid) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("id = $1", &[codec::id_text(id)]).await
    }

    async fn find_by_email(&mut self, email: &str) -> StoreResult<Option<UserRecord>> {
        self.fetch_user("email = $1", &[email.to_lowercase()]).await
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
        .bind(codec::id_text(user.role_id))
        .bind(user.password_hash.as_deref())
        .bind(user.temporary_password_hash.as_deref())
        .bind(i64::from(user.failed_sign_ins))
        .bind(user.first_failed_sign_in_at.map(Timestamp::as_micros))
        .bind(user.locked_until.map(Timestamp::as_micros))
        .bind(user.updated_at.as_micros())
        .bind(codec::id_text(user.tenant_id.as_uuid()))
        .bind(codec::id_text(user.id))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn delete(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<bool> {
        let done = sqlx::query("DELETE FROM users WHERE tenant_id = $1 AND id = $2")
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(codec::id_text(id))
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
        let tenant_text = codec::id_text(tenant.as_uuid());
        let status = filter.status.map(UserStatus::as_str);
        let role = filter.role_id.map(codec::id_text);
        let pattern = filter.search.as_deref().map(prefix_glob);
        let total: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM users WHERE {USER_FILTER}")))
                .bind(&tenant_text)
                .bind(status)
                .bind(role.as_deref())
                .bind(pattern.as_deref())
                .fetch_one(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        // Sort columns come from the endpoint's allow list (`SortKey::column`), never the request.
        let mut order: Vec<String> = sort.iter().map(|k| format!("{} {}", k.column, k.direction.sql())).collect();
        order.push("id ASC".to_owned());
        let sql = format!(
            "SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {} LIMIT $5 OFFSET $6",
            order.join(", ")
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&tenant_text)
            .bind(status)
            .bind(role.as_deref())
            .bind(pattern.as_deref())
            .bind(i64::from(page.size))
            .bind(i64::try_from(page.offset()).unwrap_or(i64::MAX))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_user).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total: u64::try_from(total).unwrap_or(0) })
    }
}

// ---------------------------------------------------------------------------------------------
// Machine clients

#[async_trait]
impl MachineClientStore for SqliteTx {
    async fn insert(&mut self, client: &MachineClientRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO machine_clients (id, tenant_id, name, role_id, secret_hash, active, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(codec::id_text(client.id))
        .bind(client.tenant_id.map(|t| codec::id_text(t.as_uuid())))
        .bind(&client.name)
        .bind(client.role_id.map(codec::id_text))
        .bind(&client.secret_hash)
        .bind(i64::from(client.active))
        .bind(client.created_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, id: Uuid) -> StoreResult<Option<MachineClientRecord>> {
        let row = sqlx::query(
            "SELECT id, tenant_id, name, role_id, secret_hash, active, created_at FROM machine_clients WHERE id = $1",
        )
        .bind(codec::id_text(id))
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(MachineClientRecord {
            id: codec::uuid(&text(&row, "id")?)?,
            tenant_id: codec::opt_tenant(opt_text(&row, "tenant_id")?)?,
            name: text(&row, "name")?,
            role_id: codec::opt_uuid(opt_text(&row, "role_id")?)?,
            secret_hash: text(&row, "secret_hash")?,
            active: int(&row, "active")? != 0,
            created_at: codec::ts(int(&row, "created_at")?),
        }))
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM machine_clients WHERE tenant_id IS NULL")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

// ---------------------------------------------------------------------------------------------
// Signing keys

#[async_trait]
impl SigningKeyStore for SqliteTx {
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
                    kid: text(row, "kid")?,
                    sealed_key: text(row, "sealed_key")?,
                    created_at: codec::ts(int(row, "created_at")?),
                    retire_at: opt_ts(row, "retire_at")?,
                })
            })
            .collect()
    }

    async fn insert(&mut self, key: &SigningKeyRecord) -> StoreResult<()> {
        sqlx::query("INSERT INTO signing_keys (kid, sealed_key, created_at, retire_at) VALUES ($1, $2, $3, $4)")
            .bind(&key.kid)
            .bind(&key.sealed_key)
            .bind(key.created_at.as_micros())
            .bind(key.retire_at.map(Timestamp::as_micros))
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
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
impl RefreshTokenStore for SqliteTx {
    async fn insert(&mut self, token: &RefreshTokenRecord) -> StoreResult<()> {
        sqlx::query(
            "INSERT INTO refresh_tokens (token_hash, user_id, tenant_id, expires_at, revoked_at, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&token.token_hash)
        .bind(codec::id_text(token.user_id))
        .bind(codec::id_text(token.tenant_id.as_uuid()))
        .bind(token.expires_at.as_micros())
        .bind(token.revoked_at.map(Timestamp::as_micros))
        .bind(token.created_at.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
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
            token_hash: text(&row, "token_hash")?,
            user_id: codec::uuid(&text(&row, "user_id")?)?,
            tenant_id: codec::tenant(&text(&row, "tenant_id")?)?,
            expires_at: codec::ts(int(&row, "expires_at")?),
            revoked_at: opt_ts(&row, "revoked_at")?,
            created_at: codec::ts(int(&row, "created_at")?),
        }))
    }

    async fn revoke_for_user(&mut self, user_id: Uuid, now: Timestamp) -> StoreResult<u64> {
        let done = sqlx::query("UPDATE refresh_tokens SET revoked_at = $1 WHERE user_id = $2 AND revoked_at IS NULL")
            .bind(now.as_micros())
            .bind(codec::id_text(user_id))
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl ChallengeStore for SqliteTx {
    async fn insert(&mut self, challenge: &ChallengeRecord) -> StoreResult<()> {
        sqlx::query("INSERT INTO challenges (session_hash, user_id, expires_at) VALUES ($1, $2, $3)")
            .bind(&challenge.session_hash)
            .bind(codec::id_text(challenge.user_id))
            .bind(challenge.expires_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn take(&mut self, session_hash: &str, now: Timestamp) -> StoreResult<Option<ChallengeRecord>> {
        // An expired challenge is deleted too: it can never be used again.
        let row =
            sqlx::query("DELETE FROM challenges WHERE session_hash = $1 RETURNING session_hash, user_id, expires_at")
                .bind(session_hash)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        let challenge = ChallengeRecord {
            session_hash: text(&row, "session_hash")?,
            user_id: codec::uuid(&text(&row, "user_id")?)?,
            expires_at: codec::ts(int(&row, "expires_at")?),
        };
        Ok((now < challenge.expires_at).then_some(challenge))
    }
}
