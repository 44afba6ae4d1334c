//! A trusted test issuer: an ES256 key pair whose public half is served as a JWKS on a local
//! port, and a minter of access tokens with the claims the service reads.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use p256::ecdsa::SigningKey;
use p256::pkcs8::EncodePrivateKey;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokenops_app::clock::{Clock, ManualClock};
use tokenops_domain::TenantId;
use tokenops_domain::permission::Permission;
use uuid::Uuid;

use crate::Tenant;

pub struct TestIssuer {
    issuer: String,
    /// The current signing key and its kid.
    current: Mutex<(String, EncodingKey)>,
    /// The published key set, shared with the JWKS server.
    jwks: Arc<RwLock<Value>>,
    /// When set, the JWKS endpoint answers 503, as during a provider's outage.
    unavailable: Arc<AtomicBool>,
    /// Requests the JWKS endpoint has received, answered or not.
    jwks_requests: Arc<AtomicUsize>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A P-256 key as (PKCS#8 PEM for signing, public JWK for the key set).
pub fn new_key(kid: &str) -> (EncodingKey, Value) {
    let signing = SigningKey::random(&mut rand::rngs::OsRng);
    let pem = signing.to_pkcs8_pem(Default::default()).expect("PKCS#8 PEM");
    let key = EncodingKey::from_ec_pem(pem.as_bytes()).expect("EC key");
    let point = signing.verifying_key().to_encoded_point(false);
    let jwk = json!({
        "kty": "EC", "crv": "P-256", "alg": "ES256", "use": "sig", "kid": kid,
        "x": URL_SAFE_NO_PAD.encode(point.x().expect("x")),
        "y": URL_SAFE_NO_PAD.encode(point.y().expect("y")),
    });
    (key, jwk)
}

impl TestIssuer {
    pub async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind issuer");
        let issuer = format!("http://{}", listener.local_addr().expect("addr"));
        let kid = format!("test-{}", Uuid::now_v7());
        let (key, jwk) = new_key(&kid);
        let jwks = Arc::new(RwLock::new(json!({ "keys": [jwk] })));
        let unavailable = Arc::new(AtomicBool::new(false));
        let jwks_requests = Arc::new(AtomicUsize::new(0));
        let (served, down, counter) = (jwks.clone(), unavailable.clone(), jwks_requests.clone());
        let router = axum::Router::new().route(
            "/.well-known/jwks.json",
            axum::routing::get(move || {
                use axum::response::IntoResponse;
                counter.fetch_add(1, Ordering::SeqCst);
                let response = if down.load(Ordering::SeqCst) {
                    axum::http::StatusCode::SERVICE_UNAVAILABLE.into_response()
                } else {
                    axum::Json(served.read().map(|v| v.clone()).unwrap_or_default()).into_response()
                };
                async move { response }
            }),
        );
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self { issuer, current: Mutex::new((kid, key)), jwks, unavailable, jwks_requests, server }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The settings by which a service trusts this issuer as its identity provider.
    pub fn service_settings(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("TOKENOPS_AUTH_ISSUER".to_owned(), self.issuer().to_owned()),
            ("TOKENOPS_AUTH_JWKS_URL".to_owned(), self.jwks_url()),
        ])
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/.well-known/jwks.json", self.issuer)
    }

    /// The key set as published now.
    pub fn jwks(&self) -> Value {
        self.jwks.read().map(|v| v.clone()).unwrap_or_default()
    }

    /// The kid of the current signing key.
    pub fn kid(&self) -> String {
        self.current.lock().map(|c| c.0.clone()).unwrap_or_default()
    }

    /// Rotates: a new signing key is published beside the old ones (which stay, as during a
    /// provider's overlap) and signs from now on. Returns its kid.
    pub fn rotate(&self) -> String {
        let kid = format!("test-{}", Uuid::now_v7());
        let (key, jwk) = new_key(&kid);
        if let Ok(mut set) = self.jwks.write()
            && let Some(keys) = set["keys"].as_array_mut()
        {
            keys.push(jwk);
        }
        if let Ok(mut current) = self.current.lock() {
            *current = (kid.clone(), key);
        }
        kid
    }

    /// Withdraws the key `kid` from the published set (as a provider does after a rotation, or
    /// when a key is compromised). It keeps signing if it is the current key, so tests can show
    /// its tokens are refused.
    pub fn withdraw(&self, kid: &str) {
        if let Ok(mut set) = self.jwks.write()
            && let Some(keys) = set["keys"].as_array_mut()
        {
            keys.retain(|k| k["kid"] != kid);
        }
    }

    /// Makes the JWKS endpoint answer 503 (`true`) or serve the key set again (`false`).
    pub fn set_unavailable(&self, unavailable: bool) {
        self.unavailable.store(unavailable, Ordering::SeqCst);
    }

    /// How many times the key set has been requested.
    pub fn jwks_requests(&self) -> usize {
        self.jwks_requests.load(Ordering::SeqCst)
    }

    /// Signs `claims` with the issuer's current key and `kid`.
    pub fn sign(&self, claims: &Value) -> String {
        let current = self.current.lock().expect("issuer key");
        self.sign_with(&current.1, &current.0, claims)
    }

    /// Signs with any key and kid (for forged-token tests).
    pub fn sign_with(&self, key: &EncodingKey, kid: &str, claims: &Value) -> String {
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, claims, key).expect("sign token")
    }

    /// Standard claims for `sub` in `tenant`, expiring `ttl_secs` after the clock's now. An
    /// organisation's token carries every permission in `scope`, the way a bank's provider
    /// grants them to a subject tokenops has no record of; [`TestIssuer::claims_with_scope`]
    /// narrows it.
    pub fn claims(&self, clock: &ManualClock, sub: &str, tenant: Option<TenantId>, ttl_secs: i64) -> Value {
        let mut claims = self.claims_with_scope(clock, sub, tenant, ttl_secs, None);
        if tenant.is_some() {
            let all: Vec<&str> = Permission::ALL.iter().map(|p| p.name()).collect();
            claims["scope"] = json!(all.join(" "));
        }
        claims
    }

    /// As [`TestIssuer::claims`] with the given `scope` claim (none when `None`).
    pub fn claims_with_scope(
        &self,
        clock: &ManualClock,
        sub: &str,
        tenant: Option<TenantId>,
        ttl_secs: i64,
        scope: Option<&str>,
    ) -> Value {
        let now = clock.now().as_micros() / 1_000_000;
        let mut claims = json!({ "iss": self.issuer, "sub": sub, "iat": now, "exp": now + ttl_secs });
        if let Some(t) = tenant {
            claims["tenant_id"] = json!(t.to_string());
        }
        if let Some(scope) = scope {
            claims["scope"] = json!(scope);
        }
        claims
    }

    pub fn new_tenant(&self, clock: &ManualClock) -> Tenant {
        let id = TenantId(Uuid::now_v7());
        let subject = Uuid::now_v7().to_string();
        let token = self.sign(&self.claims(clock, &subject, Some(id), 3_600));
        Tenant { id, subject, token }
    }
}
