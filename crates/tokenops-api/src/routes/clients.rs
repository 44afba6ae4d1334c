//! Machine clients under `/api/tenants/{tenantId}/clients`: create with a role (201 with a
//! one-time secret reveal URL), list (style C, oldest first), disable. The reveal itself is a
//! bootstrap operation in `auth` (`GET /api/auth/client-secrets/{oneTimeToken}`).

use axum::response::Response;
use serde::Deserialize;
use std::sync::Arc;
use tokenops_app::identity::clients::{self, ClientOut, CreatedClient};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::embedded_provider_only;
use super::fields::text;
use crate::ApiState;
use crate::error::ApiResult;
use crate::extract::paging::{self, PageC, STRICT_SIZE, Style};
use crate::extract::{JsonBody, OwnTenant, PathId, PathParam, QueryParams, TenantCall};
use crate::openapi::path_params;
use crate::write::{OptionalKeyWrite, Reply};

const NAME_MAX: usize = 100;
// The documented maxLength of a name.
const _: () = assert!(NAME_MAX == 100);

pub fn router() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(list_clients, create_client)).routes(routes!(get_client, disable_client))
}

/// A page of machine clients (style C).
pub type ClientPage = PageC<ClientOut>;

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientIn {
    /// 1 to 100 characters, not blank.
    #[schema(required = true, value_type = String, pattern = r"\S", max_length = 100)]
    pub name: Option<String>,
    /// The role it acts with; blank or absent means USER (as for an invitation).
    pub role_name: Option<String>,
}

/// Create a machine client of the organisation.
#[utoipa::path(
    post, path = "/api/tenants/{tenantId}/clients", tag = "organisation", operation_id = "clients.create",
    params(
        path_params::TenantId,
        ("Idempotency-Key" = Option<String>, Header, description = "Optional; 1-255 characters. A replay answers with the same reveal URL, which works once"),
    ),
    request_body = ClientIn,
    responses(
        (status = 201, description = "Created; the secret is read once at secretRevealUrl (GET, no bearer token)", body = CreatedClient, headers(("Location" = String))),
        (status = 400, description = "Blank or too long name", body = crate::openapi::ErrorBody),
        (status = 403, description = "Invalid tenant id, missing client:manage, or missing the permission handing out the role needs", body = crate::openapi::ErrorBody),
        crate::openapi::NoRoleOrExternalProvider,
        crate::openapi::KeyConflicts,
    )
)]
async fn create_client(call: OptionalKeyWrite<OwnTenant>, body: JsonBody<ClientIn>) -> ApiResult<Response> {
    embedded_provider_only(
        &call.state,
        "Machine clients are registered at this deployment's external identity provider",
    )?;
    let tenant = call.scope.tenant;
    let name = text("name", body.value.name, NAME_MAX)?;
    let role_name = body.value.role_name;
    let reveal_base = format!("{}/api/auth/client-secrets", call.state.public_url);
    call.run(&clients::CREATE, &body.document, async |app, w| {
        let c = app.clients.create(w, &app.sealer, &reveal_base, name, role_name).await?;
        Reply::created(&c, format!("/api/tenants/{tenant}/clients/{}", c.client_id))
    })
    .await
}

/// List the organisation's machine clients (paging style C, oldest first).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/clients", tag = "organisation", operation_id = "clients.list",
    params(path_params::TenantId, crate::openapi::PageQuery),
    responses(
        (status = 200, description = "Style C page of clients, oldest first (never their secrets)", body = ClientPage),
        (status = 400, description = "Invalid paging, or a sort (the list is oldest first)", body = crate::openapi::ErrorBody),
    )
)]
async fn list_clients(call: TenantCall<OwnTenant>, params: QueryParams) -> ApiResult<Response> {
    if params.has("sort") {
        return Err(
            tokenops_app::Error::invalid_field("sort", "clients are listed oldest first; no sort is offered").into()
        );
    }
    paging::list(&params, STRICT_SIZE, Style::C, |page| call.state.app.clients.list(call.scope.tenant, page)).await
}

/// One of the organisation's machine clients (never its secret).
#[utoipa::path(
    get, path = "/api/tenants/{tenantId}/clients/{clientId}", tag = "organisation", operation_id = "clients.get",
    params(path_params::TenantId, path_params::ClientId),
    responses(
        (status = 200, description = "The client", body = ClientOut),
        crate::openapi::PathIdNotUuid,
        crate::openapi::NoSuchClient,
    )
)]
async fn get_client(call: TenantCall<OwnTenant<PathId>>) -> ApiResult<Response> {
    call.show(async |app, tenant, OwnTenant { then: PathParam(id), .. }| app.clients.get(tenant, id).await).await
}

/// Disable a machine client: its tokens are refused from the next request.
#[utoipa::path(
    delete, path = "/api/tenants/{tenantId}/clients/{clientId}", tag = "organisation", operation_id = "clients.disable",
    params(path_params::TenantId, path_params::ClientId, crate::openapi::OptionalIdempotencyKey),
    responses(
        (status = 204, description = "Disabled"),
        crate::openapi::PathIdNotUuid,
        (status = 403, description = "PERMISSION_DENIED: missing client:manage, the path names another organisation, or the client's role grants what the caller could not hand out (acting on a client is acting on a holder of its role)", body = crate::openapi::ErrorBody),
        crate::openapi::NoSuchClient,
        crate::openapi::KeyConflicts,
    )
)]
async fn disable_client(call: OptionalKeyWrite<OwnTenant<PathId>>) -> ApiResult<Response> {
    let id = call.path.then.0;
    call.run_no_content(&clients::DISABLE, async |app, w| app.clients.disable(w, id).await).await
}
