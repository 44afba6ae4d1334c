//! Token operations, locks, breaks and positions on SQLite.
//!
//! Lists are built from the filters actually given (each a fixed fragment, numbered after the
//! tenant), so that every combination is a plain indexed statement rather than one statement
//! with `$n IS NULL OR …` terms the planner cannot index. No request text reaches the SQL.
//! Assets are stored as their upper-case code, as for contracts and accounts.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::{SqliteArguments, SqliteRow};
use tokenops_domain::account::AccountRef;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::operation::{BreakReason, FailureCode, LockStatus, OperationState, TxType};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    BreakFilter, BreakRecord, BreakStore, LockRecord, LockStore, OperationFilter, OperationRecord, OperationStore,
    Position, PositionStore, StoreError, StoreResult,
};
use uuid::Uuid;

fn get<'r, T>(row: &'r SqliteRow, name: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(name).map_err(codec::backend)
}

/// An asset code as stored: its ASCII letters upper-cased.
fn asset_key(asset_id: &str) -> String {
    asset_id.to_ascii_uppercase()
}

fn int(value: u64) -> StoreResult<i64> {
    i64::try_from(value).map_err(|_| StoreError::Backend(format!("{value} does not fit an INTEGER column").into()))
}

fn uint(value: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what}: {value}")))
}

fn page_limits(page: PageRequest) -> (i64, i64) {
    (i64::from(page.size), i64::try_from(page.offset()).unwrap_or(i64::MAX))
}

fn parsed<T>(text: &str, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("{what} {text:?}")))
}

/// A value bound to a list's dynamic WHERE clause.
enum Bind {
    Int(i64),
    Text(String),
}

/// The WHERE clause of a list: `tenant_id = $1`, then each filter given, its parameters
/// numbered in order.
struct Clause {
    sql: String,
    binds: Vec<Bind>,
}

impl Clause {
    fn new() -> Self {
        Self { sql: String::from("tenant_id = $1"), binds: Vec::new() }
    }

    /// Binds `value` and returns its placeholder.
    fn param(&mut self, value: Bind) -> String {
        self.binds.push(value);
        format!("${}", self.binds.len() + 1)
    }

    fn and(&mut self, fragment: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(fragment);
    }

    /// The next free placeholder number (for LIMIT and OFFSET).
    fn next(&self) -> usize {
        self.binds.len() + 2
    }

    fn bind<'q>(
        &self,
        tenant: TenantId,
        mut query: sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments>,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments> {
        query = query.bind(codec::id_text(tenant.as_uuid()));
        for b in &self.binds {
            query = match b {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(v) => query.bind(v.clone()),
            };
        }
        query
    }

    /// Runs `sql`, a `SELECT COUNT(*)` over the clause: a list's total.
    async fn count(&self, tenant: TenantId, sql: String, conn: &mut sqlx::SqliteConnection) -> StoreResult<u64> {
        let count: i64 = self
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .fetch_one(conn)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(codec::backend)?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

// ---------------------------------------------------------------------------------------------
// Operations

const OPERATION_COLUMNS: &str = "id, tenant_id, tx_type, asset_id, account_ref, customer_ref, counterparty_ref, amount, params, lock_id, state, tx_hash, block_number, failure_code, reason_code, signed_transaction, submitted_by, idempotency_key, correlation_id, created_at, updated_at";

fn decode_operation(row: &SqliteRow) -> StoreResult<OperationRecord> {
    let tx_type: String = get(row, "tx_type")?;
    let state: String = get(row, "state")?;
    let failure_code: Option<String> = get(row, "failure_code")?;
    let params: String = get(row, "params")?;
    Ok(OperationRecord {
        id: codec::uuid(&get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&get::<String>(row, "tenant_id")?)?,
        tx_type: parsed(&tx_type, "operation type", TxType::parse)?,
        asset_id: get(row, "asset_id")?,
        account_ref: AccountRef::from_stored(get(row, "account_ref")?),
        customer_ref: CustomerRef::from_stored(get(row, "customer_ref")?),
        counterparty_ref: get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        amount: get(row, "amount")?,
        params: codec::json(&params)?,
        lock_id: codec::opt_uuid(get(row, "lock_id")?)?,
        state: parsed(&state, "operation state", OperationState::parse)?,
        tx_hash: get(row, "tx_hash")?,
        block_number: get::<Option<i64>>(row, "block_number")?.map(|n| uint(n, "block number")).transpose()?,
        failure_code: failure_code.as_deref().map(|c| parsed(c, "failure code", FailureCode::parse)).transpose()?,
        reason_code: get(row, "reason_code")?,
        signed_transaction: get(row, "signed_transaction")?,
        submitted_by: get(row, "submitted_by")?,
        idempotency_key: get(row, "idempotency_key")?,
        correlation_id: get(row, "correlation_id")?,
        created_at: codec::ts(get(row, "created_at")?),
        updated_at: codec::ts(get(row, "updated_at")?),
    })
}

/// An operation list's selection: the filters after `tenant_id = $1`, and the placeholder of
/// the account filter if there is one.
///
/// An account's operations are those it originates and those it is the counterparty of: two
/// selections, one per index, merged in list order (`UNION ALL`, which SQLite merges from two
/// ordered index scans), the second leaving out what the first has. An `OR` of the two would
/// scan the whole organisation's list instead. With an account, the state is compared as
/// `+state`, which keeps SQLite (which has no statistics here) on the account's indexes.
struct OperationSelection {
    clause: Clause,
    account: Option<String>,
}

impl OperationSelection {
    fn new(filter: &OperationFilter, after: Option<KeysetPosition>) -> Self {
        let mut clause = Clause::new();
        let account = filter.account_ref.as_ref().map(|a| clause.param(Bind::Text(a.as_str().to_owned())));
        if let Some(state) = filter.state {
            let p = clause.param(Bind::Text(state.as_str().to_owned()));
            let column = if account.is_some() { "+state" } else { "state" };
            clause.and(&format!("{column} = {p}"));
        }
        if let Some(tx_type) = filter.tx_type {
            let p = clause.param(Bind::Text(tx_type.as_str().to_owned()));
            clause.and(&format!("tx_type = {p}"));
        }
        if let Some(after) = after {
            let at = clause.param(Bind::Int(after.at_micros));
            let id = clause.param(Bind::Text(codec::id_text(after.id)));
            clause.and(&format!("(created_at < {at} OR (created_at = {at} AND id < {id}))"));
        }
        Self { clause, account }
    }

    /// The WHERE clause of each selection whose rows together are the list's (disjoint).
    fn wheres(&self) -> Vec<String> {
        let base = &self.clause.sql;
        match &self.account {
            None => vec![base.clone()],
            Some(p) => vec![
                format!("{base} AND account_ref = {p}"),
                format!("{base} AND counterparty_ref = {p} AND account_ref <> {p}"),
            ],
        }
    }

    fn count_sql(&self) -> String {
        let counts: Vec<String> =
            self.wheres().iter().map(|w| format!("(SELECT COUNT(*) FROM operations WHERE {w})")).collect();
        format!("SELECT {}", counts.join(" + "))
    }

    /// The rows, newest first, then `window` (LIMIT and OFFSET) numbered after the filters.
    fn rows_sql(&self, window: &str) -> String {
        let selects: Vec<String> =
            self.wheres().iter().map(|w| format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE {w}")).collect();
        format!("{} ORDER BY created_at DESC, id DESC {window}", selects.join(" UNION ALL "))
    }
}

#[async_trait]
impl OperationStore for SqliteTx {
    async fn insert(&mut self, op: &OperationRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO operations ({OPERATION_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(op.id))
            .bind(codec::id_text(op.tenant_id.as_uuid()))
            .bind(op.tx_type.as_str())
            .bind(asset_key(&op.asset_id))
            .bind(op.account_ref.as_str())
            .bind(op.customer_ref.as_str())
            .bind(op.counterparty_ref.as_ref().map(AccountRef::as_str))
            .bind(op.amount)
            .bind(codec::json_text(&op.params))
            .bind(op.lock_id.map(codec::id_text))
            .bind(op.state.as_str())
            .bind(op.tx_hash.as_deref())
            .bind(op.block_number.map(int).transpose()?)
            .bind(op.failure_code.map(FailureCode::as_str))
            .bind(op.reason_code.as_deref())
            .bind(op.signed_transaction.as_deref())
            .bind(&op.submitted_by)
            .bind(op.idempotency_key.as_deref())
            .bind(op.correlation_id.as_deref())
            .bind(op.created_at.as_micros())
            .bind(op.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        let sql = format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(codec::id_text(id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_operation).transpose()
    }

    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<OperationRecord>> {
        let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL
             ORDER BY created_at, id LIMIT $1"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(i64::from(limit))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_operation).collect()
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading an operation for update")?;
        OperationStore::get(self, tenant, id).await
    }

    async fn update(&mut self, op: &OperationRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE operations SET state = $1, tx_hash = $2, block_number = $3, failure_code = $4, reason_code = $5,
                                   signed_transaction = $6, updated_at = $7
             WHERE tenant_id = $8 AND id = $9",
        )
        .bind(op.state.as_str())
        .bind(op.tx_hash.as_deref())
        .bind(op.block_number.map(int).transpose()?)
        .bind(op.failure_code.map(FailureCode::as_str))
        .bind(op.reason_code.as_deref())
        .bind(op.signed_transaction.as_deref())
        .bind(op.updated_at.as_micros())
        .bind(codec::id_text(op.tenant_id.as_uuid()))
        .bind(codec::id_text(op.id))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> StoreResult<Page<OperationRecord>> {
        let selection = OperationSelection::new(filter, None);
        let clause = &selection.clause;
        let total = clause.count(tenant, selection.count_sql(), &mut self.tx).await?;
        let n = clause.next();
        let sql = selection.rows_sql(&format!("LIMIT ${n} OFFSET ${}", n + 1));
        let (limit, offset) = page_limits(page);
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(limit)
            .bind(offset)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_operation).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total })
    }

    async fn list_after(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<OperationRecord>> {
        let selection = OperationSelection::new(filter, window.after);
        let clause = &selection.clause;
        let sql = selection.rows_sql(&format!("LIMIT ${}", clause.next()));
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(i64::from(window.limit))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_operation).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Locks

const LOCK_COLUMNS: &str = "id, tenant_id, account_ref, counterparty_ref, asset_id, amount, expires_at, status, completed_by, created_at, updated_at";

fn decode_lock(row: &SqliteRow) -> StoreResult<LockRecord> {
    let status: String = get(row, "status")?;
    Ok(LockRecord {
        id: codec::uuid(&get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&get::<String>(row, "tenant_id")?)?,
        account_ref: AccountRef::from_stored(get(row, "account_ref")?),
        counterparty_ref: get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        asset_id: get(row, "asset_id")?,
        amount: get(row, "amount")?,
        expires_at: get::<Option<i64>>(row, "expires_at")?.map(codec::ts),
        status: parsed(&status, "lock status", LockStatus::parse)?,
        completed_by: codec::opt_uuid(get(row, "completed_by")?)?,
        created_at: codec::ts(get(row, "created_at")?),
        updated_at: codec::ts(get(row, "updated_at")?),
    })
}

#[async_trait]
impl LockStore for SqliteTx {
    async fn insert(&mut self, lock: &LockRecord) -> StoreResult<()> {
        let sql = format!("INSERT INTO locks ({LOCK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(lock.id))
            .bind(codec::id_text(lock.tenant_id.as_uuid()))
            .bind(lock.account_ref.as_str())
            .bind(lock.counterparty_ref.as_ref().map(AccountRef::as_str))
            .bind(asset_key(&lock.asset_id))
            .bind(lock.amount)
            .bind(lock.expires_at.map(Timestamp::as_micros))
            .bind(lock.status.as_str())
            .bind(lock.completed_by.map(codec::id_text))
            .bind(lock.created_at.as_micros())
            .bind(lock.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        let sql = format!("SELECT {LOCK_COLUMNS} FROM locks WHERE tenant_id = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(codec::id_text(id))
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_lock).transpose()
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a lock for update")?;
        LockStore::get(self, tenant, id).await
    }

    async fn update(&mut self, lock: &LockRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE locks SET status = $1, completed_by = $2, updated_at = $3
             WHERE tenant_id = $4 AND id = $5",
        )
        .bind(lock.status.as_str())
        .bind(lock.completed_by.map(codec::id_text))
        .bind(lock.updated_at.as_micros())
        .bind(codec::id_text(lock.tenant_id.as_uuid()))
        .bind(codec::id_text(lock.id))
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn list_for_account(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        status: Option<LockStatus>,
        page: PageRequest,
    ) -> StoreResult<Page<LockRecord>> {
        let mut clause = Clause::new();
        let p = clause.param(Bind::Text(account_ref.as_str().to_owned()));
        clause.and(&format!("account_ref = {p}"));
        if let Some(status) = status {
            let p = clause.param(Bind::Text(status.as_str().to_owned()));
            clause.and(&format!("status = {p}"));
        }
        let count_sql = format!("SELECT COUNT(*) FROM locks WHERE {}", clause.sql);
        let total = clause.count(tenant, count_sql, &mut self.tx).await?;
        let n = clause.next();
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks WHERE {}
             ORDER BY created_at DESC, id DESC LIMIT ${n} OFFSET ${}",
            clause.sql,
            n + 1
        );
        let (limit, offset) = page_limits(page);
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(limit)
            .bind(offset)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_lock).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total })
    }

    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<LockRecord>> {
        // The predicate of the partial index `locks_expiring`, spelled as it is there.
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks
             WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL AND expires_at <= $1
             ORDER BY expires_at ASC, id ASC LIMIT $2"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(now.as_micros())
            .bind(i64::from(limit))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        rows.iter().map(decode_lock).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// Breaks

const BREAK_COLUMNS: &str = "id, tenant_id, transaction_id, account_ref, asset_id, reason, detail, detected_at";

fn decode_break(row: &SqliteRow) -> StoreResult<BreakRecord> {
    let reason: String = get(row, "reason")?;
    Ok(BreakRecord {
        id: codec::uuid(&get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&get::<String>(row, "tenant_id")?)?,
        transaction_id: codec::opt_uuid(get(row, "transaction_id")?)?,
        account_ref: AccountRef::from_stored(get(row, "account_ref")?),
        asset_id: get(row, "asset_id")?,
        reason: parsed(&reason, "break reason", BreakReason::parse)?,
        detail: get(row, "detail")?,
        detected_at: codec::ts(get(row, "detected_at")?),
    })
}

#[async_trait]
impl BreakStore for SqliteTx {
    async fn insert(&mut self, record: &BreakRecord) -> StoreResult<()> {
        let sql = format!("INSERT INTO breaks ({BREAK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(codec::id_text(record.id))
            .bind(codec::id_text(record.tenant_id.as_uuid()))
            .bind(record.transaction_id.map(codec::id_text))
            .bind(record.account_ref.as_str())
            .bind(asset_key(&record.asset_id))
            .bind(record.reason.as_str())
            .bind(&record.detail)
            .bind(record.detected_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &BreakFilter,
        page: PageRequest,
    ) -> StoreResult<Page<BreakRecord>> {
        let mut clause = Clause::new();
        if let Some(reason) = filter.reason {
            let p = clause.param(Bind::Text(reason.as_str().to_owned()));
            clause.and(&format!("reason = {p}"));
        }
        if let Some(account) = &filter.account_ref {
            let p = clause.param(Bind::Text(account.as_str().to_owned()));
            clause.and(&format!("account_ref = {p}"));
        }
        if let Some(from) = filter.from {
            let p = clause.param(Bind::Int(from.as_micros()));
            clause.and(&format!("detected_at >= {p}"));
        }
        if let Some(to) = filter.to {
            let p = clause.param(Bind::Int(to.as_micros()));
            clause.and(&format!("detected_at < {p}"));
        }
        let count_sql = format!("SELECT COUNT(*) FROM breaks WHERE {}", clause.sql);
        let total = clause.count(tenant, count_sql, &mut self.tx).await?;
        let n = clause.next();
        let sql = format!(
            "SELECT {BREAK_COLUMNS} FROM breaks WHERE {}
             ORDER BY detected_at DESC, id DESC LIMIT ${n} OFFSET ${}",
            clause.sql,
            n + 1
        );
        let (limit, offset) = page_limits(page);
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(limit)
            .bind(offset)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let items = rows.iter().map(decode_break).collect::<StoreResult<Vec<_>>>()?;
        Ok(Page { items, total })
    }
}

// ---------------------------------------------------------------------------------------------
// Positions

#[async_trait]
impl PositionStore for SqliteTx {
    async fn apply(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        total_delta: i64,
        held_delta: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        // An overflowing sum becomes a REAL, which the STRICT INTEGER column refuses.
        sqlx::query(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = total + excluded.total,
                                                                held = held + excluded.held,
                                                                updated_at = excluded.updated_at",
        )
        .bind(codec::id_text(tenant.as_uuid()))
        .bind(account_ref.as_str())
        .bind(total_delta)
        .bind(held_delta)
        .bind(now.as_micros())
        .execute(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position> {
        let row = sqlx::query("SELECT total, held FROM positions WHERE tenant_id = $1 AND account_ref = $2")
            .bind(codec::id_text(tenant.as_uuid()))
            .bind(account_ref.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        match row {
            Some(row) => Ok(Position { total: get(&row, "total")?, held: get(&row, "held")? }),
            None => Ok(Position::default()),
        }
    }
}
