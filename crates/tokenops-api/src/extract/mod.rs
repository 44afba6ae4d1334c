//! The spec's cross-cutting request rules, each implemented once as an extractor or a layer and
//! used by every router.

pub mod api_version;
pub mod auth;
pub mod body;
pub mod call;
pub mod idempotency;
pub mod paging;
pub mod params;
pub mod path;
pub mod strict_json;

pub use auth::{Authenticated, TenantScope};
pub use body::JsonBody;
pub use call::TenantCall;
pub use idempotency::IdempotencyKey;
pub use params::QueryParams;
pub use path::{OwnTenant, PathId, PathParam, PathText};
