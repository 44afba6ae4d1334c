//! Operations as read from either backend.

use super::{Columns, opt_tx_hash};
use crate::{InFlight, StoreResult};
use tokenops_domain::account::AccountRef;
use tokenops_domain::customer::CustomerRef;
use tokenops_domain::operation::{FailureCode, Operation, OperationState, TxType};

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
