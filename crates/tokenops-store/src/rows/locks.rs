//! Locks (funds held for an operation) as read from and written to either backend.

use tokenops_domain::operation::Lock;

stored_table! {
    columns LOCK_COLUMNS of "locks";
    table LOCKS by id;
    decode lock -> Lock, encode;
    {
        id, tenant_id, account_ref, counterparty_ref, asset_id, amount, expires_at, status,
        completed_by, created_at, updated_at,
    }
}
