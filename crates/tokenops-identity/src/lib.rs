//! Identity: verifying the bearer tokens of protected requests against the trusted issuer's
//! published keys, and the internals of the embedded identity provider (issue 3): passwords,
//! opaque tokens, signing keys and their rotation, access tokens, discovery, and brute-force
//! lockout. A bank's own provider is configured by issuer and JWKS URL alone.
//!
//! Sealing lives in `tokenops-secrets`, shared with custody. Its types are re-exported here, so
//! the app and the binary, which seal with identity's other parts, reach them through one crate.
//!
//! Everything here is pure or in-process: the store, the HTTP routes and the services that tie
//! these together live in the app and API crates.

pub mod discovery;
pub mod keys;
pub mod lockout;
pub mod opaque;
pub mod passwords;
pub mod tokens;
mod verifier;

pub use discovery::openid_configuration;
pub use keys::{KeyError, KeyRing, SigningKey};
pub use lockout::{LockoutPolicy, LockoutState};
pub use opaque::{hash_opaque, new_opaque_token, opaque_matches};
pub use passwords::{
    HashError, PasswordPolicy, PasswordRule, PolicyViolation, generate_temporary_password, hash_password, needs_rehash,
    verify_against_dummy, verify_password,
};
pub use tokenops_secrets::{KeyTextError, SealError, Sealer};
pub use tokens::{AccessClaims, DEFAULT_ACCESS_TTL_SECS, IssueError, IssuedToken, TokenIssuer};
pub use verifier::{
    Claims, DEFAULT_LEEWAY_SECS, PublishedKeys, TokenVerifier, VerifierSettings, VerifyError, check_jwks_url, jwks_fn,
};

/// Installs the process-wide TLS crypto provider (ring) once. Every TLS client of the service
/// (JWKS fetches, webhooks, PostgreSQL) relies on it; calling twice is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
