//! Machine clients as read from and written to either backend.

use crate::MachineClientRecord;

stored_table! {
    columns MACHINE_CLIENT_COLUMNS of "machine_clients";
    table MACHINE_CLIENTS by id;
    decode machine_client -> MachineClientRecord, encode;
    // A platform client (no organisation) has a NULL tenant.
    { id, tenant_id, name, role_id, secret_hash, active, created_at }
}
