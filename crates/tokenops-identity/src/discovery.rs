//! OpenID Connect discovery for the embedded provider (`{auth_url}/.well-known/openid-configuration`):
//! where its keys and token endpoint are, and what it supports. It issues access tokens by the
//! client-credentials grant only; user sign-in is the service's own `/api/auth` endpoints.

use serde_json::{Value, json};

/// The discovery document of the provider whose issuer is `issuer` (its `{auth_url}`).
pub fn openid_configuration(issuer: &str) -> Value {
    // `iss` must equal the discovery URL's prefix exactly (OpenID Connect Discovery §4.3), and
    // a trailing slash would double up in the endpoint URLs.
    let issuer = issuer.trim_end_matches('/');
    json!({
        "issuer": issuer,
        "jwks_uri": format!("{issuer}/.well-known/jwks.json"),
        "token_endpoint": format!("{issuer}/oauth2/token"),
        "grant_types_supported": ["client_credentials"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
        "response_types_supported": ["token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "claims_supported": ["iss", "sub", "tenant_id", "iat", "nbf", "exp", "jti", "token_use"],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_the_endpoints_under_the_issuer() {
        for issuer in ["https://bank.example/idp", "https://bank.example/idp/"] {
            let doc = openid_configuration(issuer);
            assert_eq!(doc["issuer"], "https://bank.example/idp");
            assert_eq!(doc["jwks_uri"], "https://bank.example/idp/.well-known/jwks.json");
            assert_eq!(doc["token_endpoint"], "https://bank.example/idp/oauth2/token");
            assert_eq!(doc["grant_types_supported"], json!(["client_credentials"]));
            assert_eq!(
                doc["token_endpoint_auth_methods_supported"],
                json!(["client_secret_basic", "client_secret_post"])
            );
            assert_eq!(doc["id_token_signing_alg_values_supported"], json!(["ES256"]));
            assert_eq!(doc["response_types_supported"], json!(["token"]));
            assert_eq!(doc["subject_types_supported"], json!(["public"]));
        }
    }
}
