//! Customers on SQLite: `CustomerStore`, every method of which the store writes once over
//! this backend's `TableRows` and `TableWrites`.

use crate::SqliteTx;
use tokenops_store::CustomerStore;

impl CustomerStore for SqliteTx {}
