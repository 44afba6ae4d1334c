//! Users as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::{StoreResult, UserRecord};
use tokenops_domain::identity::UserStatus;

pub const USER_COLUMNS: &str = "id, tenant_id, email, first_name, last_name, status, role_id, password_hash, temporary_password_hash, failed_sign_ins, first_failed_sign_in_at, locked_until, created_at, updated_at";

pub const USERS: Table = Table { name: "users", columns: USER_COLUMNS, key: "id" };

/// The user columns of a join with `users u`, named as `user` reads them.
pub fn joined_user_columns() -> String {
    USER_COLUMNS.split(", ").map(|c| format!("u.{c} AS {c}")).collect::<Vec<_>>().join(", ")
}

pub fn user(row: &impl Columns) -> StoreResult<UserRecord> {
    Ok(UserRecord {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        email: row.text("email")?,
        first_name: row.text("first_name")?,
        last_name: row.text("last_name")?,
        status: row.parsed("status", "user status", UserStatus::parse)?,
        role_id: row.uuid("role_id")?,
        password_hash: row.opt_text("password_hash")?,
        temporary_password_hash: row.opt_text("temporary_password_hash")?,
        failed_sign_ins: row.narrow("failed_sign_ins", "failed sign-ins")?,
        first_failed_sign_in_at: row.opt_timestamp("first_failed_sign_in_at")?,
        locked_until: row.opt_timestamp("locked_until")?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

/// The email lower-cased: it is the username, unique across organisations.
impl Encode for UserRecord {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.email.to_lowercase().into(),
            (&self.first_name).into(),
            (&self.last_name).into(),
            self.status.as_str().into(),
            self.role_id.into(),
            self.password_hash.as_ref().into(),
            self.temporary_password_hash.as_ref().into(),
            i64::from(self.failed_sign_ins).into(),
            self.first_failed_sign_in_at.into(),
            self.locked_until.into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
