//! The embedded provider's signing keys as read from and written to either backend.

use crate::SigningKeyRecord;

stored_table! {
    columns SIGNING_KEY_COLUMNS of "signing_keys";
    /// Not an organisation's: read whole, in order, and written by `kid`.
    table SIGNING_KEYS by kid;
    decode signing_key -> SigningKeyRecord, encode;
    { kid, sealed_key, created_at, retire_at }
}
