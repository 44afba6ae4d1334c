//! Roles as read from and written to either backend.

use super::WithFolded;
use crate::RoleRecord;

stored_table! {
    /// `name_folded` is written beside the name (`encode::folded`) and carries its uniqueness; a
    /// role is read from its other columns.
    columns ROLE_COLUMNS of "roles";
    /// The platform roles (NULL tenant) are in the table too, but never written through the store.
    table ROLES by id;
    decode role -> RoleRecord, encode;
    {
        id, tenant_id,
        name [name, name_folded]: WithFolded,
        description, permissions, created_at, updated_at,
    }
}

/// What a role's update replaces: its name (with the folded copy), description, permissions and
/// updated_at.
pub const ROLE_UPDATE_COLUMNS: [&str; 5] = ["name", "name_folded", "description", "permissions", "updated_at"];
