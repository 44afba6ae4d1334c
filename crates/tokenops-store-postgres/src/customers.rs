//! Customers on PostgreSQL: `CustomerStore`, every method of which the store writes once over
//! this backend's `TableRows` and `TableWrites`.

use crate::PostgresTx;
use tokenops_store::CustomerStore;

impl CustomerStore for PostgresTx {}
