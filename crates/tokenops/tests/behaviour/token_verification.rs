//! Bearer-token verification against the issuer's published keys, driven over HTTP on both
//! stores: the key set's TTL (a withdrawn key stops being accepted, an outage does not lock
//! callers out) and the optional audience.

use reqwest::Method;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use tokenops_testkit::{Backend, Reply, Tenant, TestApp, backends};
use uuid::Uuid;

const AUDIENCE: &str = "https://api.tokenops.test";

fn settings(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

async fn get_as(app: &TestApp, tenant: &Tenant) -> Reply {
    Reply::read(app.request_as(tenant, Method::GET, "/api/customers").send().await.expect("send")).await
}

async fn get_with_token(app: &TestApp, token: &str) -> Reply {
    let request = app.raw(Method::GET, "/api/customers").header("API-Version", "1.0.0").bearer_auth(token);
    Reply::read(request.send().await.expect("send")).await
}

#[track_caller]
fn assert_401(reply: &Reply) {
    reply.expect(401);
    assert_eq!(reply.body["code"], "UNAUTHORIZED", "{}", reply.body);
}

fn message(reply: &Reply) -> &str {
    reply.body["message"].as_str().unwrap_or("")
}

fn claims_with_audience(app: &TestApp, aud: Value) -> Value {
    let mut claims = app.issuer.claims(&app.clock, &Uuid::now_v7().to_string(), Some(app.tenant.id), 3_600);
    claims["aud"] = aud;
    claims
}

async fn a_withdrawn_key_stops_being_accepted_after_the_key_ttl(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", "60")])).await;
    app.get("/api/customers").await.expect(200);
    let old_kid = app.issuer.kid();
    app.issuer.rotate();
    let signed_with_new_key = app.new_tenant();
    // The new key is picked up once the unknown-kid rate limit allows; that fetch restarts the TTL.
    app.clock.advance_millis(10_001);
    get_as(&app, &signed_with_new_key).await.expect(200);
    app.issuer.withdraw(&old_kid);
    let fetches = app.issuer.jwks_requests();
    // Until the TTL runs out the cached set is trusted as is: no fetch per request.
    app.clock.advance_millis(59_000);
    app.get("/api/customers").await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), fetches);
    // Past the TTL the set is fetched again, and the withdrawn key is gone from it.
    app.clock.advance_millis(1_000);
    let reply = app.get("/api/customers").await;
    assert_401(&reply);
    assert_eq!(app.issuer.jwks_requests(), fetches + 1);
    get_as(&app, &signed_with_new_key).await.expect(200);
    // It stays refused: the refreshed set is the one served from now on.
    app.clock.advance_millis(30_000);
    assert_401(&app.get("/api/customers").await);
}

async fn an_issuer_outage_after_the_key_ttl_keeps_known_keys_working(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings(&[("TOKENOPS_AUTH_JWKS_TTL_SECS", "60")])).await;
    app.get("/api/customers").await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), 1);
    app.issuer.set_unavailable(true);
    app.clock.advance_millis(60_000);
    // The refresh is tried, fails, and the keys fetched before keep serving.
    app.get("/api/customers").await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), 2);
    // The failed refresh is retried only after the refresh interval, not on every request.
    app.get("/api/customers").await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), 2);
    // A key published during the outage cannot be fetched: the caller is told to retry.
    app.issuer.rotate();
    let signed_with_new_key = app.new_tenant();
    let reply = get_as(&app, &signed_with_new_key).await;
    assert_401(&reply);
    assert!(message(&reply).contains("retry"), "{}", reply.body);
    app.clock.advance_millis(10_001);
    app.get("/api/customers").await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), 3);
    // Once the issuer is back, the next refetch brings the new key.
    app.issuer.set_unavailable(false);
    app.clock.advance_millis(10_001);
    get_as(&app, &signed_with_new_key).await.expect(200);
    assert_eq!(app.issuer.jwks_requests(), 4);
    app.get("/api/customers").await.expect(200);
}

async fn the_audience_is_required_when_configured(backend: Backend) {
    let app = TestApp::spawn_with(backend, settings(&[("TOKENOPS_AUTH_AUDIENCE", AUDIENCE)])).await;
    // The kit's default token carries no aud.
    let reply = app.get("/api/customers").await;
    assert_401(&reply);
    assert!(message(&reply).contains("aud"), "{}", reply.body);
    for wrong in [json!("https://other.example"), json!(["https://other.example"]), json!([]), json!(42)] {
        let token = app.issuer.sign(&claims_with_audience(&app, wrong.clone()));
        assert_401(&get_with_token(&app, &token).await);
    }
    for right in [json!(AUDIENCE), json!(["https://other.example", AUDIENCE])] {
        let token = app.issuer.sign(&claims_with_audience(&app, right.clone()));
        get_with_token(&app, &token).await.expect(200);
    }
}

async fn without_a_configured_audience_aud_is_not_checked(backend: Backend) {
    let app = TestApp::spawn(backend).await;
    app.get("/api/customers").await.expect(200);
    for aud in [json!("https://other.example"), json!(["https://other.example"]), json!(42)] {
        let token = app.issuer.sign(&claims_with_audience(&app, aud.clone()));
        get_with_token(&app, &token).await.expect(200);
    }
}

backends!(
    a_withdrawn_key_stops_being_accepted_after_the_key_ttl,
    an_issuer_outage_after_the_key_ttl_keeps_known_keys_working,
    the_audience_is_required_when_configured,
    without_a_configured_audience_aud_is_not_checked,
);
