//! Identity and organisation: the embedded identity provider (signing keys, token issuance,
//! the client-credentials grant, operator bootstrap). Sign-in flows, organisations and users
//! build on it.

pub mod organisations;
pub mod provider;
pub mod signin;

pub use provider::{IdentityProvider, OperatorCredentials, ProviderSettings};
