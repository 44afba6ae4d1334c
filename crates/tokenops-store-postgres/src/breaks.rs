//! Breaks on PostgreSQL: `BreakStore`, every method of which the store writes once over this
//! backend's `TableRows` and `TableWrites`.

use crate::PostgresTx;
use tokenops_store::BreakStore;

impl BreakStore for PostgresTx {}
