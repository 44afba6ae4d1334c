//! The filtered, paged lists written once for both backends: a store trait's list names its
//! table, its conditions (`conditions`) and its order, and each backend runs the page through
//! its `Clause` (`PageRows`).

use async_trait::async_trait;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest};

use crate::StoreResult;
use crate::conditions::Condition;
use crate::rows::Table;

/// A backend's page of one table's rows, decoded as `T`: the store traits' lists are written
/// against it.
#[async_trait]
pub trait PageRows<T>: Send {
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
}
