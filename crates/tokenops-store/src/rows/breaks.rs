//! Reconciliation breaks as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use crate::encode::asset_text;
use tokenops_domain::account::AccountRef;
use tokenops_domain::operation::{Break, BreakReason};

pub const BREAK_COLUMNS: &str = "id, tenant_id, transaction_id, account_ref, asset_id, reason, detail, detected_at";

pub const BREAKS: Table = Table { name: "breaks", columns: BREAK_COLUMNS, key: "id" };

pub fn break_record(row: &impl Columns) -> StoreResult<Break> {
    Ok(Break {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        transaction_id: row.opt_uuid("transaction_id")?,
        account_ref: AccountRef::from_stored(row.text("account_ref")?),
        asset_id: row.asset("asset_id")?,
        reason: row.parsed("reason", "break reason", BreakReason::parse)?,
        detail: row.text("detail")?,
        detected_at: row.timestamp("detected_at")?,
    })
}

impl Encode for Break {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.transaction_id.into(),
            self.account_ref.as_str().into(),
            asset_text(self.asset_id).into(),
            self.reason.as_str().into(),
            (&self.detail).into(),
            self.detected_at.into(),
        ])
    }
}
