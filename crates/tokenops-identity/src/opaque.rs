//! Opaque tokens: random bearer strings the service hands out once and keeps only as a hash.
//! Refresh tokens, first-password challenge sessions, one-time secret-reveal tokens and machine
//! clients' secrets are all of this kind.
//!
//! A token is 32 bytes from the OS generator, unpadded base64url (43 characters). It is stored
//! as the hex SHA-256 of that text, so a leaked table yields no usable token, and a lookup is an
//! exact match on an indexed column.
//!
//! Why SHA-256 and not argon2, also for client secrets: a slow hash protects guessable inputs
//! (people's passwords). A 256-bit random value cannot be guessed, so one SHA-256 is already
//! beyond brute force, and a slow hash would only hand anyone who can reach the token endpoint a
//! way to burn 19 MiB and tens of milliseconds of CPU per request.
//!
//! An opaque token has no dots, so it never parses as a JWT: a refresh token presented as an
//! access token fails verification as malformed.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use rand::rngs::OsRng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Length of a token's text: 32 bytes as unpadded base64url.
pub const OPAQUE_TOKEN_LEN: usize = 43;

/// A new token: `(token, hash)`. Give the token to the client; store only the hash.
pub fn new_opaque_token() -> (String, String) {
    let mut bytes = [0u8; 32];
    OsRng.fill_bytes(&mut bytes);
    let token = URL_SAFE_NO_PAD.encode(bytes);
    let hash = hash_opaque(&token);
    (token, hash)
}

/// The stored form of `token`: hex SHA-256 of its text. Any text hashes, so a caller may look
/// up whatever a client sent; only a token this module made will ever match.
pub fn hash_opaque(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `token` is the one `stored_hash` was made from, in constant time. For checks done in
/// memory after a lookup by another key (a client secret found by client id); lookups by the
/// hash itself leak nothing through timing, since the client cannot choose the hash.
pub fn opaque_matches(token: &str, stored_hash: &str) -> bool {
    hash_opaque(token).as_bytes().ct_eq(stored_hash.as_bytes()).into()
}

/// Whether `text` has the shape of a token this module makes; a cheap early refusal.
pub fn is_opaque_token(text: &str) -> bool {
    text.len() == OPAQUE_TOKEN_LEN && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_32_random_bytes_and_its_hash_is_sha256_hex() {
        let (token, hash) = new_opaque_token();
        assert_eq!(token.len(), OPAQUE_TOKEN_LEN);
        assert!(is_opaque_token(&token));
        assert_eq!(URL_SAFE_NO_PAD.decode(&token).expect("base64url").len(), 32);
        assert_eq!(hash, hash_opaque(&token));
        assert_eq!(hash.len(), 64);
        assert!(!token.contains('.'), "never parses as a JWT");
        let (other, other_hash) = new_opaque_token();
        assert_ne!(token, other);
        assert_ne!(hash, other_hash);
    }

    /// FIPS 180-2 / NIST CAVP examples.
    #[test]
    fn hashes_are_standard_sha256() {
        assert_eq!(hash_opaque(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(hash_opaque("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn matching_is_exact() {
        let (token, hash) = new_opaque_token();
        assert!(opaque_matches(&token, &hash));
        assert!(!opaque_matches(&token[1..], &hash));
        assert!(!opaque_matches(&token, &hash.to_uppercase()));
        assert!(!opaque_matches(&token, ""));
        assert!(!is_opaque_token("eyJhbGciOiJFUzI1NiJ9.e30.sig"));
        assert!(!is_opaque_token(&"a".repeat(44)));
    }
}
