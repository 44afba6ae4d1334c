//! Customers as read from and written to either backend.

use super::{ColumnValue, Columns, Encode, Table};
use crate::StoreResult;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};

pub const CUSTOMER_COLUMNS: &str = "id, tenant_id, customer_ref, display_name, status, created_at, updated_at";

pub const CUSTOMERS: Table = Table { name: "customers", columns: CUSTOMER_COLUMNS, key: "customer_ref" };

pub fn customer(row: &impl Columns) -> StoreResult<Customer> {
    Ok(Customer {
        id: row.uuid("id")?,
        tenant_id: row.tenant("tenant_id")?,
        customer_ref: CustomerRef::from_stored(row.text("customer_ref")?),
        display_name: row.opt_text("display_name")?,
        status: row.parsed("status", "customer status", CustomerStatus::parse)?,
        created_at: row.timestamp("created_at")?,
        updated_at: row.timestamp("updated_at")?,
    })
}

impl Encode for Customer {
    fn values(&self) -> StoreResult<Vec<ColumnValue>> {
        Ok(vec![
            self.id.into(),
            self.tenant_id.into(),
            self.customer_ref.as_str().into(),
            self.display_name.as_ref().into(),
            self.status.as_str().into(),
            self.created_at.into(),
            self.updated_at.into(),
        ])
    }
}
