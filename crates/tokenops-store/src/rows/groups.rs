//! Approval groups as read from and written to either backend.

use super::{Table, WithFolded};
use crate::GroupRecord;

stored_table! {
    /// `key_folded` is written beside the key (`encode::folded`) and carries its uniqueness; a group
    /// is read from its other columns.
    columns GROUP_COLUMNS of "approval_groups";
    table GROUPS by id;
    decode group -> GroupRecord, encode;
    {
        id, tenant_id,
        key [group_key, key_folded]: WithFolded,
        name, status, created_at, updated_at,
    }
}

/// The groups found by key, compared case-insensitively through the folded copy
/// (`encode::folded`) that carries the uniqueness.
pub const GROUPS_BY_KEY: Table = Table { key: "key_folded", ..GROUPS };
