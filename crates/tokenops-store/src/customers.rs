//! Customers: `CustomerFilter` and `CustomerStore`.

use async_trait::async_trait;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp};

use crate::StoreResult;
use crate::keyset::KeyValue;
use crate::rows::{self, Encode};
use crate::sorting::CREATED_ORDER;
use crate::{TableRows, TableWrites, conditions};

#[derive(Debug, Clone, Default)]
pub struct CustomerFilter {
    pub status: Option<CustomerStatus>,
}

#[async_trait]
pub trait CustomerStore: Send + TableRows<Customer> + TableWrites {
    /// Fails with `StoreError::Conflict` when the tenant already has the reference.
    async fn insert(&mut self, customer: &Customer) -> StoreResult<()> {
        self.insert_row(&rows::CUSTOMERS, customer.values()?, "customer reference").await
    }
    async fn get(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        self.row_by_key(tenant, &rows::CUSTOMERS, KeyValue::Text(customer_ref.as_str().to_owned()), false).await
    }
    /// Reads the customer and holds it until the transaction ends, so that concurrent changes
    /// of the same customer apply one after the other (PostgreSQL `FOR UPDATE`; SQLite's single
    /// writer already serialises them).
    async fn get_for_update(&mut self, tenant: TenantId, customer_ref: &CustomerRef) -> StoreResult<Option<Customer>> {
        self.row_by_key(tenant, &rows::CUSTOMERS, KeyValue::Text(customer_ref.as_str().to_owned()), true).await
    }
    async fn set_status(
        &mut self,
        tenant: TenantId,
        customer_ref: &CustomerRef,
        status: CustomerStatus,
        now: Timestamp,
    ) -> StoreResult<()> {
        let values = vec![status.as_str().into(), now.into(), tenant.into(), customer_ref.as_str().into()];
        self.update_by_key(&rows::CUSTOMERS, &["status", "updated_at"], values).await.map(drop)
    }
    /// Oldest first.
    async fn list(
        &mut self,
        tenant: TenantId,
        filter: &CustomerFilter,
        page: PageRequest,
    ) -> StoreResult<Page<Customer>> {
        self.page_rows(tenant, &rows::CUSTOMERS, conditions::customers(filter), CREATED_ORDER, page).await
    }
}
