//! The reads written once for both backends: a store trait's list or read by key names its
//! table, its conditions (`conditions`) or key, and its order, and each backend runs the
//! statement (`TableRows`).

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};

use crate::StoreResult;
use crate::conditions::Condition;
use crate::keyset::KeyValue;
use crate::rows::Table;

/// A backend's reads of one table's rows, decoded as `T`: the store traits' lists and reads by
/// key are written against it.
#[async_trait]
pub trait TableRows<T>: Send {
    /// One page of the organisation's rows of `table` that `conditions` select, in `order`,
    /// with the total they select.
    async fn page_rows(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        page: PageRequest,
    ) -> StoreResult<Page<T>>;

    /// The organisation's row of `table` whose key is `key`, if there is one. `for_update` holds
    /// it for the rest of the transaction (PostgreSQL's `FOR UPDATE`; SQLite's single writer
    /// holds it already), which a read transaction refuses.
    async fn row_by_key(
        &mut self,
        tenant: TenantId,
        table: &Table,
        key: KeyValue,
        for_update: bool,
    ) -> StoreResult<Option<T>>;

    /// Every one of the organisation's rows of `table` that `conditions` select, in `order`.
    /// `for_update` holds them as [`row_by_key`](Self::row_by_key) does.
    async fn rows_where(
        &mut self,
        tenant: TenantId,
        table: &Table,
        conditions: Vec<Condition>,
        order: &str,
        for_update: bool,
    ) -> StoreResult<Vec<T>>;
}
