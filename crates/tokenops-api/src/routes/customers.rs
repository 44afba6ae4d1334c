//! `/api/customers`: register, change status, read and list customers (style A, oldest first).

use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::customers::{CHANGE_STATUS, CustomerOut, NewCustomer, REGISTER};
use tokenops_domain::customer::{CustomerRef, CustomerStatus, DISPLAY_NAME_MAX_LEN};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{all_fields, required};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageA, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathParam, PathText, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{Reply, RequiredKeyWrite};

// The documented maxLength of a display name.
const _: () = assert!(DISPLAY_NAME_MAX_LEN == 200);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(register_customer, list_customers))
        .routes(routes!(get_customer, change_customer_status))
}

/// A page of customers (style A).
pub type CustomerPage = PageA<CustomerOut>;

/// Body of `POST /api/customers`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomerIn {
    #[schema(required = true, schema_with = crate::openapi::new_customer_ref)]
    pub customer_ref: Option<String>,
    /// Optional name to show, at most 200 characters; not blank when sent.
    #[schema(pattern = r"\S", max_length = 200)]
    pub display_name: Option<String>,
    /// ACTIVE (default) or INACTIVE.
    #[schema(value_type = Option<CustomerStatus>)]
    pub status: Option<String>,
}

/// Body of `PATCH /api/customers/{customerRef}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CustomerPatch {
    /// ACTIVE or INACTIVE.
    #[schema(required = true, value_type = CustomerStatus)]
    pub status: Option<String>,
}

fn parse_status(field: &str, value: &str) -> Result<CustomerStatus, Error> {
    CustomerStatus::parse(value)
        .ok_or_else(|| Error::invalid_field(field, format!("unknown status {value:?}; allowed: ACTIVE, INACTIVE")))
}

fn parse_new_customer(body: CustomerIn) -> Result<NewCustomer, Error> {
    let (customer_ref, display_name, status) = all_fields!(
        customer_ref = required("customerRef", body.customer_ref)
            .and_then(|text| CustomerRef::parse(&text).map_err(|e| Error::invalid_field("customerRef", e))),
        display_name = match body.display_name {
            Some(name) if name.trim().is_empty() => Err(Error::invalid_field("displayName", "must not be blank")),
            Some(name) if name.chars().count() > DISPLAY_NAME_MAX_LEN => {
                Err(Error::invalid_field("displayName", format!("must be at most {DISPLAY_NAME_MAX_LEN} characters")))
            }
            other => Ok(other),
        },
        status = body.status.as_deref().map(|s| parse_status("status", s)).transpose(),
    )?;
    Ok(NewCustomer { customer_ref, display_name, status: status.unwrap_or(CustomerStatus::Active) })
}

/// A path reference that cannot be a customer's is simply not found.
fn path_ref(text: &str) -> Result<CustomerRef, Error> {
    CustomerRef::parse(text).map_err(|_| Error::not_found(format!("Customer {text} not found")))
}

/// Register a customer.
#[utoipa::path(
    post, path = "/api/customers", tag = "customers", operation_id = "customers.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = CustomerIn,
    responses(
        (status = 201, description = "Registered", body = CustomerOut, headers(("Location" = String))),
        crate::openapi::FieldOrKeyInvalid,
        (status = 409, description = "customerRef exists (body adds customerRef and existingStatus), or key still in flight (Retry-After)", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn register_customer(call: RequiredKeyWrite, body: JsonBody<CustomerIn>) -> ApiResult<Response> {
    let new = parse_new_customer(body.value)?;
    call.run_about(&REGISTER, &body.document, new.customer_ref.to_string(), async |app, w| {
        let c = app.customers.register(w, new).await?;
        Reply::created(&CustomerOut::from(&c), format!("/api/customers/{}", c.customer_ref))
    })
    .await
}

/// Change a customer's status.
#[utoipa::path(
    patch, path = "/api/customers/{customerRef}", tag = "customers", operation_id = "customers.update",
    params(path_params::CustomerRef, crate::openapi::RequiredIdempotencyKey),
    request_body = CustomerPatch,
    responses(
        (status = 200, description = "The customer after the change (unchanged when it already had the status)", body = CustomerOut),
        (status = 400, description = "status missing or unknown, or bad Idempotency-Key", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchCustomer,
        crate::openapi::KeyConflicts,
    )
)]
async fn change_customer_status(
    call: RequiredKeyWrite<PathText>,
    body: JsonBody<CustomerPatch>,
) -> ApiResult<Response> {
    let status = required("status", body.value.status)?;
    let status = parse_status("status", &status)?;
    let customer_ref = path_ref(&call.path.0)?;
    call.run_about(&CHANGE_STATUS, &body.document, customer_ref.to_string(), async |app, w| {
        Reply::ok(&CustomerOut::from(&app.customers.change_status(w, &customer_ref, status).await?))
    })
    .await
}

/// Read one customer.
#[utoipa::path(
    get, path = "/api/customers/{customerRef}", tag = "customers", operation_id = "customers.get",
    params(path_params::CustomerRef),
    responses(
        (status = 200, description = "The customer", body = CustomerOut),
        crate::openapi::NoSuchCustomer,
    )
)]
async fn get_customer(call: TenantCall<PathText>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(customer_ref)| {
        let customer_ref = path_ref(&customer_ref)?;
        Ok(CustomerOut::from(&app.customers.get(tenant, &customer_ref).await?))
    })
    .await
}

/// List customers, oldest first (paging style A).
#[utoipa::path(
    get, path = "/api/customers", tag = "customers", operation_id = "customers.list",
    params(
        ("status" = Option<CustomerStatus>, Query),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of customers, oldest first", body = CustomerPage),
        crate::openapi::PagingOrStatusInvalid,
    )
)]
async fn list_customers(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let status = params.one_of("status", &CustomerStatus::ALL, CustomerStatus::as_str)?;
    paging::list(&params, STRICT_SIZE, Style::A, async |page| {
        Ok(call.state.app.customers.list(call.scope.tenant, status, page).await?.map(|c| CustomerOut::from(&c)))
    })
    .await
}
