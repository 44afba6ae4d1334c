//! Locks (funds held for an operation) as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use crate::encode::asset_text;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::{Lock, LockStatus};

pub const LOCK_COLUMNS: &str = "id, tenant_id, account_ref, counterparty_ref, asset_id, amount, expires_at, status, completed_by, created_at, updated_at";

pub const LOCKS: Table = Table { name: "locks", columns: LOCK_COLUMNS, key: "id" };

pub fn lock(row: &impl Columns) -> StoreResult<Lock> {
    Ok(Lock {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        account_ref: AccountRef::from_stored(row.text("account_ref")?),
        counterparty_ref: row.opt_text("counterparty_ref")?.map(AccountRef::from_stored),
        asset_id: row.asset("asset_id")?,
        amount: row.amount("amount")?,
        expires_at: row.opt_timestamp("expires_at")?,
        status: row.parsed("status", "lock status", LockStatus::parse)?,
        completed_by: row.opt_uuid("completed_by")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for Lock {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.account_ref.as_str().into(),
            self.counterparty_ref.as_ref().map(AccountRef::as_str).into(),
            asset_text(self.asset_id).into(),
            self.amount.as_i64().into(),
            self.expires_at.into(),
            self.status.as_str().into(),
            self.completed_by.into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
