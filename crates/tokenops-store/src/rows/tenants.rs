//! Organisations as read from and written to either backend.

use crate::TenantRecord;

stored_table! {
    columns TENANT_COLUMNS of "tenants";
    table TENANTS by id;
    decode tenant -> TenantRecord, encode;
    { id, name, owner_user_id, created_at, updated_at }
}
