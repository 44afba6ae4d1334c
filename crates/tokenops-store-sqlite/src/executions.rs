//! Automation executions on SQLite: `ExecutionStore`, every method of which the store writes
//! once over this backend's `TableRows` and `TableWrites`.

use crate::SqliteTx;
use tokenops_store::ExecutionStore;

impl ExecutionStore for SqliteTx {}
