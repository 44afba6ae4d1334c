//! Token operations on SQLite: `OperationStore`.
//!
//! Lists are built from the filters actually given (each a fixed fragment, numbered after the
//! tenant; `clause`), so that every combination is a plain indexed statement rather than one
//! statement with `?n IS NULL OR …` terms the planner cannot index. No request text reaches the
//! SQL.

use crate::clause::{self, Clause};
use crate::codec::asset_text;
use crate::{SqliteTx, codec};
use async_trait::async_trait;
use rusqlite::types::Value;
use rusqlite::{params, params_from_iter};
use std::sync::LazyLock;
use tokenops_domain::account::AccountRef;
use tokenops_domain::asset::AssetId;
use tokenops_domain::contract::ContractStatus;
use tokenops_domain::operation::{Operation, OperationFilter};
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};
use tokenops_store::rows::{self, OPERATION_COLUMNS};
use tokenops_store::{InFlight, OperationStore, StoreError, StoreResult, SubmissionReads};
use tokenops_store::{conditions, sorting};

fn int(value: u64) -> StoreResult<i64> {
    i64::try_from(value).map_err(|_| StoreError::Backend(format!("{value} does not fit an INTEGER column").into()))
}

/// The statement of `submission_reads` for a submission naming 0, 1 or 2 accounts (all there
/// are), built once: it runs on every accepted submission.
static SUBMISSION_READS: LazyLock<[String; 3]> =
    LazyLock::new(|| [submission_reads_sql(0), submission_reads_sql(1), submission_reads_sql(2)]);

fn submission_reads_sql(accounts: usize) -> String {
    let list = (0..accounts).map(|at| format!("?{}", at + 4)).collect::<Vec<_>>().join(", ");
    rows::submission_reads_sql("?1", "?2", "?3", &format!("a.account_ref IN ({list})"))
}

/// An operation's values in `OPERATION_COLUMNS` order: the insert binds them all, the update the
/// columns it may change, each by its place in that list.
fn operation_values(op: &Operation) -> StoreResult<Vec<Value>> {
    Ok(vec![
        codec::id_text(op.id).into(),
        codec::id_text(op.tenant_id.as_uuid()).into(),
        op.tx_type.as_str().to_owned().into(),
        asset_text(op.asset_id).to_owned().into(),
        op.account_ref.as_str().to_owned().into(),
        op.customer_ref.as_str().to_owned().into(),
        op.counterparty_ref.as_ref().map(|r| r.as_str().to_owned()).into(),
        op.amount.as_i64().into(),
        codec::json_text(&op.params).into(),
        op.lock_id.map(codec::id_text).into(),
        op.state.as_str().to_owned().into(),
        op.tx_hash.map(|h| h.to_string()).into(),
        op.block_number.map(int).transpose()?.into(),
        op.failure_code.map(|c| c.as_str().to_owned()).into(),
        op.reason_code.clone().into(),
        op.signed_transaction.clone().into(),
        op.submitted_by.clone().into(),
        op.idempotency_key.clone().into(),
        op.correlation_id.clone().into(),
        op.created_at.as_micros().into(),
        op.updated_at.as_micros().into(),
        op.revert_reason.clone().into(),
    ])
}

/// An operation list's WHERE clause on SQLite. With an account, the state is compared as
/// `+state`, which keeps SQLite (which has no statistics here) on the account's indexes.
fn selection(filter: &OperationFilter, after: Option<KeysetPosition>) -> Clause {
    let by_account = filter.account_ref.is_some() || filter.counterparty_ref.is_some();
    let state = if by_account { "+state" } else { "state" };
    conditions::operation_selection(filter, after, state, |at, id| {
        format!("(created_at < {at} OR (created_at = {at} AND id < {id}))")
    })
}

#[async_trait]
impl OperationStore for SqliteTx {
    async fn submission_reads(
        &mut self,
        tenant: TenantId,
        asset: AssetId,
        accounts: &[AccountRef],
    ) -> StoreResult<SubmissionReads> {
        let built;
        let sql = match SUBMISSION_READS.get(accounts.len()) {
            Some(sql) => sql.as_str(),
            None => {
                built = submission_reads_sql(accounts.len());
                built.as_str()
            }
        };
        let mut values: Vec<Value> = vec![
            Value::Text(codec::id_text(tenant.as_uuid())),
            Value::Text(asset_text(asset).to_owned()),
            Value::Text(ContractStatus::Active.as_str().to_owned()),
        ];
        values.extend(accounts.iter().map(|r| Value::Text(r.as_str().to_owned())));
        let found = self.fetch_all(sql, params_from_iter(values), |row| rows::submission_row(&codec::Cols(row)))?;
        Ok(rows::submission_reads(found))
    }

    async fn insert(&mut self, op: &Operation) -> StoreResult<()> {
        self.insert_params(&rows::OPERATIONS, params_from_iter(operation_values(op)?))
    }

    async fn unsettled_signed(&mut self, limit: u32) -> StoreResult<Vec<Operation>> {
        let sql = format!(
            "SELECT {OPERATION_COLUMNS} FROM operations
             WHERE state IN ('PENDING_SETTLEMENT', 'SETTLING') AND signed_transaction IS NOT NULL
             ORDER BY created_at, id LIMIT ?1"
        );
        self.fetch_all(&sql, params![i64::from(limit)], codec::decoded)
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
            |row| rows::in_flight(&codec::Cols(row)),
        )
    }

    async fn update(&mut self, op: &Operation) -> StoreResult<()> {
        self.execute(
            "UPDATE operations SET state = ?11, tx_hash = ?12, block_number = ?13, failure_code = ?14,
                                   reason_code = ?15, signed_transaction = ?16, updated_at = ?21,
                                   revert_reason = ?22
             WHERE tenant_id = ?2 AND id = ?1",
            params_from_iter(operation_values(op)?),
        )?;
        Ok(())
    }

    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Operation>> {
        let clause = selection(filter, None);
        self.page_of(&clause, tenant, &rows::OPERATIONS, sorting::NEWEST_FIRST, page, codec::decoded)
    }

    async fn list_after(
        &mut self,
        tenant: TenantId,
        filter: &OperationFilter,
        window: KeysetRequest,
    ) -> StoreResult<Vec<Operation>> {
        let clause = selection(filter, window.after);
        let limit = clause.placeholder(clause.next());
        let sql = format!("{} LIMIT {limit}", clause.rows_sql("operations", OPERATION_COLUMNS, sorting::NEWEST_FIRST));
        let mut values = clause::values(&clause, tenant);
        values.push(Value::Integer(i64::from(window.limit)));
        self.fetch_all(&sql, params_from_iter(values), codec::decoded)
    }
}
