//! `/api/contracts`: register an asset's token contract (deployed, or an existing one adopted,
//! asynchronously), change it, read and list contracts (style A, oldest first).

use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::fmt::Display;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::contracts::{ContractChange, ContractOut, NewContract, REGISTER, UPDATE, parse_address};
use tokenops_domain::asset::AssetId;
use tokenops_domain::contract::{Contract, ContractFilter, ContractStatus};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::fields::{optional_text, required, something_to_change};
use crate::ApiState;
use crate::error::{ApiError, ApiResult};
use crate::extract::paging::{self, PageA, STRICT_SIZE, Style};
use crate::extract::path::ScopedPath;
use crate::extract::{JsonBody, PathParam, PathText, QueryParams, TenantCall, TenantScope};
use crate::openapi::path_params;
use crate::write::{self, OptionalKeyWrite, Reply, Written};

const NAME_MAX: usize = 100;
// The documented maxLength of the names.
const _: () = assert!(NAME_MAX == 100);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(register_contract, list_contracts))
        .routes(routes!(get_contract, update_contract))
}

/// A page of contracts (style A).
pub type ContractPage = PageA<ContractOut>;

/// Body of `POST /api/contracts`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContractIn {
    /// ISO 4217 code of a currency with a minor unit (case-insensitive; stored upper-case).
    #[schema(example = "USD", required = true, value_type = String)]
    pub asset_id: Option<String>,
    /// The token's name, 1 to 100 characters and not blank; defaults to the currency's name.
    #[schema(pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// Adopt this existing token (tokenops' contract, with the currency's decimals, already on
    /// the ledger: an address with no such contract leaves the registration FAILED) instead of
    /// deploying one. Omit it to deploy (the usual case). No example: no address is on every
    /// ledger.
    pub contract_address: Option<String>,
}

/// Body of `PATCH /api/contracts/{assetId}`: at least one field.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(min_properties = 1)]
pub struct ContractPatch {
    /// ACTIVE or INACTIVE.
    #[schema(value_type = Option<SettableContractStatus>)]
    pub status: Option<String>,
    /// 1 to 100 characters, not blank.
    #[schema(pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
}

/// The statuses a PATCH may set (PENDING and FAILED are the registration's).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(dead_code)]
enum SettableContractStatus {
    Active,
    Inactive,
}

pub(crate) fn asset_field(field: &str, text: &str) -> Result<AssetId, Error> {
    AssetId::parse(text).map_err(|e| Error::invalid_field(field, e))
}

/// Register the token contract of an asset.
#[utoipa::path(
    post, path = "/api/contracts", tag = "contracts", operation_id = "contracts.create",
    params(crate::openapi::OptionalIdempotencyKey),
    request_body = ContractIn,
    responses(
        (status = 201, description = "Registered. Deployment (or adoption) runs in the background; the answer waits for it up to TOKENOPS_CONTRACT_REGISTER_WAIT_MS (5 s by default) and shows the contract ACTIVE, or FAILED with failureReason, or still PENDING if it took longer (read it again to follow). A replay under the same key answers 201 with the contract as it is now, after the same wait (as a read would show it)", body = ContractOut, headers(("Location" = String))),
        (status = 400, description = "Missing or invalid field (assetId not a recognised ISO 4217 code with a minor unit, contractAddress not an address), or bad Idempotency-Key", body = crate::openapi::ErrorBody),
        (status = 409, description = "The asset has a contract (body adds assetId and existingStatus) unless it FAILED, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn register_contract(call: OptionalKeyWrite, body: JsonBody<ContractIn>) -> ApiResult<Response> {
    let asset = required("assetId", body.value.asset_id)?;
    let asset = asset_field("assetId", &asset)?;
    let name = optional_text("name", body.value.name, NAME_MAX)?;
    let adopt = match body.value.contract_address {
        None => None,
        Some(text) => Some(
            parse_address(&text)
                .ok_or_else(|| Error::invalid_field("contractAddress", "must be an address: 0x and 40 hex digits"))?,
        ),
    };
    let request = call.request(&REGISTER, &body.document).about(asset.to_string());
    let written = write::run_or_replay(&call.state, request, async |app, w| {
        created(&app.contracts.register(w, NewContract { asset, name, adopt }).await?)
    })
    .await?;
    // The deployment runs as a job; the answer waits (a bounded time) for it to settle, so that
    // the asset is usable once the answer arrives. The key stores the registration's own answer
    // (PENDING); a replay of a registration answers, as the first answer did, the contract as
    // it is now after the same wait (as a replayed transaction answers the operation as it is
    // now), never the PENDING it has left. A replayed refusal is answered as stored.
    let (response, replayed) = match written {
        Written::Ran(response) if response.status() == StatusCode::CREATED => (response, false),
        Written::Replayed(stored) if stored.status == StatusCode::CREATED.as_u16() => {
            (Written::Replayed(stored).into_response(), true)
        }
        other => return Ok(other.into_response()),
    };
    let wait = call.state.contract_register_wait;
    if wait.is_zero() && !replayed {
        return Ok(response);
    }
    // The registration has committed: a failed read while waiting answers the 201 as
    // registered (or as stored) rather than an error for a write that happened.
    match call.state.app.contracts.settled(call.scope.tenant, asset, wait).await {
        Ok(settled) if replayed => Ok(created(&settled)?.replayed()),
        Ok(settled) => Ok(created(&settled)?.into_response()),
        Err(error) => {
            tracing::warn!(%error, asset = %asset, "reading a registered contract while waiting for its deployment");
            Ok(response)
        }
    }
}

/// A registration's 201: the contract, and where to read it.
fn created(contract: &Contract) -> tokenops_app::AppResult<Reply> {
    Reply::created(&ContractOut::from(contract), format!("/api/contracts/{}", contract.asset_id))
}

/// The `{assetId}` of a contract write, upper-cased as assets are named.
struct AssetPath(String);

impl ScopedPath for AssetPath {
    async fn read(parts: &mut Parts, state: &Arc<ApiState>, scope: &TenantScope) -> Result<Self, ApiError> {
        Ok(Self(PathText::read(parts, state, scope).await?.0.to_ascii_uppercase()))
    }

    fn values(&self) -> Vec<&dyn Display> {
        vec![&self.0]
    }

    fn resource(&self) -> Option<String> {
        Some(self.0.clone())
    }
}

/// Switch a contract between ACTIVE and INACTIVE, or rename it.
#[utoipa::path(
    patch, path = "/api/contracts/{assetId}", tag = "contracts", operation_id = "contracts.update",
    params(path_params::AssetId, crate::openapi::OptionalIdempotencyKey),
    request_body = ContractPatch,
    responses(
        (status = 200, description = "The contract after the change", body = ContractOut),
        (status = 400, description = "Nothing to change, unknown status, blank or too long name, or bad Idempotency-Key", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchContract,
        crate::openapi::KeyInFlight,
        (status = 422, description = "The contract is PENDING or FAILED (only ACTIVE and INACTIVE switch), or the key was reused with a different payload", body = crate::openapi::ErrorBody),
    )
)]
async fn update_contract(call: OptionalKeyWrite<AssetPath>, body: JsonBody<ContractPatch>) -> ApiResult<Response> {
    let asset = call.path.0.clone();
    let status = match body.value.status.as_deref() {
        None => None,
        Some(text @ ("ACTIVE" | "INACTIVE")) => ContractStatus::parse(text),
        Some(other) => {
            return Err(Error::invalid_field("status", format!("{other:?} must be ACTIVE or INACTIVE")).into());
        }
    };
    let name = optional_text("name", body.value.name, NAME_MAX)?;
    something_to_change(&[status.is_some(), name.is_some()], "status and/or name")?;
    call.run(&UPDATE, &body.document, async |app, w| {
        Reply::ok(&ContractOut::from(&app.contracts.update(w, &asset, ContractChange { status, name }).await?))
    })
    .await
}

/// Read the contract of an asset.
#[utoipa::path(
    get, path = "/api/contracts/{assetId}", tag = "contracts", operation_id = "contracts.get",
    params(path_params::AssetId),
    responses(
        (status = 200, description = "The asset's contract", body = ContractOut),
        crate::openapi::NoSuchContract,
    )
)]
async fn get_contract(call: TenantCall<PathText>) -> ApiResult<Response> {
    call.show(async |app, tenant, PathParam(asset)| {
        Ok(ContractOut::from(&app.contracts.get(tenant, &asset.to_ascii_uppercase()).await?))
    })
    .await
}

/// List contracts, oldest first (paging style A).
#[utoipa::path(
    get, path = "/api/contracts", tag = "contracts", operation_id = "contracts.list",
    params(
        ("assetId" = Option<String>, Query, description = "Case-insensitive"),
        ("status" = Option<ContractStatus>, Query),
        crate::openapi::PageQuery,
    ),
    responses(
        (status = 200, description = "Style A page of contracts, oldest first", body = ContractPage),
        crate::openapi::PagingOrStatusInvalid,
    )
)]
async fn list_contracts(call: TenantCall, params: QueryParams) -> ApiResult<Response> {
    let status = params.one_of("status", &ContractStatus::ALL, ContractStatus::as_str)?;
    let asset_id = params.non_blank("assetId")?.map(AssetId::parse).transpose();
    paging::list(&params, STRICT_SIZE, Style::A, async |page| {
        // An asset that cannot exist matches nothing: an empty page, not an error.
        let Ok(asset_id) = asset_id else { return Ok(paging::none_match()) };
        let filter = ContractFilter { asset_id, status };
        Ok(call.state.app.contracts.list(call.scope.tenant, &filter, page).await?.map(|c| ContractOut::from(&c)))
    })
    .await
}
