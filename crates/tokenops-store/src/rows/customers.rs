//! Customers as read from and written to either backend.

use tokenops_domain::customer::Customer;

stored_table! {
    columns CUSTOMER_COLUMNS of "customers";
    table CUSTOMERS by customer_ref;
    decode customer -> Customer, encode;
    { id, tenant_id, customer_ref, display_name, status, created_at, updated_at }
}
