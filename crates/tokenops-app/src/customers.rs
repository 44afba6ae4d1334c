//! Customers: registration, status changes (with `customer.status_changed`, and the cascade to
//! the customer's accounts), reads and the list.
//! The model slice: handler → this service → store, each thin.

use crate::error::{AppResult, Code, Error};
use crate::write::{AuditAction, AuditResource, Write};
use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::customer::{Customer, CustomerRef, CustomerStatus, StatusChange};
use tokenops_domain::event::{EventType, ResourceRef};
use tokenops_domain::paging::{Page, PageRequest};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_store::{CustomerFilter, Store, StoreError};

const CUSTOMER: AuditResource = AuditResource { category: "CUSTOMERS", resource_type: "customer" };
pub const REGISTER: AuditAction = CUSTOMER.action("customer.create");
pub const CHANGE_STATUS: AuditAction = CUSTOMER.action("customer.update_status");

/// A customer as the API returns it, and as `customer.*` events carry it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomerOut {
    /// The client-chosen reference.
    #[schema(example = "cust-0001")]
    pub customer_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub status: CustomerStatus,
    #[schema(value_type = String, format = DateTime)]
    pub created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub updated_at: Timestamp,
}

impl From<&Customer> for CustomerOut {
    fn from(c: &Customer) -> Self {
        Self {
            customer_ref: c.customer_ref.to_string(),
            display_name: c.display_name.clone(),
            status: c.status,
            created_at: c.created_at,
            updated_at: c.updated_at,
        }
    }
}

/// A validated registration.
#[derive(Debug, Clone)]
pub struct NewCustomer {
    pub customer_ref: CustomerRef,
    pub display_name: Option<String>,
    pub status: CustomerStatus,
}

pub struct Customers {
    store: Arc<dyn Store>,
}

impl Customers {
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Registers a customer. An existing reference is a 409 naming it and its status.
    pub async fn register(&self, w: &mut Write, new: NewCustomer) -> AppResult<Customer> {
        let tenant = w.tenant()?;
        if let Some(existing) = w.tx().customers().get(tenant, &new.customer_ref).await? {
            return Err(already_exists(&existing));
        }
        let now = w.now();
        let customer = Customer {
            id: new_id(),
            tenant_id: tenant,
            customer_ref: new.customer_ref,
            display_name: new.display_name,
            status: new.status,
            created_at: now,
            updated_at: now,
        };
        match w.tx().customers().insert(&customer).await {
            Ok(()) => {}
            // Registered by a concurrent request since our read (PostgreSQL, where the insert
            // waited for it to commit): read it in this same transaction, never a second one.
            Err(StoreError::Conflict(_)) => {
                let existing = w.tx().customers().get(tenant, &customer.customer_ref).await?;
                return Err(existing.map(|c| already_exists(&c)).unwrap_or_else(|| {
                    Error::conflict(format!("Customer {} was registered concurrently", customer.customer_ref))
                }));
            }
            Err(e) => return Err(e.into()),
        }
        w.set_resource_id(customer.customer_ref.as_str());
        w.set_audit_detail(serde_json::json!({ "after": CustomerOut::from(&customer) }));
        Ok(customer)
    }

    /// Sets a customer's status. A change emits `customer.status_changed`; asking for the status
    /// it already has succeeds and changes nothing.
    pub async fn change_status(
        &self,
        w: &mut Write,
        customer_ref: &CustomerRef,
        target: CustomerStatus,
    ) -> AppResult<Customer> {
        let tenant = w.tenant()?;
        // Held until commit: a concurrent change of the same customer waits, then sees ours.
        let mut customer =
            w.tx().customers().get_for_update(tenant, customer_ref).await?.ok_or_else(|| not_found(customer_ref))?;
        match customer.status.change_to(target) {
            StatusChange::Unchanged => {
                w.set_audit_detail(serde_json::json!({ "status": customer.status, "changed": false }));
            }
            StatusChange::Changed { from, to } => {
                let now = w.now();
                w.tx().customers().set_status(tenant, customer_ref, to, now).await?;
                customer.status = to;
                customer.updated_at = now;
                let view = CustomerOut::from(&customer);
                w.emit(
                    EventType::CustomerStatusChanged,
                    ResourceRef::new("customer", customer_ref.as_str()),
                    serde_json::to_value(&view).map_err(Error::internal)?,
                )
                .await?;
                // The cascade: the customer's ACTIVE accounts follow it to INACTIVE.
                let deactivated = if to == CustomerStatus::Inactive {
                    crate::accounts::deactivate_for_customer(w, customer_ref).await?
                } else {
                    0
                };
                w.set_audit_detail(serde_json::json!({
                    "before": { "status": from },
                    "after": { "status": to },
                    "accountsDeactivated": deactivated,
                }));
            }
        }
        Ok(customer)
    }

    pub async fn get(&self, tenant: TenantId, customer_ref: &CustomerRef) -> AppResult<Customer> {
        let mut tx = self.store.read().await?;
        tx.customers().get(tenant, customer_ref).await?.ok_or_else(|| not_found(customer_ref))
    }

    /// Oldest first.
    pub async fn list(
        &self,
        tenant: TenantId,
        status: Option<CustomerStatus>,
        page: PageRequest,
    ) -> AppResult<Page<Customer>> {
        let mut tx = self.store.read().await?;
        Ok(tx.customers().list(tenant, &CustomerFilter { status }, page).await?)
    }
}

fn not_found(customer_ref: &CustomerRef) -> Error {
    Error::not_found(format!("Customer {customer_ref} not found"))
}

fn already_exists(existing: &Customer) -> Error {
    Error::conflict(format!("Customer {} already exists", existing.customer_ref))
        .with_code(Code::CustomerExists)
        .with_extra("customerRef", existing.customer_ref.as_str())
        .with_extra("existingStatus", existing.status.as_str())
}
