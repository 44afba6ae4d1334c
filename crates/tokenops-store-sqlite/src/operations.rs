//! Token operations, locks, breaks and positions on SQLite.
//!
//! Lists are built from the filters actually given (each a fixed fragment, numbered after the
//! tenant), so that every combination is a plain indexed statement rather than one statement
//! with `?n IS NULL OR …` terms the planner cannot index. No request text reaches the SQL.
//! Assets are stored as their upper-case code, as for contracts and accounts.

use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{Row, params, params_from_iter};
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

/// The WHERE clause of a list: `tenant_id = ?1`, then each filter given, its parameters
/// numbered in order.
struct Clause {
    sql: String,
    /// The values bound to the filters, from `?2` on.
    binds: Vec<Value>,
}

impl Clause {
    fn new() -> Self {
        Self { sql: String::from("tenant_id = ?1"), binds: Vec::new() }
    }

    /// Binds `value` and returns its placeholder.
    fn param(&mut self, value: Value) -> String {
        self.binds.push(value);
        format!("?{}", self.binds.len() + 1)
    }

    fn and(&mut self, fragment: &str) {
        self.sql.push_str(" AND ");
        self.sql.push_str(fragment);
    }

    /// The next free placeholder number (for LIMIT and OFFSET).
    fn next(&self) -> usize {
        self.binds.len() + 2
    }

    /// The values of the clause's placeholders, in order: the tenant, then each filter's; the
    /// caller pushes those of LIMIT and OFFSET after them.
    fn values(&self, tenant: TenantId) -> Vec<Value> {
        let mut values = Vec::with_capacity(self.binds.len() + 3);
        values.push(Value::Text(codec::id_text(tenant.as_uuid())));
        values.extend(self.binds.iter().cloned());
        values
    }

    /// Runs `sql`, a `SELECT COUNT(*)` over the clause: a list's total.
    fn count(&self, tenant: TenantId, sql: &str, tx: &SqliteTx) -> StoreResult<u64> {
        let count: i64 = tx.scalar(sql, params_from_iter(self.values(tenant)))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }
}

// ---------------------------------------------------------------------------------------------
// Operations

const OPERATION_COLUMNS: &str = "id, tenant_id, tx_type, asset_id, account_ref, customer_ref, counterparty_ref, amount, params, lock_id, state, tx_hash, block_number, failure_code, reason_code, signed_transaction, submitted_by, idempotency_key, correlation_id, created_at, updated_at";

fn decode_operation(row: &Row<'_>) -> StoreResult<OperationRecord> {
    let tx_type: String = codec::get(row, "tx_type")?;
    let state: String = codec::get(row, "state")?;
    let failure_code: Option<String> = codec::get(row, "failure_code")?;
    let params: String = codec::get(row, "params")?;
    Ok(OperationRecord {
        id: codec::uuid(&codec::get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&codec::get::<String>(row, "tenant_id")?)?,
        tx_type: parsed(&tx_type, "operation type", TxType::parse)?,
        asset_id: codec::get(row, "asset_id")?,
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        customer_ref: CustomerRef::from_stored(codec::get(row, "customer_ref")?),
        counterparty_ref: codec::get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        amount: codec::get(row, "amount")?,
        params: codec::json(&params)?,
        lock_id: codec::opt_uuid(codec::get(row, "lock_id")?)?,
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

/// An operation list's selection: the filters after `tenant_id = ?1`, and the placeholder of
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
        let account = filter.account_ref.as_ref().map(|a| clause.param(Value::Text(a.as_str().to_owned())));
        if let Some(state) = filter.state {
            let p = clause.param(Value::Text(state.as_str().to_owned()));
            let column = if account.is_some() { "+state" } else { "state" };
            clause.and(&format!("{column} = {p}"));
        }
        if let Some(tx_type) = filter.tx_type {
            let p = clause.param(Value::Text(tx_type.as_str().to_owned()));
            clause.and(&format!("tx_type = {p}"));
        }
        if let Some(after) = after {
            let at = clause.param(Value::Integer(after.at_micros));
            let id = clause.param(Value::Text(codec::id_text(after.id)));
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
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)"
        );
        self.execute(
            &sql,
            params![
                codec::id_text(op.id),
                codec::id_text(op.tenant_id.as_uuid()),
                op.tx_type.as_str(),
                asset_key(&op.asset_id),
                op.account_ref.as_str(),
                op.customer_ref.as_str(),
                op.counterparty_ref.as_ref().map(AccountRef::as_str),
                op.amount,
                codec::json_text(&op.params),
                op.lock_id.map(codec::id_text),
                op.state.as_str(),
                op.tx_hash.as_deref(),
                op.block_number.map(int).transpose()?,
                op.failure_code.map(FailureCode::as_str),
                op.reason_code.as_deref(),
                op.signed_transaction.as_deref(),
                &op.submitted_by,
                op.idempotency_key.as_deref(),
                op.correlation_id.as_deref(),
                op.created_at.as_micros(),
                op.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        let sql = format!("SELECT {OPERATION_COLUMNS} FROM operations WHERE tenant_id = ?1 AND id = ?2");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), codec::id_text(id)], decode_operation)
    }

    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<OperationRecord>> {
        let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL
             ORDER BY created_at, id LIMIT ?1"
        );
        self.fetch_all(&sql, params![i64::from(limit)], decode_operation)
    }

    async fn in_flight_unchanged_since(&mut self, before: Timestamp, limit: u32) -> StoreResult<Vec<InFlight>> {
        // The organisations are walked by one index seek each (a loose index scan), so that
        // each one's in-flight operations are a range of the (tenant, state) index: the sweep
        // never reads the operations that have settled.
        self.fetch_all(
            "WITH RECURSIVE tenant(id) AS (
                 SELECT (SELECT tenant_id FROM operations ORDER BY tenant_id LIMIT 1)
                 UNION ALL
                 SELECT (SELECT tenant_id FROM operations WHERE tenant_id > tenant.id ORDER BY tenant_id LIMIT 1)
                 FROM tenant
                 WHERE tenant.id IS NOT NULL
             )
             SELECT o.tenant_id, o.id, o.state, o.updated_at
             FROM tenant CROSS JOIN operations AS o INDEXED BY operations_by_tenant_state
             WHERE o.tenant_id = tenant.id AND o.state IN ('SUBMITTED', 'PENDING_SETTLEMENT', 'SETTLING')
               AND o.updated_at < ?1
             ORDER BY o.updated_at, o.id LIMIT ?2",
            params![before.as_micros(), i64::from(limit)],
            |row| {
                let state: String = codec::get(row, "state")?;
                Ok(InFlight {
                    tenant_id: codec::tenant(&codec::get::<String>(row, "tenant_id")?)?,
                    id: codec::uuid(&codec::get::<String>(row, "id")?)?,
                    state: parsed(&state, "operation state", OperationState::parse)?,
                    updated_at: codec::ts(codec::get(row, "updated_at")?),
                })
            },
        )
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<OperationRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading an operation for update")?;
        OperationStore::get(self, tenant, id).await
    }

    async fn update(&mut self, op: &OperationRecord) -> StoreResult<()> {
        self.execute(
            "UPDATE operations SET state = ?1, tx_hash = ?2, block_number = ?3, failure_code = ?4, reason_code = ?5,
                                   signed_transaction = ?6, updated_at = ?7
             WHERE tenant_id = ?8 AND id = ?9",
            params![
                op.state.as_str(),
                op.tx_hash.as_deref(),
                op.block_number.map(int).transpose()?,
                op.failure_code.map(FailureCode::as_str),
                op.reason_code.as_deref(),
                op.signed_transaction.as_deref(),
                op.updated_at.as_micros(),
                codec::id_text(op.tenant_id.as_uuid()),
                codec::id_text(op.id),
            ],
        )?;
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
        let total = clause.count(tenant, &selection.count_sql(), self)?;
        let n = clause.next();
        let sql = selection.rows_sql(&format!("LIMIT ?{n} OFFSET ?{}", n + 1));
        let (limit, offset) = page_limits(page);
        let mut values = clause.values(tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items = self.fetch_all(&sql, params_from_iter(values), decode_operation)?;
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
        let sql = selection.rows_sql(&format!("LIMIT ?{}", clause.next()));
        let mut values = clause.values(tenant);
        values.push(Value::Integer(i64::from(window.limit)));
        self.fetch_all(&sql, params_from_iter(values), decode_operation)
    }
}

// ---------------------------------------------------------------------------------------------
// Locks

const LOCK_COLUMNS: &str = "id, tenant_id, account_ref, counterparty_ref, asset_id, amount, expires_at, status, completed_by, created_at, updated_at";

fn decode_lock(row: &Row<'_>) -> StoreResult<LockRecord> {
    let status: String = codec::get(row, "status")?;
    Ok(LockRecord {
        id: codec::uuid(&codec::get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&codec::get::<String>(row, "tenant_id")?)?,
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        counterparty_ref: codec::get::<Option<String>>(row, "counterparty_ref")?.map(AccountRef::from_stored),
        asset_id: codec::get(row, "asset_id")?,
        amount: codec::get(row, "amount")?,
        expires_at: codec::get::<Option<i64>>(row, "expires_at")?.map(codec::ts),
        status: parsed(&status, "lock status", LockStatus::parse)?,
        completed_by: codec::opt_uuid(codec::get(row, "completed_by")?)?,
        created_at: codec::ts(codec::get(row, "created_at")?),
        updated_at: codec::ts(codec::get(row, "updated_at")?),
    })
}

#[async_trait]
impl LockStore for SqliteTx {
    async fn insert(&mut self, lock: &LockRecord) -> StoreResult<()> {
        let sql = format!("INSERT INTO locks ({LOCK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)");
        self.execute(
            &sql,
            params![
                codec::id_text(lock.id),
                codec::id_text(lock.tenant_id.as_uuid()),
                lock.account_ref.as_str(),
                lock.counterparty_ref.as_ref().map(AccountRef::as_str),
                asset_key(&lock.asset_id),
                lock.amount,
                lock.expires_at.map(Timestamp::as_micros),
                lock.status.as_str(),
                lock.completed_by.map(codec::id_text),
                lock.created_at.as_micros(),
                lock.updated_at.as_micros(),
            ],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        let sql = format!("SELECT {LOCK_COLUMNS} FROM locks WHERE tenant_id = ?1 AND id = ?2");
        self.fetch_optional(&sql, params![codec::id_text(tenant.as_uuid()), codec::id_text(id)], decode_lock)
    }

    async fn get_for_update(&mut self, tenant: TenantId, id: Uuid) -> StoreResult<Option<LockRecord>> {
        // Write transactions run one at a time on the single writer: the read is already held.
        self.require_write("reading a lock for update")?;
        LockStore::get(self, tenant, id).await
    }

    async fn update(&mut self, lock: &LockRecord) -> StoreResult<()> {
        self.execute(
            "UPDATE locks SET status = ?1, completed_by = ?2, updated_at = ?3
             WHERE tenant_id = ?4 AND id = ?5",
            params![
                lock.status.as_str(),
                lock.completed_by.map(codec::id_text),
                lock.updated_at.as_micros(),
                codec::id_text(lock.tenant_id.as_uuid()),
                codec::id_text(lock.id),
            ],
        )?;
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
        let p = clause.param(Value::Text(account_ref.as_str().to_owned()));
        clause.and(&format!("account_ref = {p}"));
        if let Some(status) = status {
            let p = clause.param(Value::Text(status.as_str().to_owned()));
            clause.and(&format!("status = {p}"));
        }
        let count_sql = format!("SELECT COUNT(*) FROM locks WHERE {}", clause.sql);
        let total = clause.count(tenant, &count_sql, self)?;
        let n = clause.next();
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks WHERE {}
             ORDER BY created_at DESC, id DESC LIMIT ?{n} OFFSET ?{}",
            clause.sql,
            n + 1
        );
        let (limit, offset) = page_limits(page);
        let mut values = clause.values(tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items = self.fetch_all(&sql, params_from_iter(values), decode_lock)?;
        Ok(Page { items, total })
    }

    async fn expired(&mut self, now: Timestamp, limit: u32) -> StoreResult<Vec<LockRecord>> {
        // The predicate of the partial index `locks_expiring`, spelled as it is there.
        let sql = format!(
            "SELECT {LOCK_COLUMNS} FROM locks
             WHERE status = 'ACTIVE' AND completed_by IS NULL AND expires_at IS NOT NULL AND expires_at <= ?1
             ORDER BY expires_at ASC, id ASC LIMIT ?2"
        );
        self.fetch_all(&sql, params![now.as_micros(), i64::from(limit)], decode_lock)
    }
}

// ---------------------------------------------------------------------------------------------
// Breaks

const BREAK_COLUMNS: &str = "id, tenant_id, transaction_id, account_ref, asset_id, reason, detail, detected_at";

fn decode_break(row: &Row<'_>) -> StoreResult<BreakRecord> {
    let reason: String = codec::get(row, "reason")?;
    Ok(BreakRecord {
        id: codec::uuid(&codec::get::<String>(row, "id")?)?,
        tenant_id: codec::tenant(&codec::get::<String>(row, "tenant_id")?)?,
        transaction_id: codec::opt_uuid(codec::get(row, "transaction_id")?)?,
        account_ref: AccountRef::from_stored(codec::get(row, "account_ref")?),
        asset_id: codec::get(row, "asset_id")?,
        reason: parsed(&reason, "break reason", BreakReason::parse)?,
        detail: codec::get(row, "detail")?,
        detected_at: codec::ts(codec::get(row, "detected_at")?),
    })
}

#[async_trait]
impl BreakStore for SqliteTx {
    async fn insert(&mut self, record: &BreakRecord) -> StoreResult<()> {
        let sql = format!("INSERT INTO breaks ({BREAK_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
        self.execute(
            &sql,
            params![
                codec::id_text(record.id),
                codec::id_text(record.tenant_id.as_uuid()),
                record.transaction_id.map(codec::id_text),
                record.account_ref.as_str(),
                asset_key(&record.asset_id),
                record.reason.as_str(),
                &record.detail,
                record.detected_at.as_micros(),
            ],
        )?;
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
            let p = clause.param(Value::Text(reason.as_str().to_owned()));
            clause.and(&format!("reason = {p}"));
        }
        if let Some(account) = &filter.account_ref {
            let p = clause.param(Value::Text(account.as_str().to_owned()));
            clause.and(&format!("account_ref = {p}"));
        }
        if let Some(from) = filter.from {
            let p = clause.param(Value::Integer(from.as_micros()));
            clause.and(&format!("detected_at >= {p}"));
        }
        if let Some(to) = filter.to {
            let p = clause.param(Value::Integer(to.as_micros()));
            clause.and(&format!("detected_at < {p}"));
        }
        let count_sql = format!("SELECT COUNT(*) FROM breaks WHERE {}", clause.sql);
        let total = clause.count(tenant, &count_sql, self)?;
        let n = clause.next();
        let sql = format!(
            "SELECT {BREAK_COLUMNS} FROM breaks WHERE {}
             ORDER BY detected_at DESC, id DESC LIMIT ?{n} OFFSET ?{}",
            clause.sql,
            n + 1
        );
        let (limit, offset) = page_limits(page);
        let mut values = clause.values(tenant);
        values.push(Value::Integer(limit));
        values.push(Value::Integer(offset));
        let items = self.fetch_all(&sql, params_from_iter(values), decode_break)?;
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
        self.execute(
            "INSERT INTO positions (tenant_id, account_ref, total, held, updated_at) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (tenant_id, account_ref) DO UPDATE SET total = total + excluded.total,
                                                                held = held + excluded.held,
                                                                updated_at = excluded.updated_at",
            params![codec::id_text(tenant.as_uuid()), account_ref.as_str(), total_delta, held_delta, now.as_micros()],
        )?;
        Ok(())
    }

    async fn get(&mut self, tenant: TenantId, account_ref: &AccountRef) -> StoreResult<Position> {
        let position = self.fetch_optional(
            "SELECT total, held FROM positions WHERE tenant_id = ?1 AND account_ref = ?2",
            params![codec::id_text(tenant.as_uuid()), account_ref.as_str()],
            |row| Ok(Position { total: codec::get(row, "total")?, held: codec::get(row, "held")? }),
        )?;
        Ok(position.unwrap_or_default())
    }
}
