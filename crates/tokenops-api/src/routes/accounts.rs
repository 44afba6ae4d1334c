//! `/api/accounts`: register an account (provisioned asynchronously), change its status, read
//! and list accounts (style A, oldest first), and read its balances from the ledger.

use axum::response::Response;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::accounts::{AccountOut, BalanceOut, CHANGE_STATUS, NewAccount, REGISTER, account_not_found};
use tokenops_domain::account::{AccountFilter, AccountRef, AccountStatus};
use tokenops_domain::asset::AssetId;
use tokenops_domain::customer::CustomerRef;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::contracts::asset_field;
use super::fields::{all_fields, required};
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageA, STRICT_SIZE, Style};
use crate::extract::{JsonBody, PathParam, PathText, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{Reply, RequiredKeyWrite};

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(register_account, list_accounts))
        .routes(routes!(get_account, change_account_status))
        .routes(routes!(get_balances))
}

/// A page of accounts (style A).
pub type AccountPage = PageA<AccountOut>;

/// Body of `POST /api/accounts`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountIn {
    #[schema(required = true, schema_with = crate::openapi::new_account_ref)]
    pub account_ref: Option<String>,
    #[schema(required = true, schema_with = crate::openapi::owning_customer_ref)]
    pub customer_ref: Option<String>,
    /// ISO 4217 code of an asset with an ACTIVE contract.
    #[schema(example = "USD", required = true, value_type = String)]
    pub asset_id: Option<String>,
}

/// Body of `PATCH /api/accounts/{accountRef}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountPatch {
    /// ACTIVE or INACTIVE. Any JSON value is read, so that a number or an object is reported
    /// against settableStatus like any other status that cannot be set.
    #[schema(required = true, value_type = SettableAccountStatus)]
    pub status: Option<serde_json::Value>,
}

/// The statuses a client may set on an account (PENDING and FAILED are the provisioning's).
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
enum SettableAccountStatus {
    Active,
    Inactive,
}

fn parse_new_account(body: AccountIn) -> Result<NewAccount, Error> {
    let (account_ref, customer_ref, asset) = all_fields!(
        account_ref = required("accountRef", body.account_ref)
            .and_then(|text| AccountRef::parse(&text).map_err(|e| Error::invalid_field("accountRef", e))),
        customer_ref = required("customerRef", body.customer_ref)
            .and_then(|text| CustomerRef::parse(&text).map_err(|e| Error::invalid_field("customerRef", e))),
        asset = required("assetId", body.asset_id).and_then(|text| asset_field("assetId", &text)),
    )?;
    Ok(NewAccount { account_ref, customer_ref, asset })
}

/// A path reference that cannot be an account's is simply not found.
fn path_ref(text: &str) -> Result<AccountRef, Error> {
    AccountRef::parse(text).map_err(|_| account_not_found(text))
}

/// Register an account; its wallet is provisioned in the background.
#[utoipa::path(
    post, path = "/api/accounts", tag = "accounts", operation_id = "accounts.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = AccountIn,
    responses(
        (status = 201, description = "Registered PENDING; it becomes ACTIVE with walletAddress (account.provisioned) or FAILED with failureReason (account.provisioning_failed)", body = AccountOut, headers(("Location" = String))),
        crate::openapi::FieldOrKeyInvalid,
        (status = 404, description = "No such customer, or the asset has no ACTIVE contract", body = crate::openapi::ErrorBody),
        (status = 409, description = "accountRef exists and is not FAILED (body adds accountRef and existingStatus), or key still in flight (Retry-After)", body = crate::openapi::ErrorBody),
        (status = 422, description = "The customer is INACTIVE, or the key was reused with a different payload", body = crate::openapi::ErrorBody),
    )
)]
async fn register_account(call: RequiredKeyWrite, body: JsonBody<AccountIn>) -> ApiResult<Response> {
    let new = parse_new_account(body.value)?;
    call.run_about(&REGISTER, &body.document, new.account_ref.to_string(), async |app, w| {
        let a = app.accounts.register(w, new).await?;
        Reply::created(&AccountOut::from(&a), format!("/api/accounts/{}", a.account_ref))
    })
    .await
}

/// Change an account's status (ACTIVE or INACTIVE).
#[utoipa::path(
    patch, path = "/api/accounts/{accountRef}", tag = "accounts", operation_id = "accounts.update",
    params(path_params::AccountRef, crate::openapi::RequiredIdempotencyKey),
    request_body = AccountPatch,
    responses(
        (status = 200, description = "The account after the change (unchanged when it already had the status)", body = AccountOut),
        (status = 400, description = "status missing or not ACTIVE/INACTIVE (reported against settableStatus), or bad Idempotency-Key", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchAccount,
        crate::openapi::KeyInFlight,
        (status = 422, description = "Transition not allowed (PENDING or FAILED account, or reactivation while the customer is INACTIVE), or key reused with a different payload", body = crate::openapi::ErrorBody),
    )
)]
async fn change_account_status(call: RequiredKeyWrite<PathText>, body: JsonBody<AccountPatch>) -> ApiResult<Response> {
    let settable = || {
        Error::invalid_field("settableStatus", "status must be ACTIVE or INACTIVE")
            .with_extra("settableStatus", serde_json::json!(["ACTIVE", "INACTIVE"]))
    };
    let status = body.value.status.as_ref().and_then(serde_json::Value::as_str).ok_or_else(settable)?;
    let status = AccountStatus::parse(status).filter(|s| AccountStatus::SETTABLE.contains(s)).ok_or_else(settable)?;
    let account_ref = path_ref(&call.path.0)?;
    call.run_about(&CHANGE_STATUS, &body.document, account_ref.to_string(), async |app, w| {
        Reply::ok(&AccountOut::from(&app.accounts.change_status(w, &account_ref, status).await?))
    })
    .await
}

/// Read one account.
#[utoipa::path(
    get, path = "/api/accounts/{accountRef}", tag = "accounts", operation_id = "accounts.get",
    params(path_params::AccountRef),
    responses(
        (status = 200, description = "The account", body = AccountOut),
        crate::openapi::NoSuchAccount,
    )
)]
async fn get_account(call: TenantCall<PathText>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(account_ref)| {
        Ok(AccountOut::from(&app.accounts.get(tenant, &account_ref).await?))
    })
    .await
}

/// List accounts, oldest first (paging style A).
#[utoipa::path(
    get, path = "/api/accounts", tag = "accounts", operation_id = "accounts.list",
    params(
        ("customerRef" = Option<String>, Query),
        ("status" = Option<AccountStatus>, Query),
        ("assetId" = Option<String>, Query, description = "Case-insensitive"),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of accounts, oldest first. A customerRef that cannot be a reference matches nothing: an empty page, not a 400 (the spec is silent; this service decided)", body = AccountPage),
        crate::openapi::PagingOrStatusInvalid,
    )
)]
async fn list_accounts(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let status = params.one_of("status", &AccountStatus::ALL, AccountStatus::as_str)?;
    let asset_id = params.non_blank("assetId")?.map(AssetId::parse).transpose();
    let customer_ref = params.non_blank("customerRef")?.map(CustomerRef::parse).transpose();
    paging::list(&params, STRICT_SIZE, Style::A, async |page| {
        // A reference or an asset that cannot exist matches nothing: an empty page, not an error.
        let (Ok(customer_ref), Ok(asset_id)) = (customer_ref, asset_id) else { return Ok(paging::none_match()) };
        let filter = AccountFilter { customer_ref, status, asset_id };
        Ok(call.state.app.accounts.list(call.scope.tenant, &filter, page).await?.map(|a| AccountOut::from(&a)))
    })
    .await
}

/// An account's balances, read from the ledger.
#[utoipa::path(
    get, path = "/api/accounts/{accountRef}/balances", tag = "accounts", operation_id = "accounts.balances",
    params(path_params::AccountRef),
    responses(
        (status = 200, description = "The balance record, read from the ledger now", body = BalanceOut),
        (status = 404, description = "No such account, or its asset has no ACTIVE contract", body = crate::openapi::ErrorBody),
        (status = 422, description = "The account has no wallet yet (PENDING or FAILED)", body = crate::openapi::ErrorBody),
        (status = 500, description = "The ledger could not be read (never reported as a zero balance)", body = crate::openapi::ErrorBody),
    )
)]
async fn get_balances(call: TenantCall<PathText>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(account_ref)| {
        app.accounts.balance(tenant, &account_ref, app.clock.now()).await
    })
    .await
}
