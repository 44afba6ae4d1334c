//! Token contracts as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table, opt_address};
use crate::StoreResult;
use crate::encode::asset_text;
use tokenops_domain::contract::{Contract, ContractStatus};

pub const CONTRACT_COLUMNS: &str = "id, tenant_id, asset_id, name, symbol, decimals, status, address, adopt_address, failure_reason, created_at, updated_at";

pub const CONTRACTS: Table = Table { name: "contracts", columns: CONTRACT_COLUMNS, key: "asset_id" };

/// The contracts found by id: an update finds its row so, whatever asset the record says (the
/// asset of a stored one never changes).
pub const CONTRACTS_BY_ID: Table = Table { key: "id", ..CONTRACTS };

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

impl Encode for Contract {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            asset_text(self.asset_id).into(),
            (&self.name).into(),
            (&self.symbol).into(),
            i16::from(self.decimals).into(),
            self.status.as_str().into(),
            self.address.map(|a| a.to_string()).into(),
            self.adopt_address.map(|a| a.to_string()).into(),
            self.failure_reason.as_ref().into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
