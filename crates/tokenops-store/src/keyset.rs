//! Keyset windows over any validated sort: the ORDER BY of a list sorted by `SortKey`s with `id`
//! as the last tie-breaker, and the condition "strictly after this row" in that order. Both are
//! dialect-neutral SQL text with `?` placeholders, numbered by each backend, so a long read (an
//! export) goes batch by batch without offsets, each batch a short transaction.

use tokenops_domain::paging::{SortDirection, SortKey};
use uuid::Uuid;

/// A value the store compares a column with: a row's in a sort column, or a filter's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyValue {
    Int(i64),
    Text(String),
    Id(Uuid),
}

/// A sort column of a keyset list: nullable text columns compare as `COALESCE(column, '')`, so
/// that every row has a place ('' sorts where both stores put nulls: first ascending, last
/// descending) and the "after" condition never meets a NULL.
#[derive(Debug, Clone, Copy)]
pub struct KeyColumn {
    pub key: SortKey,
    pub nullable: bool,
}

impl KeyColumn {
    fn expr(&self) -> String {
        if self.nullable { format!("COALESCE({}, '')", self.key.column) } else { self.key.column.to_owned() }
    }
}

/// The keys of a keyset list: the requested ones, then `id` descending, the tie-breaker every
/// sorted list of the store ends with.
pub fn with_id(keys: &[KeyColumn]) -> Vec<KeyColumn> {
    let mut all = keys.to_vec();
    all.push(KeyColumn { key: SortKey { column: "id", direction: SortDirection::Desc }, nullable: false });
    all
}

/// The keys of a list whose sort columns are all NOT NULL, `id` last.
pub fn plain(sort: &[SortKey]) -> Vec<KeyColumn> {
    let keys: Vec<KeyColumn> = sort.iter().map(|key| KeyColumn { key: *key, nullable: false }).collect();
    with_id(&keys)
}

/// `ORDER BY` text for `keys` (as returned by [`with_id`]).
pub fn order_by(keys: &[KeyColumn]) -> String {
    let parts: Vec<String> = keys
        .iter()
        .map(|k| format!("{} {}", k.expr(), if k.key.direction == SortDirection::Asc { "ASC" } else { "DESC" }))
        .collect();
    parts.join(", ")
}

/// The condition "strictly after the row whose key values are `values`" in the order of `keys`,
/// with one `?` per value in the returned order. Keys all in one direction become one row-value
/// comparison, which an index on those columns serves as a range; mixed directions expand into
/// the equivalent disjunction, behind a bound on the first key that an index can serve.
pub fn after(keys: &[KeyColumn], values: &[KeyValue]) -> (String, Vec<KeyValue>) {
    let op = |d: SortDirection| if d == SortDirection::Asc { ">" } else { "<" };
    let bound = |d: SortDirection| if d == SortDirection::Asc { ">=" } else { "<=" };
    let first = keys.first().map(|k| k.key.direction);
    if let Some(direction) = first.filter(|d| keys.iter().all(|k| k.key.direction == *d)) {
        let columns: Vec<String> = keys.iter().map(KeyColumn::expr).collect();
        let marks = vec!["?"; keys.len()].join(", ");
        return (format!("({}) {} ({marks})", columns.join(", "), op(direction)), values.to_vec());
    }
    let mut disjuncts = Vec::with_capacity(keys.len());
    let mut binds = Vec::new();
    let mut sql = String::new();
    if let (Some(first), Some(value)) = (keys.first(), values.first()) {
        sql = format!("{} {} ? AND ", first.expr(), bound(first.key.direction));
        binds.push(value.clone());
    }
    for (i, key) in keys.iter().enumerate() {
        let mut terms: Vec<String> = keys[..i].iter().map(|k| format!("{} = ?", k.expr())).collect();
        binds.extend_from_slice(&values[..i]);
        terms.push(format!("{} {} ?", key.expr(), op(key.key.direction)));
        binds.push(values[i].clone());
        disjuncts.push(format!("({})", terms.join(" AND ")));
    }
    (format!("({sql}({}))", disjuncts.join(" OR ")), binds)
}

/// Replaces each `?` of `fragment`, in order, by the placeholder `mark` makes of its number,
/// counting from `first`.
pub fn number_placeholders(fragment: &str, first: usize, mark: impl Fn(usize) -> String) -> String {
    let mut out = String::with_capacity(fragment.len() + 8);
    let mut n = first;
    for c in fragment.chars() {
        if c == '?' {
            out.push_str(&mark(n));
            n += 1;
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(column: &'static str, direction: SortDirection, nullable: bool) -> KeyColumn {
        KeyColumn { key: SortKey { column, direction }, nullable }
    }

    #[test]
    fn one_direction_is_a_row_value_comparison() {
        let keys = with_id(&[key("occurred_at", SortDirection::Desc, false)]);
        assert_eq!(order_by(&keys), "occurred_at DESC, id DESC");
        let (sql, binds) = after(&keys, &[KeyValue::Int(5), KeyValue::Text("x".into())]);
        assert_eq!(sql, "(occurred_at, id) < (?, ?)");
        assert_eq!(binds.len(), 2);
    }

    #[test]
    fn mixed_directions_expand_into_a_disjunction_and_nullable_columns_coalesce() {
        let keys =
            with_id(&[key("actor_id", SortDirection::Asc, true), key("occurred_at", SortDirection::Desc, false)]);
        assert_eq!(order_by(&keys), "COALESCE(actor_id, '') ASC, occurred_at DESC, id DESC");
        let values = [KeyValue::Text("a".into()), KeyValue::Int(7), KeyValue::Text("i".into())];
        let (sql, binds) = after(&keys, &values);
        assert_eq!(
            sql,
            "(COALESCE(actor_id, '') >= ? AND ((COALESCE(actor_id, '') > ?) OR (COALESCE(actor_id, '') = ? AND occurred_at < ?) \
             OR (COALESCE(actor_id, '') = ? AND occurred_at = ? AND id < ?)))"
        );
        assert_eq!(binds.len(), 7);
        assert_eq!(binds[4], KeyValue::Text("a".into()));
        assert_eq!(binds[6], KeyValue::Text("i".into()));
    }

    #[test]
    fn placeholders_are_numbered_in_order() {
        assert_eq!(number_placeholders("(a, b) < (?, ?)", 3, |n| format!("${n}")), "(a, b) < ($3, $4)");
    }
}
