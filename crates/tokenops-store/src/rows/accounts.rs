//! Accounts as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table, opt_address};
use crate::StoreResult;
use crate::encode::asset_text;
use tokenops_domain::account::{Account, AccountRef, AccountStatus};
use tokenops_domain::customer::CustomerRef;

pub const ACCOUNT_COLUMNS: &str = "id, tenant_id, account_ref, customer_ref, asset_id, status, wallet_address, failure_reason, generation, provisioned_at, created_at, updated_at";

pub const ACCOUNTS: Table = Table { name: "accounts", columns: ACCOUNT_COLUMNS, key: "account_ref" };

/// The accounts found by id: an update finds its row so, whatever reference the record says (the
/// reference of a stored one never changes).
pub const ACCOUNTS_BY_ID: Table = Table { key: "id", ..ACCOUNTS };

pub fn account(row: &impl Columns) -> StoreResult<Account> {
    Ok(Account {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        account_ref: AccountRef::from_stored(row.text("account_ref")?),
        customer_ref: CustomerRef::from_stored(row.text("customer_ref")?),
        asset_id: row.asset("asset_id")?,
        status: row.parsed("status", "account status", AccountStatus::parse)?,
        wallet_address: opt_address(row.opt_text("wallet_address")?)?,
        failure_reason: row.opt_text("failure_reason")?,
        generation: row.narrow("generation", "account generation")?,
        provisioned_at: row.opt_timestamp("provisioned_at")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for Account {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.account_ref.as_str().into(),
            self.customer_ref.as_str().into(),
            asset_text(self.asset_id).into(),
            self.status.as_str().into(),
            self.wallet_address.map(|a| a.to_string()).into(),
            self.failure_reason.as_ref().into(),
            i64::from(self.generation).into(),
            self.provisioned_at.into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
