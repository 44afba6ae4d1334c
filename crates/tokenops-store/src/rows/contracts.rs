//! Token contracts as read from and written to either backend.

use super::{SmallInt, Table};
use tokenops_domain::contract::Contract;

stored_table! {
    columns CONTRACT_COLUMNS of "contracts";
    table CONTRACTS by asset_id;
    decode contract -> Contract, encode;
    {
        id, tenant_id, asset_id, name, symbol,
        decimals: SmallInt,
        status, address, adopt_address, failure_reason, created_at, updated_at,
    }
}

/// The contracts found by id: an update finds its row so, whatever asset the record says (the
/// asset of a stored one never changes).
pub const CONTRACTS_BY_ID: Table = Table { key: "id", ..CONTRACTS };
