//! One router per area of the spec, and the rules several areas answer by: the routes only the
//! embedded identity provider serves, and responses that are never cached.

pub mod accounts;
pub mod approvals;
pub mod audit;
pub mod auth;
pub mod automations;
pub mod clients;
pub mod contracts;
pub mod customers;
pub mod fields;
pub mod groups;
pub mod idp;
pub mod operations;
pub mod policies;
pub mod roles;
pub mod scripts;
pub mod templates;
pub mod tenants;
pub mod transactions;
pub mod users;
pub mod webhook_events;
pub mod webhooks;

use axum::http::{HeaderValue, header};
use axum::response::Response;
use std::sync::Arc;
use utoipa::openapi::schema::{Schema, SchemaType, Type};
use utoipa::openapi::{RefOr, Required};
use utoipa_axum::router::OpenApiRouter;

use crate::ApiState;
use crate::error::{ApiError, HttpCode};

/// 404 for an operation that belongs to the identity provider when the deployment trusts an
/// external one (the bank's provider owns accounts, credentials and sign-in).
pub(crate) fn embedded_provider_only(state: &ApiState, message: &'static str) -> Result<(), ApiError> {
    if state.embedded_provider { Ok(()) } else { Err(ApiError::http(HttpCode::RouteNotFound, message)) }
}

/// A response that carries credentials (tokens, a secret, a sign-in session): never cached.
pub(crate) fn no_store(mut response: Response) -> Response {
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Marks the bodies of `router` that may be left out (`Option<JsonBody<T>>`, annotated
/// `request_body = Option<T>`) `required: false`. utoipa leaves `required` out for them, and
/// also offers JSON `null` as the body, which the service refuses (400: the body must be an
/// object): only the body's own schema is kept.
pub(crate) fn optional_bodies(mut router: OpenApiRouter<Arc<ApiState>>) -> OpenApiRouter<Arc<ApiState>> {
    for item in router.get_openapi_mut().paths.paths.values_mut() {
        let operations = [&mut item.get, &mut item.put, &mut item.post, &mut item.delete, &mut item.patch];
        for operation in operations.into_iter().flatten() {
            let Some(RefOr::T(body)) = operation.request_body.as_mut() else { continue };
            if body.required.is_some() {
                continue;
            }
            body.required = Some(Required::False);
            for content in body.content.values_mut() {
                let RefOr::T(content) = content else { continue };
                if let Some(RefOr::T(Schema::OneOf(one_of))) = &mut content.schema {
                    one_of.items.retain(|item| !is_null(item));
                    if one_of.items.len() == 1 {
                        content.schema = one_of.items.pop();
                    }
                }
            }
        }
    }
    router
}

fn is_null(schema: &RefOr<Schema>) -> bool {
    matches!(schema, RefOr::T(Schema::Object(o)) if o.schema_type == SchemaType::Type(Type::Null))
}
