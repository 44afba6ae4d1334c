//! `/api/tenants`: the platform operator creates an organisation; its owner is invited as
//! SUPER_ADMIN and mailed a temporary password.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::Error;
use tokenops_app::identity::organisations::{self, CREATE, NewOrganisation, OrganisationOut};
use tokenops_domain::TenantId;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::embedded_provider_only;
use super::fields::{PERSON_NAME_MAX, email, required, text};
use crate::ApiState;
use crate::error::TimestampStyle;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Authenticated, IdempotencyKey, JsonBody, PathId, PathParam, TenantScope};
use crate::request_id::RequestId;
use crate::write::{self, Reply, WriteRoute};

// The documented maxLength of an owner's names.
const _: () = assert!(PERSON_NAME_MAX == 100);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(create_tenant)).routes(routes!(read_tenant))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct OwnerIn {
    /// At most 254 characters; the invitation is mailed here.
    #[schema(required = true, value_type = String, format = Email)]
    pub email: Option<String>,
    /// 1 to 100 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub first_name: Option<String>,
    /// 1 to 100 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub last_name: Option<String>,
}

/// The spec does not show this payload: the organisation's name and its owner, who is invited
/// as SUPER_ADMIN.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantIn {
    /// 1 to 200 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 200)]
    pub name: Option<String>,
    #[schema(required = true, value_type = OwnerIn)]
    pub owner: Option<OwnerIn>,
}

fn parse(body: TenantIn) -> Result<NewOrganisation, Error> {
    let name = text("name", body.name, 200)?;
    let owner = required("owner", body.owner)?;
    let email = email("owner.email", owner.email)?;
    Ok(NewOrganisation {
        id: TenantId(tokenops_domain::new_id()),
        name,
        owner_email: email,
        owner_first_name: text("owner.firstName", owner.first_name, PERSON_NAME_MAX)?,
        owner_last_name: text("owner.lastName", owner.last_name, PERSON_NAME_MAX)?,
    })
}

/// Organisations are the embedded provider's: with the bank's own, these routes do not exist.
fn require_embedded(state: &ApiState) -> Result<(), ApiError> {
    embedded_provider_only(
        state,
        "Organisations are provisioned by the platform operator of the embedded identity provider",
    )
}

/// Read an organisation (platform operator only): what its creation answered, the owner as
/// they are now. The spec names no read; this is where the creation's `Location` points.
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}", tag = "organisation", operation_id = "tenants.read",
    params(("tenantId" = uuid::Uuid, Path, description = "The organisation's id")),
    responses(
        (status = 200, description = "The organisation and its owner", body = OrganisationOut),
        (status = 400, description = "The id is not a UUID", body = crate::openapi::ErrorBody),
        (status = 401, description = "No usable bearer token", body = crate::openapi::ErrorBody),
        (status = 404, description = "No such organisation", body = crate::openapi::ErrorBody),
    )
)]
async fn read_tenant(State(state): State<Arc<ApiState>>, PathParam(id): PathId) -> ApiResult<Response> {
    require_embedded(&state)?;
    let found = organisations::read(state.app.store.as_ref(), TenantId(id)).await?;
    let organisation = found.ok_or_else(|| Error::not_found(format!("Organisation {id} not found")))?;
    Ok(axum::Json(organisation).into_response())
}

/// Create an organisation (platform operator only).
#[utoipa::path(
    post, path = "/api/tenants", tag = "organisation", operation_id = "tenants.create",
    params(crate::openapi::RequiredIdempotencyKey),
    request_body = TenantIn,
    responses(
        (status = 201, description = "Created; the owner is INVITED as SUPER_ADMIN and mailed a temporary password", body = OrganisationOut, headers(("Location" = String))),
        crate::openapi::FieldOrKeyInvalid,
        (status = 409, description = "The owner's email is registered already, or the key is in flight", body = crate::openapi::ErrorBody),
        crate::openapi::KeyReusedWithAnotherPayload,
    )
)]
async fn create_tenant(
    State(state): State<Arc<ApiState>>,
    Authenticated(caller): Authenticated,
    request_id: axum::Extension<RequestId>,
    route: WriteRoute,
    key: IdempotencyKey,
    body: JsonBody<TenantIn>,
) -> ApiResult<Response> {
    // With the bank's own provider a token merely lacking `tenant_id` proves nothing: only the
    // embedded provider's operator clients are known to be the platform operator.
    require_embedded(&state)?;
    if caller.tenant.is_some() {
        return Err(Error::forbidden("Only the platform operator creates organisations").into());
    }
    let new = parse(body.value)?;
    let temporary = organisations::temporary_password().await?;
    // The write acts on the new organisation (its audit log starts with its own creation);
    // the key belongs to the operator's platform scope.
    let scope = TenantScope::acting_for(new.id, caller, &request_id.0, TimestampStyle::Iso8601);
    let sign_in_url = format!("{}/api/auth/login", state.public_url);
    let request = route.request(&scope, &CREATE, Some(key), &[], &body.document).about(new.id.to_string());
    write::run(&state, request, async |app, w| {
        let o = organisations::create(w, &app.sealer, &sign_in_url, new, temporary).await?;
        Reply::created(&o, format!("/api/tenants/{}", o.id))
    })
    .await
}
