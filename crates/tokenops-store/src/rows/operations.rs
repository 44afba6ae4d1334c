//! Operations as read from either backend.

use super::{ACCOUNT_COLUMNS, Columns, Table, account, opt_tx_hash};
use crate::{InFlight, StoreResult, SubmissionReads};
use tokenops_domain::account::Account;
use tokenops_domain::account::AccountRef;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::operation::{FailureCode, Operation, OperationState, TxType};

pub const OPERATION_COLUMNS: &str = "id, tenant_id, tx_type, asset_id, account_ref, customer_ref, counterparty_ref, amount, params, lock_id, state, tx_hash, block_number, failure_code, reason_code, signed_transaction, submitted_by, idempotency_key, correlation_id, created_at, updated_at, revert_reason";

pub const OPERATIONS: Table = Table { name: "operations", columns: OPERATION_COLUMNS, key: "id" };

pub fn operation(row: &impl Columns) -> StoreResult<Operation> {
    Ok(Operation {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        tx_type: row.parsed("tx_type", "operation type", TxType::parse)?,
        asset_id: row.asset("asset_id")?,
        account_ref: AccountRef::from_stored(row.text("account_ref")?),
        customer_ref: CustomerRef::from_stored(row.text("customer_ref")?),
        counterparty_ref: row.opt_text("counterparty_ref")?.map(AccountRef::from_stored),
        amount: row.amount("amount")?,
        params: row.json("params")?,
        lock_id: row.opt_uuid("lock_id")?,
        state: row.parsed("state", "operation state", OperationState::parse)?,
        tx_hash: opt_tx_hash(row.opt_text("tx_hash")?)?,
        block_number: row.opt_unsigned("block_number", "block number")?,
        failure_code: row.opt_parsed("failure_code", "failure code", FailureCode::parse)?,
        reason_code: row.opt_text("reason_code")?,
        signed_transaction: row.opt_text("signed_transaction")?,
        submitted_by: row.text("submitted_by")?,
        idempotency_key: row.opt_text("idempotency_key")?,
        correlation_id: row.opt_text("correlation_id")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
        revert_reason: row.opt_text("revert_reason")?,
    })
}

pub fn in_flight(row: &impl Columns) -> StoreResult<InFlight> {
    Ok(InFlight {
        tenant_id: row.tenant("tenant_id")?,
        id: row.uuid("id")?,
        state: row.parsed("state", "operation state", OperationState::parse)?,
        updated_at: row.timestamp("updated_at")?,
    })
}

/// The statement of `OperationStore::submission_reads`, in either dialect: `tenant`, `asset`
/// and `active` are the placeholders of the organisation, the asset and the status ACTIVE;
/// `named` tests `a.account_ref` against the accounts asked for. The join from one constant
/// row answers the contract's question even when no account matches.
pub fn submission_reads_sql(tenant: &str, asset: &str, active: &str, named: &str) -> String {
    let accounts = ACCOUNT_COLUMNS.split(", ").map(|column| format!("a.{column}")).collect::<Vec<_>>().join(", ");
    format!(
        "SELECT EXISTS (SELECT 1 FROM contracts WHERE tenant_id = {tenant} AND asset_id = {asset} AND status = {active})
                AS asset_active, {accounts}
         FROM (SELECT 1) AS one LEFT JOIN accounts a ON a.tenant_id = {tenant} AND {named}"
    )
}

/// One row of `submission_reads_sql`: the contract's answer, and the account if one matched.
pub fn submission_row(row: &impl Columns) -> StoreResult<(bool, Option<Account>)> {
    let found = row.opt_uuid("id")?.is_some();
    Ok((row.bool("asset_active")?, if found { Some(account(row)?) } else { None }))
}

/// The rows of `submission_reads_sql`, gathered.
pub fn submission_reads(rows: Vec<(bool, Option<Account>)>) -> SubmissionReads {
    SubmissionReads {
        asset_active: rows.first().is_some_and(|(active, _)| *active),
        accounts: rows.into_iter().filter_map(|(_, account)| account).collect(),
    }
}
