//! Path parameters: a path id that is not a UUID is 400, not 404.

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use tokenops_app::Error;
use uuid::Uuid;

use crate::error::ApiError;

/// The route's single `{…Id}` path parameter, parsed as a UUID.
#[derive(Debug, Clone, Copy)]
pub struct PathId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for PathId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::bad_request("Invalid path"))?;
        let (name, value) = params.last().cloned().ok_or_else(|| Error::bad_request("Invalid path"))?;
        let id = Uuid::parse_str(&value).map_err(|_| Error::invalid_field(&name, "must be a UUID"))?;
        Ok(PathId(id))
    }
}

/// A single text path parameter (for example a client-chosen reference).
#[derive(Debug, Clone)]
pub struct PathText(pub String);

impl<S: Send + Sync> FromRequestParts<S> for PathText {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(params) = Path::<Vec<(String, String)>>::from_request_parts(parts, state)
            .await
            .map_err(|_| Error::bad_request("Invalid path"))?;
        let (_, value) = params.last().cloned().ok_or_else(|| Error::bad_request("Invalid path"))?;
        Ok(PathText(value))
    }
}
