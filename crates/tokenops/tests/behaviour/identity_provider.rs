//! The embedded identity provider over HTTP: discovery, JWKS, the client-credentials token
//! endpoint (RFC 6749 errors), the operator bootstrap, key rotation with overlap, and that the
//! embedded provider and an external one exclude each other.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::Method;
use serde_json::Value;
use std::collections::BTreeMap;
use tokenops_testkit::{Backend, Reply, TestApp, backends};

async fn embedded(backend: Backend) -> TestApp {
    TestApp::spawn_embedded(backend, BTreeMap::new()).await
}

fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("JWT payload");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).expect("base64url")).expect("claims JSON")
}

/// An organisation endpoint's read with `token`, which verifies it before anything else.
async fn customers_with(app: &TestApp, token: &str) -> Reply {
    let request = app.raw(Method::GET, "/api/customers").header("API-Version", "1.0.0").bearer_auth(token);
    Reply::read(request.send().await.expect("get")).await
}

fn header_of(token: &str) -> Value {
    let header = token.split('.').next().expect("JWT header");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).expect("base64url")).expect("header JSON")
}

async fn token_request(app: &TestApp, form: &str, basic: Option<(&str, &str)>, content_type: &str) -> Reply {
    let mut request =
        app.raw(Method::POST, "/idp/oauth2/token").header("Content-Type", content_type).body(form.to_owned());
    if let Some((id, secret)) = basic {
        request = request.basic_auth(id, Some(secret));
    }
    Reply::read(request.send().await.expect("token request")).await
}

async fn discovery_names_the_issuer_its_keys_and_token_endpoint(backend: Backend) {
    let app = embedded(backend).await;
    let doc =
        Reply::read(app.raw(Method::GET, "/idp/.well-known/openid-configuration").send().await.expect("get")).await;
    doc.expect(200);
    let issuer = format!("{}/idp", app.base_url);
    assert_eq!(doc.body["issuer"], issuer.as_str());
    assert_eq!(doc.body["jwks_uri"], format!("{issuer}/.well-known/jwks.json").as_str());
    assert_eq!(doc.body["token_endpoint"], format!("{issuer}/oauth2/token").as_str());
    assert!(doc.body["grant_types_supported"].as_array().is_some_and(|g| g.iter().any(|v| v == "client_credentials")));
}

async fn the_operator_bootstrap_writes_credentials_readable_only_by_the_owner(backend: Backend) {
    let app = embedded(backend).await;
    let credentials = app.operator_credentials();
    assert_eq!(credentials["tokenUrl"], format!("{}/idp/oauth2/token", app.base_url).as_str());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(app.db.dir().join("operator-credentials.json")).expect("file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // The secret is stored hashed only.
    let secret = credentials["clientSecret"].as_str().expect("secret");
    assert_eq!(app.db.count("machine_clients", "").await, 1);
    let stored = app.db.strings("SELECT secret_hash FROM machine_clients").await;
    assert!(!stored[0].contains(secret));
    // A restart on the same store does not mint a second operator client.
    tokenops::wiring::bootstrap_operator(
        &tokenops::config::Config::load(
            &tokenops::config::Sources::from_parts(
                [("TOKENOPS_DATA_DIR".to_owned(), app.db.dir().display().to_string())].into_iter().collect(),
            )
            .expect("sources"),
        )
        .expect("config"),
        &app.app,
    )
    .await
    .expect("bootstrap again");
    assert_eq!(app.db.count("machine_clients", "").await, 1);
}

async fn the_token_endpoint_grants_client_credentials_by_basic_or_form(backend: Backend) {
    let app = embedded(backend).await;
    let credentials = app.operator_credentials();
    let (id, secret) =
        (credentials["clientId"].as_str().expect("id"), credentials["clientSecret"].as_str().expect("secret"));
    let by_basic =
        token_request(&app, "grant_type=client_credentials", Some((id, secret)), "application/x-www-form-urlencoded")
            .await;
    by_basic.expect(200);
    assert_eq!(by_basic.body["token_type"], "Bearer");
    assert_eq!(by_basic.body["expires_in"], 3600);
    assert_eq!(by_basic.header("cache-control"), Some("no-store"));
    let form = format!("grant_type=client_credentials&client_id={id}&client_secret={secret}");
    token_request(&app, &form, None, "application/x-www-form-urlencoded").await.expect(200);

    let token = by_basic.body["access_token"].as_str().expect("token");
    let claims = claims_of(token);
    assert_eq!(claims["sub"], id);
    assert_eq!(claims["iss"], format!("{}/idp", app.base_url).as_str());
    assert!(claims.get("tenant_id").is_none(), "the operator acts for no organisation");
    assert_eq!(header_of(token)["alg"], "ES256");
    let jwks = Reply::read(app.raw(Method::GET, "/idp/.well-known/jwks.json").send().await.expect("jwks")).await;
    let kid = header_of(token)["kid"].clone();
    assert!(jwks.body["keys"].as_array().expect("keys").iter().any(|k| k["kid"] == kid && k["crv"] == "P-256"));
    assert!(jwks.body["keys"].as_array().expect("keys").iter().all(|k| k.get("d").is_none()), "no private part");

    // The operator's token is verified, and refused on organisation endpoints for naming none
    // (a 401 whose message says so; a token that fails verification says otherwise).
    let refused = customers_with(&app, token).await;
    assert_eq!(refused.status, 401, "{}", refused.body);
    assert!(refused.body["message"].as_str().is_some_and(|m| m.contains("tenant_id")), "verified: {}", refused.body);
}

async fn the_token_endpoint_answers_oauth_errors(backend: Backend) {
    let app = embedded(backend).await;
    let credentials = app.operator_credentials();
    let id = credentials["clientId"].as_str().expect("id");
    let form = "application/x-www-form-urlencoded";
    let wrong = token_request(&app, "grant_type=client_credentials", Some((id, "not-the-secret")), form).await;
    wrong.expect(401);
    assert_eq!(wrong.body["error"], "invalid_client");
    assert!(wrong.header("www-authenticate").is_some_and(|v| v.starts_with("Basic")));
    let unknown = token_request(&app, "grant_type=client_credentials", Some(("not-a-client", "x")), form).await;
    unknown.expect(401);
    assert_eq!(unknown.body, wrong.body, "an unknown client and a wrong secret look the same");
    let no_grant = token_request(&app, "", Some((id, "x")), form).await;
    no_grant.expect(400);
    assert_eq!(no_grant.body["error"], "invalid_request");
    let password_grant = token_request(&app, "grant_type=password&username=a&password=b", Some((id, "x")), form).await;
    password_grant.expect(400);
    assert_eq!(password_grant.body["error"], "unsupported_grant_type");
    // No client authentication, or half of one, is a failed one (RFC 6749 §5.2): 401.
    let anonymous = token_request(&app, "grant_type=client_credentials", None, form).await;
    anonymous.expect(401);
    assert_eq!(anonymous.body["error"], "invalid_client");
    assert!(anonymous.header("www-authenticate").is_some_and(|v| v.starts_with("Basic")));
    let id_only = token_request(&app, &format!("grant_type=client_credentials&client_id={id}"), None, form).await;
    id_only.expect(401);
    assert_eq!(id_only.body["error"], "invalid_client");
    let json_body =
        token_request(&app, "{\"grant_type\":\"client_credentials\"}", Some((id, "x")), "application/json").await;
    json_body.expect(400);
    assert_eq!(json_body.body["error"], "invalid_request");
    let both = format!("grant_type=client_credentials&client_id={id}&client_secret=x");
    let two_methods = token_request(&app, &both, Some((id, "x")), form).await;
    two_methods.expect(400);
    assert_eq!(two_methods.body["error"], "invalid_request");
    // A parameter sent twice (RFC 6749 §3.2) is refused, whatever the second says.
    let twice = "grant_type=client_credentials&grant_type=password";
    let repeated = token_request(&app, twice, Some((id, "x")), form).await;
    repeated.expect(400);
    assert_eq!(repeated.body["error"], "invalid_request");
    assert!(repeated.body["error_description"].as_str().is_some_and(|d| d.contains("grant_type")), "{}", repeated.body);
}

async fn a_token_of_an_untrusted_issuer_is_401_on_the_embedded_provider(backend: Backend) {
    let app = embedded(backend).await;
    // `app.tenant` holds a token of the kit's test issuer, which this app does not trust.
    app.get("/api/customers").await.expect(401);
}

async fn a_rotated_key_keeps_verifying_its_tokens_until_they_expire(backend: Backend) {
    let app = embedded(backend).await;
    let before = app.operator_token().await;
    let old_kid = header_of(&before)["kid"].clone();
    app.app.identity.rotate().await.expect("rotate");
    let after = app.operator_token().await;
    assert_ne!(header_of(&after)["kid"], old_kid, "new tokens are signed by the new key");
    let jwks = Reply::read(app.raw(Method::GET, "/idp/.well-known/jwks.json").send().await.expect("jwks")).await;
    let kids: Vec<Value> = jwks.body["keys"].as_array().expect("keys").iter().map(|k| k["kid"].clone()).collect();
    assert!(kids.contains(&old_kid) && kids.len() == 2, "both keys published during the overlap: {kids:?}");
    for token in [&before, &after] {
        let reply = customers_with(&app, token).await;
        assert_eq!(reply.status, 401, "{}", reply.body);
        assert!(
            reply.body["message"].as_str().is_some_and(|m| m.contains("tenant_id")),
            "verified (then refused for lacking an organisation): {}",
            reply.body
        );
    }
    // Past one access-token lifetime and the overlap's slack, the old key is withdrawn.
    app.clock.advance_millis((3_600 + 301) * 1_000);
    let jwks = Reply::read(app.raw(Method::GET, "/idp/.well-known/jwks.json").send().await.expect("jwks")).await;
    assert!(jwks.body["keys"].as_array().expect("keys").iter().all(|k| k["kid"] != old_kid));
}

async fn signing_keys_are_sealed_at_rest(backend: Backend) {
    let app = embedded(backend).await;
    let sealed = app.db.strings("SELECT sealed_key FROM signing_keys").await;
    assert_eq!(sealed.len(), 1);
    let jwks = Reply::read(app.raw(Method::GET, "/idp/.well-known/jwks.json").send().await.expect("jwks")).await;
    let public_x = jwks.body["keys"][0]["x"].as_str().expect("x");
    assert!(!sealed[0].contains(public_x), "the stored key is ciphertext");
    assert!(!sealed[0].contains("BEGIN"), "no PEM at rest");
}

async fn with_an_external_provider_the_embedded_one_is_off(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    for path in ["/idp/.well-known/openid-configuration", "/idp/.well-known/jwks.json"] {
        Reply::read(app.raw(Method::GET, path).send().await.expect("get")).await.expect(404);
    }
    Reply::read(
        app.raw(Method::POST, "/idp/oauth2/token")
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .expect("post"),
    )
    .await
    .expect(404);
}

backends!(
    discovery_names_the_issuer_its_keys_and_token_endpoint,
    the_operator_bootstrap_writes_credentials_readable_only_by_the_owner,
    the_token_endpoint_grants_client_credentials_by_basic_or_form,
    the_token_endpoint_answers_oauth_errors,
    a_token_of_an_untrusted_issuer_is_401_on_the_embedded_provider,
    a_rotated_key_keeps_verifying_its_tokens_until_they_expire,
    signing_keys_are_sealed_at_rest,
    with_an_external_provider_the_embedded_one_is_off,
);
