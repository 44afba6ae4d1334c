//! The lists a caller sorts by name (users, roles, groups): each list's sort names mapped to SQL,
//! and the `ORDER BY` built from them, dialect-neutral, so both backends sort alike; and the
//! fixed order of the lists kept in creation order.

use crate::{StoreError, StoreResult};
use tokenops_domain::paging::SortKey;

/// The order of the lists kept as they were created (customers, accounts, contracts, machine
/// clients): oldest first, the id breaking ties.
pub const CREATED_ORDER: &str = "created_at ASC, id ASC";

/// The order of lists kept newest first (operations).
pub const NEWEST_FIRST: &str = "created_at DESC, id DESC";

/// The columns users sort by. `role_name` is the name of the user's role: a platform role or a
/// custom role of the user's organisation (NULL, so first ascending, for an unknown role).
pub const USER_SORT: &[(&str, &str)] = &[
    ("email", "email"),
    ("first_name", "first_name"),
    ("last_name", "last_name"),
    ("status", "status"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
    (
        "role_name",
        "(SELECT r.name FROM roles r WHERE r.id = users.role_id AND (r.tenant_id = users.tenant_id OR r.tenant_id IS NULL))",
    ),
];

/// The columns roles sort by.
pub const ROLE_SORT: &[(&str, &str)] = &[
    ("name", "name"),
    ("description", "description"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
];

/// The columns approval groups sort by (`key` is the stored `group_key`).
pub const GROUP_SORT: &[(&str, &str)] = &[
    ("key", "group_key"),
    ("name", "name"),
    ("status", "status"),
    ("created_at", "created_at"),
    ("updated_at", "updated_at"),
    ("id", "id"),
];

/// The columns of these lists holding words people read (names, emails, descriptions): sorted
/// as people do, without regard to case (`alice` before `Bob`), where a plain column would sort
/// every capital before every small letter on SQLite and by the server's locale on PostgreSQL.
const WORDS: &[&str] = &["email", "first_name", "last_name", "role_name", "name", "description", "key"];

/// The `ORDER BY` of a list: each key's column as the list sorts by it (`columns` maps the names
/// a list accepts to SQL), then the id, ascending. Keys come from an endpoint's allow list, never
/// from the request; a column the list does not know is refused rather than placed in SQL.
///
/// Words compare without regard to case under every key first; their exact case only breaks
/// the ties that remain, so `Amy Zulu` does not come before `amy Brown` by first name then last
/// name (as a group's members, ordered the same way, show them).
pub fn order_by(sort: &[SortKey], columns: &[(&str, &str)]) -> StoreResult<String> {
    let mut order = Vec::with_capacity(2 * sort.len() + 1);
    let mut case_ties = Vec::new();
    for key in sort {
        let (name, sql) = columns
            .iter()
            .find(|(name, _)| *name == key.column)
            .ok_or_else(|| StoreError::Backend(format!("the list cannot sort by {:?}", key.column).into()))?;
        let direction = key.direction.sql();
        if WORDS.contains(name) {
            order.push(format!("LOWER({sql}) {direction}"));
            case_ties.push(format!("{sql} {direction}"));
        } else {
            order.push(format!("{sql} {direction}"));
        }
    }
    order.extend(case_ties);
    order.push("id ASC".to_owned());
    Ok(order.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenops_domain::paging::{SortDirection, SortKey};

    #[test]
    fn case_only_breaks_the_ties_of_every_key() {
        let key = |column: &'static str, direction| SortKey { column, direction };
        let sort = [
            key("first_name", SortDirection::Asc),
            key("status", SortDirection::Desc),
            key("last_name", SortDirection::Asc),
        ];
        assert_eq!(
            order_by(&sort, USER_SORT).ok().as_deref(),
            Some(
                "LOWER(first_name) ASC NULLS FIRST, status DESC NULLS LAST, LOWER(last_name) ASC NULLS FIRST, \
                 first_name ASC NULLS FIRST, last_name ASC NULLS FIRST, id ASC"
            )
        );
        assert!(order_by(&[key("password", SortDirection::Asc)], USER_SORT).is_err());
    }
}
