//! The built-in ledger's blocks, transactions, tokens and holds as read from either backend.

use super::Columns;
use crate::{LedgerBlock, LedgerHold, LedgerHoldStatus, LedgerToken, LedgerTransaction, StoreError, StoreResult};

pub const LEDGER_BLOCK_COLUMNS: &str = "number, hash, parent_hash, timestamp, transaction_count, produced_at";

pub fn ledger_block(row: &impl Columns) -> StoreResult<LedgerBlock> {
    Ok(LedgerBlock {
        number: row.unsigned("number", "block number")?,
        hash: row.text("hash")?,
        parent_hash: row.text("parent_hash")?,
        timestamp: row.unsigned("timestamp", "block timestamp")?,
        transaction_count: row.narrow("transaction_count", "block transaction count")?,
        produced_at: row.timestamp("produced_at")?,
    })
}

pub fn ledger_transaction(row: &impl Columns) -> StoreResult<LedgerTransaction> {
    Ok(LedgerTransaction {
        hash: row.text("hash")?,
        block_number: row.unsigned("block_number", "block number")?,
        index: row.narrow("position", "transaction position")?,
        sender: row.text("sender")?,
        nonce: row.unsigned("nonce", "nonce")?,
        to: row.opt_text("recipient")?,
        raw: row.bytes("raw")?,
        success: row.bool("success")?,
        revert_reason: row.opt_text("revert_reason")?,
        revert_data: row.opt_bytes("revert_data")?,
        contract_address: row.opt_text("contract_address")?,
    })
}

pub fn ledger_token(row: &impl Columns) -> StoreResult<LedgerToken> {
    Ok(LedgerToken {
        address: row.text("address")?,
        name: row.text("name")?,
        symbol: row.text("symbol")?,
        decimals: row.narrow("decimals", "token decimals")?,
        issuer: row.text("issuer")?,
        total_supply: row.text("total_supply")?,
        deploy_transaction: row.text("deploy_transaction")?,
        block_number: row.unsigned("block_number", "block number")?,
    })
}

pub fn ledger_hold(row: &impl Columns) -> StoreResult<LedgerHold> {
    // The expiry is a uint256-range decimal stored as text; only what fits u64 was written.
    let expires_at = row.text("expires_at")?;
    Ok(LedgerHold {
        token: row.text("token")?,
        id: row.text("id")?,
        owner: row.text("owner")?,
        payee: row.opt_text("payee")?,
        amount: row.text("amount")?,
        expires_at: expires_at.parse().map_err(|_| StoreError::Corrupt(format!("hold expiry {expires_at:?}")))?,
        status: row.parsed("status", "hold status", LedgerHoldStatus::parse)?,
    })
}
