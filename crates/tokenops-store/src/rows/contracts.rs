//! Token contracts as read from either backend.

use super::{Columns, Table, opt_address};
use crate::StoreResult;
use tokenops_domain::contract::{Contract, ContractStatus};

pub const CONTRACT_COLUMNS: &str = "id, tenant_id, asset_id, name, symbol, decimals, status, address, adopt_address, failure_reason, created_at, updated_at";

pub const CONTRACTS: Table = Table { name: "contracts", columns: CONTRACT_COLUMNS, key: "asset_id" };

pub fn contract(row: &impl Columns) -> StoreResult<Contract> {
    Ok(Contract {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        asset_id: row.asset("asset_id")?,
        name: row.text("name")?,
        symbol: row.text("symbol")?,
        decimals: row.narrow("decimals", "contract decimals")?,
        status: row.parsed("status", "contract status", ContractStatus::parse)?,
        address: opt_address(row.opt_text("address")?)?,
        adopt_address: opt_address(row.opt_text("adopt_address")?)?,
        failure_reason: row.opt_text("failure_reason")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}
