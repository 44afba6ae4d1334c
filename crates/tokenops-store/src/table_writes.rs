//! The writes written once for both backends: a store trait's insert or update of an entity
//! names its table and the columns it changes, binds the entity's values (`rows::Encode`), and
//! each backend runs the statement (`TableWrites`).

use async_trait::async_trait;

use crate::rows::{ColumnValue, Table};
use crate::{StoreError, StoreResult};

/// A backend's writes of one table's rows, each given as its values in the table's columns
/// order: the store traits' inserts and updates are written against it.
#[async_trait]
pub trait TableWrites: Send {
    /// Inserts the row unless one already there shares a unique key with it (which leaves a
    /// PostgreSQL transaction usable, as a unique violation would not): whether it did.
    async fn insert_row_if_new(&mut self, table: &Table, row: Vec<ColumnValue>) -> StoreResult<bool>;

    /// Sets the `set` columns of the organisation's row with a key (`Table::update_sql`) to
    /// `values`: the set columns' in order, then the tenant's and the key's. How many rows
    /// changed.
    async fn update_by_key(&mut self, table: &Table, set: &[&str], values: Vec<ColumnValue>) -> StoreResult<u64>;

    /// Sets the `set` columns of the organisation's row that has `row`'s tenant and key to
    /// `row`'s values (the whole row, in the table's columns order): how many rows changed.
    async fn update_row(&mut self, table: &Table, row: Vec<ColumnValue>, set: &[&str]) -> StoreResult<u64> {
        let values = table.update_values(&row, set)?;
        self.update_by_key(table, set, values).await
    }

    /// Inserts the row; one already there with a unique key of it is `StoreError::Conflict`,
    /// naming `what` that key is.
    async fn insert_row(&mut self, table: &Table, row: Vec<ColumnValue>, what: &str) -> StoreResult<()> {
        if self.insert_row_if_new(table, row).await? { Ok(()) } else { Err(conflict(what)) }
    }
}

/// A row whose unique key `what` another row has.
pub fn conflict(what: &str) -> StoreError {
    StoreError::Conflict(format!("{what} already exists"))
}
