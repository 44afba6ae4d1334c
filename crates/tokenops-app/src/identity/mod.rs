//! Identity and organisation: the embedded identity provider (signing keys, token issuance,
//! the client-credentials grant, operator bootstrap), sign-in, access resolution, and the
//! organisation model: organisations, users, roles, approval groups and machine clients.

pub mod access;
pub mod clients;
pub mod groups;
pub mod organisations;
pub mod provider;
pub mod roles;
pub mod signin;
pub mod users;

pub use provider::{IdentityProvider, OperatorCredentials, ProviderSettings};
