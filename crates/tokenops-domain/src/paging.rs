//! Paging primitives shared by the store and the API: an offset window with its total, a keyset
//! window for cursors, and validated sort keys.

use uuid::Uuid;

/// An offset window: the API's page/size styles (A, B, C) all reduce to this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub page: u64,
    pub size: u32,
}

impl PageRequest {
    pub fn offset(&self) -> u64 {
        self.page.saturating_mul(self.size as u64)
    }
}

/// One page of an offset-paged list with the total across all pages.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub total: u64,
}

impl<T> Page<T> {
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page { items: self.items.into_iter().map(f).collect(), total: self.total }
    }
}

/// A position in a list ordered by (timestamp, id): what a cursor (style D) points after.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeysetPosition {
    pub at_micros: i64,
    pub id: Uuid,
}

/// A keyset window: up to `limit` items strictly after `after` in the list's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeysetRequest {
    pub after: Option<KeysetPosition>,
    pub limit: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortDirection {
    Asc,
    Desc,
}

impl SortDirection {
    /// The ORDER BY direction, with the place of nulls spelled out: SQLite and PostgreSQL
    /// disagree on it by default, and both stores must list in the same order.
    pub fn sql(self) -> &'static str {
        match self {
            SortDirection::Asc => "ASC NULLS FIRST",
            SortDirection::Desc => "DESC NULLS LAST",
        }
    }
}

/// One validated sort key. `column` is a store column name taken from the endpoint's own allow
/// list, never from the request, so it is safe to place in SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    pub column: &'static str,
    pub direction: SortDirection,
}
