//! Reconciliation breaks as read from either backend.

use super::{Columns, Table};
use crate::StoreResult;
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
