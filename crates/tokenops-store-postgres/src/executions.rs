//! Automation executions on PostgreSQL: `ExecutionStore`, every method of which the store writes
//! once over this backend's `TableRows` and `TableWrites`.

use crate::PostgresTx;
use tokenops_store::ExecutionStore;

impl ExecutionStore for PostgresTx {}
