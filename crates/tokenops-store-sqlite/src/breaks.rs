//! Breaks on SQLite: `BreakStore`, every method of which the store writes once over this
//! backend's `TableRows` and `TableWrites`.

use crate::SqliteTx;
use tokenops_store::BreakStore;

impl BreakStore for SqliteTx {}
