//! Accounts as read from and written to either backend.

use super::{BigInt, Table};
use tokenops_domain::account::Account;

stored_table! {
    columns ACCOUNT_COLUMNS of "accounts";
    table ACCOUNTS by account_ref;
    decode account -> Account, encode;
    {
        id, tenant_id, account_ref, customer_ref, asset_id, status, wallet_address, failure_reason,
        generation: BigInt,
        provisioned_at, created_at, updated_at,
    }
}

/// The accounts found by id: an update finds its row so, whatever reference the record says (the
/// reference of a stored one never changes).
pub const ACCOUNTS_BY_ID: Table = Table { key: "id", ..ACCOUNTS };
