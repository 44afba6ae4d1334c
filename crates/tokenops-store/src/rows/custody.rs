//! Custody keys as read from and written to either backend.

use crate::CustodyKeyRecord;

stored_table! {
    columns CUSTODY_KEY_COLUMNS of "custody_keys";
    table CUSTODY_KEYS by address;
    decode custody_key -> CustodyKeyRecord, encode;
    { address, label, sealed_key, status, created_at, disabled_at }
}
