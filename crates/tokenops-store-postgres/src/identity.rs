//! Identity and organisations on PostgreSQL: tenants, users, machine clients, signing keys,
//! refresh tokens and challenge sessions.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count: a unique violation would abort the transaction, and callers go on as on SQLite.

use crate::audit::prefix_regex;
use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::postgres::PgRow;
use tokenops_domain::paging::{Page, PageRequest, SortKey};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    ChallengeRecord, ChallengeStore, MachineClientRecord, MachineClientStore, RefreshTokenRecord, RefreshTokenStore,
    SigningKeyRecord, SigningKeyStore, StoreError, StoreResult, TenantRecord, TenantStore, UserFilter, UserRecord,
    UserStatus, UserStore,
};
use uuid::Uuid;

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
        let mut order: Vec<String> = sort.iter().map(|k| format!("{} {}", k.column, k.direction.sql())).collect();
        order.push("id ASC".to_owned());
        let sql = format!(
            "SELECT {USER_COLUMNS} FROM users WHERE {USER_FILTER} ORDER BY {} LIMIT $5 OFFSET $6",
            order.join(", ")
        );
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
        let row = sqlx::query(
            "SELECT id, tenant_id, name, role_id, secret_hash, active, created_at FROM machine_clients WHERE id = $1",
        )
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(MachineClientRecord {
            id: codec::get(&row, "id")?,
            tenant_id: codec::opt_tenant(codec::get(&row, "tenant_id")?),
            name: codec::get(&row, "name")?,
            role_id: codec::get(&row, "role_id")?,
            secret_hash: codec::get(&row, "secret_hash")?,
            active: codec::get(&row, "active")?,
            created_at: codec::ts(codec::get(&row, "created_at")?),
        }))
    }

    async fn count_operator_clients(&mut self) -> StoreResult<u64> {
        let row = sqlx::query("SELECT COUNT(*) AS total FROM machine_clients WHERE tenant_id IS NULL")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(codec::count(codec::get(&row, "total")?))
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
}
