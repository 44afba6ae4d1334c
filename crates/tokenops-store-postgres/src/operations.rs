//! Token operations, locks, breaks and positions on PostgreSQL.
//!
//! Inserts use `ON CONFLICT DO NOTHING` and report a duplicate as `StoreError::Conflict` from the
//! row count: a unique violation would abort the transaction, and callers go on as on SQLite.
//!
//! Lists are built from the filters actually given (each a fixed fragment, numbered after the
//! tenant), so that every combination, prepared once and planned generically, is a plain
//! indexed statement rather than one with `$n IS NULL OR …` terms. No request text reaches the
//! SQL. Assets are stored as their upper-case code, as for contracts and accounts.

use crate::{PostgresTx, codec};
use async_trait::async_trait;
use sqlx::Postgres;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use tokenops_domain::account::AccountRef;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::operation::{BreakReason, FailureCode, LockStatus, OperationState, TxType};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::{
    BreakFilter, BreakRecord, BreakStore, InFlight, LockRecord, LockStore, OperationFilter, OperationRecord,
    OperationStore, Position, PositionStore, StoreError, StoreResult,
};
use uuid::Uuid;

/// An asset code as stored: its ASCII letters upper-cased.
fn asset_key(asset_id: &str) -> String {
    asset_id.to_ascii_uppercase()
}

fn int(value: u64) -> StoreResult<i64> {
    i64::try_from(value).map_err(|_| StoreError::Backend(format!("{value} does not fit a BIGINT column").into()))
}

fn uint(value: i64, what: &str) -> StoreResult<u64> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt(format!("negative {what}: {value}")))
}

fn parsed<T>(text: &str, what: &str, parse: impl FnOnce(&str) -> Option<T>) -> StoreResult<T> {
    parse(text).ok_or_else(|| StoreError::Corrupt(format!("{what} {text:?}")))
}

/// A value bound to a list's dynamic WHERE clause.
enum Bind {
    Int(i64),
    Text(String),
    Id(Uuid),
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
        mut query: Query<'q, Postgres, PgArguments>,
    ) -> Query<'q, Postgres, PgArguments> {
        query = query.bind(tenant.as_uuid());
        for b in &self.binds {
            query = match b {
                Bind::Int(v) => query.bind(*v),
                Bind::Text(v) => query.bind(v.clone()),
                Bind::Id(v) => query.bind(*v),
            };
        }
        query
    }

    /// Runs `sql`, a `SELECT COUNT(*) AS total` over the clause: a list's total.
    async fn count(&self, tenant: TenantId, sql: String, conn: &mut sqlx::PgConnection) -> StoreResult<u64> {
        let row =
            self.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).fetch_one(conn).await.map_err(codec::backend)?;
        Ok(codec::count(codec::get(&row, "total")?))
    }
}

// ---------------------------------------------------------------------------------------------
// Operations

const OPERATION_COLUMNS: &str = "id, tenant_id, tx_type, asset_id, account_ref, customer_ref, counterparty_ref, amount, params, lock_id, state, tx_hash, block_number, failure_code, reason_code, signed_transaction, submitted_by, idempotency_key, correlation_id, created_at, updated_at";

fn decode_operation(row: &PgRow) -> StoreResult<OperationRecord> {
    let tx_type: String = codec::get(row, "tx_type")?;
    let state: String = codec::get(row, "state")?;
    let failure_code: Option<String> = codec::get(row, "failure_code")?;
    Ok(OperationRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        tx_type: parsed(&tx_type, "operation type", TxType::parse)?,
        asset_id: codec::get(row, "asset_id")?,
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        customer_ref: CustomerRef::from_stored(codec::get(row, "customer_ref")?),
        counterparty_ref: codec::get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        amount: codec::get(row, "amount")?,
        params: codec::get(row, "params")?,
        lock_id: codec::get(row, "lock_id")?,
        state: parsed(&state, "operation state", OperationState::parse)?,
        tx_hash: codec::get(row, "tx_hash")?,
        block_number: codec::get::<Option<i64>>(row, "block_number")?.map(|n| uint(n, "block number")).transpose()?,
        failure_code: failure_code.as_deref().map(|c| parsed(c, "failure code", FailureCode::parse)).transpose()?,
        reason_code: codec::get(row, "reason_code")?,
        signed_transaction: codec::get(row, "signed_transaction")?,
        submitted_by: codec::get(row, "submitted_by")?,
        idempotency_key: codec::get(row, "idempotency_key")?,
        correlation_id: codec::get(row, "correlation_id")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

/// An operation list's selection: the filters after `tenant_id = $1`, and the placeholder of
/// the account filter if there is one.
///
/// An account's operations are those it originates and those it is the counterparty of: two
/// selections, one per index, the second leaving out what the first has. Each is cut to the
/// rows the page can need (`ORDER BY … LIMIT` in its own parentheses, a backward scan of its
/// index), and the two are merged in list order (a Merge Append). An `OR` of the two would fetch
/// and sort every one of a busy account's operations, or scan the whole organisation's list.
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
            clause.and(&format!("state = {p}"));
        }
        if let Some(tx_type) = filter.tx_type {
            let p = clause.param(Bind::Text(tx_type.as_str().to_owned()));
            clause.and(&format!("tx_type = {p}"));
        }
        if let Some(after) = after {
            let at = clause.param(Bind::Int(after.at_micros));
            let id = clause.param(Bind::Id(after.id));
            clause.and(&format!("(created_at, id) < ({at}, {id})"));
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
        format!("SELECT {} AS total", counts.join(" + "))
    }

    /// The rows, newest first, then `window` (LIMIT and OFFSET); `reach` is the placeholder of
    /// LIMIT + OFFSET, the most rows of one selection the window can need (used, and to be
    /// bound, only with an account filter).
    fn rows_sql(&self, window: &str, reach: &str) -> String {
        const ORDER: &str = "ORDER BY created_at DESC, id DESC";
        let wheres = self.wheres();
        if let [only] = wheres.as_slice() {
            return format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE {only} {ORDER} {window}");
        }
        let selects: Vec<String> = wheres
            .iter()
            .map(|w| format!("(SELECT {OPERATION_COLUMNS} FROM operations WHERE {w} {ORDER} LIMIT {reach})"))
            .collect();
        format!("SELECT {OPERATION_COLUMNS} FROM ({}) AS o {ORDER} {window}", selects.join(" UNION ALL "))
    }
}

impl PostgresTx {
    /// The organisation's operation, locked when `lock` is `FOR UPDATE`.
    async fn fetch_operation(
        &mut self,
        tenant: TenantId,
        id: Uuid,
        lock: &str,
    ) -> StoreResult<Option<OperationRecord>> {
        let sql = format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE tenant_id = $1 AND id = $2 {lock}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_operation).transpose()
    }
}

#[async_trait]
impl OperationStore for PostgresTx {
    async fn insert(&mut self, op: &OperationRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO operations ({OPERATION_COLUMNS})
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(op.id)
            .bind(op.tenant_id.as_uuid())
            .bind(op.tx_type.as_str())
            .bind(asset_key(&op.asset_id))
            .bind(op.account_ref.as_str())
            .bind(op.customer_ref.as_str())
            .bind(op.counterparty_ref.as_ref().map(AccountRef::as_str))
            .bind(op.amount)
            .bind(&op.params)
            .bind(op.lock_id)
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
        if done.rows_affected() == 0 {
            return Err(codec::conflict("operation id"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        self.fetch_operation(tenant, id, "").await
    }

    async fn get_many(
        &mut self,
        ids: &[(TenantId, Uuid)],
        for_update: bool,
    ) -> StoreResult<Vec<Option<OperationRecord>>> {
        // Locked in id order, as every batch locks them, so two batches never wait on each other
        // in opposite orders.
        let lock = if for_update { "ORDER BY id FOR UPDATE" } else { "" };
        let sql = format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE id = ANY($1) {lock}");
        let wanted: Vec<Uuid> = ids.iter().map(|(_, id)| *id).collect();
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&wanted)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        let mut found = std::collections::HashMap::with_capacity(rows.len());
        for row in &rows {
            let operation = decode_operation(row)?;
            found.insert((operation.tenant_id, operation.id), operation);
        }
        Ok(ids.iter().map(|key| found.remove(key)).collect())
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

    async fn in_flight_unchanged_since(&mut self, before: Timestamp, limit: u32) -> StoreResult<Vec<InFlight>> {
        // The organisations are walked by one index seek each (a loose index scan), and each
        // one's in-flight operations are a range of the (tenant, state) index (LATERAL lets it
        // be a lookup per organisation): the sweep never needs to read settled operations.
        let rows = sqlx::query(
            "WITH RECURSIVE tenant(id) AS (
                 SELECT (SELECT tenant_id FROM operations ORDER BY tenant_id LIMIT 1)
                 UNION ALL
                 SELECT (SELECT tenant_id FROM operations WHERE tenant_id > tenant.id ORDER BY tenant_id LIMIT 1)
                 FROM tenant
                 WHERE tenant.id IS NOT NULL
             )
             SELECT o.* FROM tenant CROSS JOIN LATERAL (
                 SELECT tenant_id, id, state, updated_at FROM operations
                 WHERE tenant_id = tenant.id AND state IN ('SUBMITTED', 'PENDING_SETTLEMENT', 'SETTLING')
                   AND updated_at < $1
             ) AS o
             ORDER BY o.updated_at, o.id LIMIT $2",
        )
        .bind(before.as_micros())
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(codec::backend)?;
        rows.iter()
            .map(|row| {
                let state: String = codec::get(row, "state")?;
                Ok(InFlight {
                    tenant_id: TenantId(codec::get(row, "tenant_id")?),
                    id: codec::get(row, "id")?,
                    state: parsed(&state, "operation state", OperationState::parse)?,
                    updated_at: codec::ts(codec::get(row, "updated_at")?),
                })
            })
            .collect()
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        self.fetch_operation(tenant, id, "FOR UPDATE").await
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
        .bind(op.tenant_id.as_uuid())
        .bind(op.id)
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
        let sql = selection.rows_sql(&format!("LIMIT ${n} OFFSET ${}", n + 1), &format!("${}", n + 2));
        let offset = codec::sql_i64(page.offset());
        let mut query =
            clause.bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql))).bind(i64::from(page.size)).bind(offset);
        if selection.account.is_some() {
            query = query.bind(offset.saturating_add(i64::from(page.size)));
        }
        let rows = query.fetch_all(&mut *self.tx).await.map_err(codec::backend)?;
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
        let limit = format!("${}", clause.next());
        let sql = selection.rows_sql(&format!("LIMIT {limit}"), &limit);
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

fn decode_lock(row: &PgRow) -> StoreResult<LockRecord> {
    let status: String = codec::get(row, "status")?;
    Ok(LockRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        counterparty_ref: codec::get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        asset_id: codec::get(row, "asset_id")?,
        amount: codec::get(row, "amount")?,
        expires_at: codec::opt_ts(codec::get(row, "expires_at")?),
        status: parsed(&status, "lock status", LockStatus::parse)?,
        completed_by: codec::get(row, "completed_by")?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

impl PostgresTx {
    /// The organisation's lock, locked when `lock` is `FOR UPDATE`.
    async fn fetch_lock(&mut self, tenant: TenantId, id: Uuid, lock: &str) -> StoreResult<Option<LockRecord>> {
        let sql = format!("SELECT {LOCK_COLUMNS} FROM locks WHERE tenant_id = $1 AND id = $2 {lock}");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(tenant.as_uuid())
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        row.as_ref().map(decode_lock).transpose()
    }
}

#[async_trait]
impl LockStore for PostgresTx {
    async fn insert(&mut self, lock: &LockRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO locks ({LOCK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(lock.id)
            .bind(lock.tenant_id.as_uuid())
            .bind(lock.account_ref.as_str())
            .bind(lock.counterparty_ref.as_ref().map(AccountRef::as_str))
            .bind(asset_key(&lock.asset_id))
            .bind(lock.amount)
            .bind(lock.expires_at.map(Timestamp::as_micros))
            .bind(lock.status.as_str())
            .bind(lock.completed_by)
            .bind(lock.created_at.as_micros())
            .bind(lock.updated_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("lock id"));
        }
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        self.fetch_lock(tenant, id, "").await
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        self.fetch_lock(tenant, id, "FOR UPDATE").await
    }

    async fn update(&mut self, lock: &LockRecord) -> StoreResult<()> {
        sqlx::query(
            "UPDATE locks SET status = $1, completed_by = $2, updated_at = $3
             WHERE tenant_id = $4 AND id = $5",
        )
        .bind(lock.status.as_str())
        .bind(lock.completed_by)
        .bind(lock.updated_at.as_micros())
        .bind(lock.tenant_id.as_uuid())
        .bind(lock.id)
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
        let count_sql = format!("SELECT COUNT(*) AS total FROM locks WHERE {}", clause.sql);
        let total = clause.count(tenant, count_sql, &mut self.tx).await?;
        let n = clause.next();
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks WHERE {}
             ORDER BY created_at DESC, id DESC LIMIT ${n} OFFSET ${}",
            clause.sql,
            n + 1
        );
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
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

fn decode_break(row: &PgRow) -> StoreResult<BreakRecord> {
    let reason: String = codec::get(row, "reason")?;
    Ok(BreakRecord {
        id: codec::get(row, "id")?,
        tenant_id: TenantId(codec::get(row, "tenant_id")?),
        transaction_id: codec::get(row, "transaction_id")?,
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        asset_id: codec::get(row, "asset_id")?,
        reason: parsed(&reason, "break reason", BreakReason::parse)?,
        detail: codec::get(row, "detail")?,
        detected_at: codec::ts(codec::get(row, "detected_at")?),
    })
}

#[async_trait]
impl BreakStore for PostgresTx {
    async fn insert(&mut self, record: &BreakRecord) -> StoreResult<()> {
        let sql = format!(
            "INSERT INTO breaks ({BREAK_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT DO NOTHING"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(record.id)
            .bind(record.tenant_id.as_uuid())
            .bind(record.transaction_id)
            .bind(record.account_ref.as_str())
            .bind(asset_key(&record.asset_id))
            .bind(record.reason.as_str())
            .bind(&record.detail)
            .bind(record.detected_at.as_micros())
            .execute(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        if done.rows_affected() == 0 {
            return Err(codec::conflict("break id"));
        }
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
        let count_sql = format!("SELECT COUNT(*) AS total FROM breaks WHERE {}", clause.sql);
        let total = clause.count(tenant, count_sql, &mut self.tx).await?;
        let n = clause.next();
        let sql = format!(
            "SELECT {BREAK_COLUMNS} FROM breaks WHERE {}
             ORDER BY detected_at DESC, id DESC LIMIT ${n} OFFSET ${}",
            clause.sql,
            n + 1
        );
        let rows = clause
            .bind(tenant, sqlx::query(sqlx::AssertSqlSafe(sql)))
            .bind(i64::from(page.size))
            .bind(codec::sql_i64(page.offset()))
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
impl PositionStore for PostgresTx {
    async fn apply(
        &mut self,
        tenant: TenantId,
        account_ref: &AccountRef,
        total_delta: i64,
        held_delta: i64,
        now: Timestamp,
    ) -> StoreResult<()> {
        // A sum beyond the BIGINT range fails ("bigint out of range") rather than wrapping.
        sqlx::query(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = positions.total + excluded.total,
                                                                held = positions.held + excluded.held,
                                                                updated_at = excluded.updated_at",
        )
        .bind(tenant.as_uuid())
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
            .bind(tenant.as_uuid())
            .bind(account_ref.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(codec::backend)?;
        match row {
            Some(row) => Ok(Position { total: codec::get(&row, "total")?, held: codec::get(&row, "held")? }),
            None => Ok(Position::default()),
        }
    }
}
