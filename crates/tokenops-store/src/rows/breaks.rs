//! Reconciliation breaks as read from and written to either backend.

use tokenops_domain::operation::Break;

stored_table! {
    columns BREAK_COLUMNS of "breaks";
    table BREAKS by id;
    decode break_record -> Break, encode;
    { id, tenant_id, transaction_id, account_ref, asset_id, reason, detail, detected_at }
}
