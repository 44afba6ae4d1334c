//! Operations as read from either backend.

use super::{ACCOUNT_COLUMNS, Columns, Unsigned, account};
use crate::{InFlight, StoreResult, SubmissionReads};
use tokenops_domain::account::Account;
use tokenops_domain::operation::{Operation, OperationState};

stored_table! {
    columns OPERATION_COLUMNS of "operations";
    table OPERATIONS by id;
    decode operation -> Operation;
    {
        id, tenant_id, tx_type, asset_id, account_ref, customer_ref, counterparty_ref, amount,
        params, lock_id, state, tx_hash,
        block_number: Unsigned,
        failure_code, reason_code, signed_transaction, submitted_by, idempotency_key,
        correlation_id, created_at, updated_at, revert_reason,
    }
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
