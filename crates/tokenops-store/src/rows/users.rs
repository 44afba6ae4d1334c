//! Users as read from and written to either backend.

use super::{BigInt, Lowercase};
use crate::UserRecord;

stored_table! {
    columns USER_COLUMNS of "users";
    table USERS by id;
    decode user -> UserRecord, encode;
    {
        id, tenant_id,
        // Lower-cased: it is the username, unique across organisations.
        email: Lowercase,
        first_name, last_name, status, role_id, password_hash, temporary_password_hash,
        failed_sign_ins: BigInt,
        first_failed_sign_in_at, locked_until, created_at, updated_at,
    }
}

/// The user columns of a join with `users u`, named as `user` reads them.
pub fn joined_user_columns() -> String {
    USER_COLUMNS.split(", ").map(|c| format!("u.{c} AS {c}")).collect::<Vec<_>>().join(", ")
}
