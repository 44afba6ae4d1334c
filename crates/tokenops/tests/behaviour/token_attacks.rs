//! The token-attack set against the embedded provider: each forged, replayed or misused token
//! is refused with 401 (the operator's token too, on an organisation endpoint: it names no
//! organisation), on an identity endpoint and on an organisation endpoint alike.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::{Backend, Reply, TestApp, backends};
use uuid::Uuid;

fn part(value: &Value) -> String {
    URL_SAFE_NO_PAD.encode(value.to_string())
}

fn decode(token: &str, index: usize) -> Value {
    let segment = token.split('.').nth(index).expect("segment");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(segment).expect("base64url")).expect("json")
}

async fn status_with(app: &TestApp, token: Option<&str>) -> Vec<u16> {
    let mut statuses = Vec::new();
    for path in ["/api/users/me", "/api/customers"] {
        let mut request = app.raw(Method::GET, path).header("API-Version", "1.0.0");
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        statuses.push(Reply::read(request.send().await.expect("send")).await.status);
    }
    statuses
}

/// A signed-in organisation user's tokens (access, refresh).
async fn user_tokens(app: &TestApp) -> (String, String) {
    let operator = app.operator_token().await;
    let created = Reply::read(
        app.raw(Method::POST, "/api/tenants")
            .header("API-Version", "1.0.0")
            .header("Idempotency-Key", Uuid::now_v7().to_string())
            .bearer_auth(&operator)
            .json(&json!({ "name": "Attack Bank", "owner": { "email": "target@bank.example", "firstName": "T", "lastName": "A" } }))
            .send()
            .await
            .expect("create"),
    )
    .await;
    created.expect(201);
    app.drain_jobs().await;
    let outbox = app.db.dir().join("outbox");
    let mail = std::fs::read_dir(&outbox)
        .expect("outbox")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("mail"))
        .find(|m| m.contains("To: target@bank.example"))
        .expect("invitation");
    let temporary =
        mail.lines().find_map(|l| l.strip_prefix("Temporary password: ")).expect("password").trim().to_owned();
    let activated = Reply::read(
        app.raw(Method::POST, "/api/auth/activate")
            .header("API-Version", "1.0.0")
            .json(&json!({ "email": "target@bank.example", "temporaryPassword": temporary, "newPassword": "Correct-Horse-42" }))
            .send()
            .await
            .expect("activate"),
    )
    .await;
    activated.expect(200);
    (
        activated.body["accessToken"].as_str().expect("access").to_owned(),
        activated.body["refreshToken"].as_str().expect("refresh").to_owned(),
    )
}

async fn every_attack_token_is_refused(backend: Backend) {
    let app = TestApp::spawn_embedded(backend, BTreeMap::new()).await;
    let (access, refresh) = user_tokens(&app).await;
    assert_eq!(status_with(&app, Some(&access)).await, [200, 200], "the genuine token works");

    let header = decode(&access, 0);
    let claims = decode(&access, 1);
    let signature = access.split('.').nth(2).expect("signature").to_owned();
    let with = |header: &Value, claims: &Value| format!("{}.{}.{signature}", part(header), part(claims));
    let mut attacks: Vec<(&str, String)> = vec![
        ("malformed", "not.a.jwt".to_owned()),
        ("garbage", "Zm9v".to_owned()),
        (
            "alg none",
            format!("{}.{}.", part(&json!({ "alg": "none", "typ": "JWT", "kid": header["kid"] })), part(&claims)),
        ),
        ("unknown kid", with(&json!({ "alg": "ES256", "typ": "JWT", "kid": "not-a-published-key" }), &claims)),
        (
            "jku header",
            with(
                &json!({ "alg": "ES256", "typ": "JWT", "kid": header["kid"], "jku": "https://evil.example/jwks.json" }),
                &claims,
            ),
        ),
        (
            "x5u header",
            with(
                &json!({ "alg": "ES256", "typ": "JWT", "kid": header["kid"], "x5u": "https://evil.example/cert.pem" }),
                &claims,
            ),
        ),
        (
            "changed claims",
            with(
                &header,
                &json!({ "sub": claims["sub"], "tenant_id": Uuid::now_v7().to_string(), "iss": claims["iss"], "exp": claims["exp"] }),
            ),
        ),
        ("refresh token as access token", refresh.clone()),
    ];
    // HS256 keyed with the published public key (algorithm confusion).
    let jwks: Value =
        Reply::read(app.raw(Method::GET, "/idp/.well-known/jwks.json").send().await.expect("jwks")).await.body;
    let public = jwks["keys"][0].to_string();
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = header["kid"].as_str().map(str::to_owned);
    let confused = jsonwebtoken::encode(&hs, &claims, &EncodingKey::from_secret(public.as_bytes())).expect("hs256");
    attacks.push(("HS256 with the public key", confused));
    for (name, token) in &attacks {
        assert_eq!(status_with(&app, Some(token)).await, [401, 401], "{name} must be refused");
    }
    assert_eq!(status_with(&app, None).await, [401, 401], "no token");

    // Expired, and not yet valid, by the service's clock.
    app.clock.advance_millis((3_600 + 31) * 1_000);
    assert_eq!(status_with(&app, Some(&access)).await, [401, 401], "expired");
    app.clock.advance_millis(-2 * (3_600 + 31) * 1_000);
    assert_eq!(status_with(&app, Some(&access)).await, [401, 401], "not yet valid (issued in the future)");
    app.clock.advance_millis((3_600 + 31) * 1_000);

    // A token of another issuer (the kit's test issuer) is not trusted here.
    assert_eq!(status_with(&app, Some(&app.tenant.token)).await, [401, 401], "wrong issuer");
    // The operator's token is genuine but names no organisation (no tenant_id): 401.
    let operator = app.operator_token().await;
    assert_eq!(status_with(&app, Some(&operator)).await, [401, 401], "operator on organisation endpoints");
}

backends!(every_attack_token_is_refused);
