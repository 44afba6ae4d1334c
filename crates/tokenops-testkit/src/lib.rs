//! The test kit: starts the real tokenops app on a free port with a fresh store (a SQLite file,
//! or a PostgreSQL schema), a manual clock and a trusted test issuer, and drives it with a real
//! HTTP client. Behaviour tests use it the way a bank's integrator uses the service.
//!
//! - [`TestApp::spawn`]: the app in-process (workers off; tests drain jobs deterministically).
//! - [`ServiceProcess`]: the real binary as a child process, for crash tests.
//! - [`TestIssuer`]: an ES256 key set served as JWKS; the app trusts it exactly as it would a
//!   bank's identity provider (issuer URL and JWKS URL in the configuration).
//! - [`Testbed`]: what a test or benchmark of the real binary starts from, and its settings.
//! - [`backends!`]: runs one test body on both stores.
//! - [`webhook_receiver::Receiver`]: a real HTTPS receiver for webhook deliveries.

pub mod anvil;
pub mod cluster;
mod db;
mod issuer;
pub mod organisation;
mod process;
mod signer;
mod store_fixture;
mod testbed;
pub mod webhook_receiver;

pub use db::{Backend, TestDb};
pub use issuer::TestIssuer;
pub use process::ServiceProcess;
pub use signer::TestSigner;
pub use store_fixture::{StoreFixture, open as open_store};
pub use testbed::Testbed;

use reqwest::{Method, RequestBuilder, Response};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokenops::config::{Config, Sources};
use tokenops_app::App;
use tokenops_app::clock::{Clock, ManualClock};
use tokenops_app::jobs::DrainReport;
use tokenops_domain::TenantId;
use tokenops_store::IdempotencyScope;
use uuid::Uuid;

pub const API_VERSION: &str = "1.0.0";

/// Runs an `async fn(Backend)` test body once per store: `backends!(name)` makes
/// `name::sqlite` and `name::postgres`.
#[macro_export]
macro_rules! backends {
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name($crate::Backend::Sqlite).await
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    super::$name($crate::Backend::Postgres).await
                }
            }
        )+
    };
}

/// An organisation and a bearer token of one of its users.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: TenantId,
    pub subject: String,
    pub token: String,
}

/// A running app with a fresh store.
pub struct TestApp {
    pub base_url: String,
    pub client: reqwest::Client,
    pub clock: ManualClock,
    pub app: Arc<App>,
    pub issuer: Arc<TestIssuer>,
    pub db: TestDb,
    /// The organisation requests act for unless told otherwise.
    pub tenant: Tenant,
    server: tokio::task::JoinHandle<()>,
    /// What it was started with, for [`TestApp::restart`].
    extra: BTreeMap<String, String>,
    external_issuer: bool,
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// A reply with its body read.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Reply {
    pub async fn read(response: Response) -> Self {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Self { status, headers, body }
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status, printing the body when it differs.
    #[track_caller]
    pub fn expect(&self, status: u16) -> &Self {
        assert_eq!(self.status, status, "unexpected status; body: {}", self.body);
        self
    }
}

impl TestApp {
    pub async fn spawn(backend: Backend) -> Self {
        Self::spawn_with(backend, BTreeMap::new()).await
    }

    /// Spawns with extra `TOKENOPS_*` settings; tokens come from the test issuer, which the app
    /// trusts as an external provider.
    pub async fn spawn_with(backend: Backend, extra: BTreeMap<String, String>) -> Self {
        Self::start(backend, extra, true).await
    }

    /// Spawns with the embedded identity provider issuing the tokens (no external issuer).
    /// `tenant` still holds a test-issuer token, which this app does not trust.
    pub async fn spawn_embedded(backend: Backend, extra: BTreeMap<String, String>) -> Self {
        Self::start(backend, extra, false).await
    }

    async fn start(backend: Backend, extra: BTreeMap<String, String>, external_issuer: bool) -> Self {
        let Testbed { issuer, db, clock, tenant } = Testbed::start(backend).await;
        Self::start_on(db, Arc::new(issuer), tenant, clock, extra, external_issuer).await
    }

    /// Stops this app and starts a new one on the same store, with the same issuer, tenant and
    /// settings, its clock where this one's stood: a restart of the service.
    pub async fn restart(mut self) -> Self {
        self.server.abort();
        let placeholder = TestDb::create(self.db.backend).await;
        let db = std::mem::replace(&mut self.db, placeholder);
        let clock = ManualClock::starting_at(self.clock.now());
        let (issuer, tenant, extra) = (self.issuer.clone(), self.tenant.clone(), std::mem::take(&mut self.extra));
        let external_issuer = self.external_issuer;
        drop(self);
        Self::start_on(db, issuer, tenant, clock, extra, external_issuer).await
    }

    async fn start_on(
        db: TestDb,
        issuer: Arc<TestIssuer>,
        tenant: Tenant,
        clock: ManualClock,
        extra: BTreeMap<String, String>,
        external_issuer: bool,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a free port");
        let base_url = format!("http://{}", listener.local_addr().expect("local address"));
        let mut env = db.service_settings();
        env.insert("TOKENOPS_PUBLIC_URL".to_owned(), base_url.clone());
        // The test apps run their jobs by hand (`drain_jobs`): a registration waiting for its
        // deployment would wait for nothing. A test that runs workers sets its own wait.
        env.insert("TOKENOPS_CONTRACT_REGISTER_WAIT_MS".to_owned(), "0".to_owned());
        if external_issuer {
            env.extend(issuer.service_settings());
        }
        env.extend(extra.clone());
        let config = Config::load(&Sources::from_parts(env).expect("config sources")).expect("test configuration");
        let store = tokenops::wiring::open_store(&config, &clock).await.expect("open the test store");
        let service =
            tokenops::wiring::build(&config, store, Arc::new(clock.clone())).await.expect("build the service");
        tokenops::wiring::bootstrap_operator(&config, &service.app).await.expect("bootstrap the operator");
        let router = tokenops_api::router(service.state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            base_url,
            client: reqwest::Client::builder().build().expect("HTTP client"),
            clock,
            app: service.app,
            issuer,
            db,
            tenant,
            server,
            extra,
            external_issuer,
        }
    }

    /// The operator credentials written at the first start (embedded provider).
    pub fn operator_credentials(&self) -> Value {
        let text = std::fs::read_to_string(self.db.dir().join("operator-credentials.json"))
            .expect("operator credentials file");
        serde_json::from_str(&text).expect("credentials JSON")
    }

    /// An access token from the embedded provider's token endpoint (client credentials).
    pub async fn client_token(&self, client_id: &str, client_secret: &str) -> String {
        let reply = self
            .client
            .post(format!("{}/idp/oauth2/token", self.base_url))
            .basic_auth(client_id, Some(client_secret))
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body("grant_type=client_credentials")
            .send()
            .await
            .expect("token request");
        assert_eq!(reply.status().as_u16(), 200, "token endpoint refused the client");
        let body: Value = reply.json().await.expect("token JSON");
        body["access_token"].as_str().expect("access_token").to_owned()
    }

    /// The platform operator's access token.
    pub async fn operator_token(&self) -> String {
        let credentials = self.operator_credentials();
        self.client_token(
            credentials["clientId"].as_str().expect("clientId"),
            credentials["clientSecret"].as_str().expect("clientSecret"),
        )
        .await
    }

    /// A fresh organisation with a token valid for an hour of the app's clock.
    pub fn new_tenant(&self) -> Tenant {
        self.issuer.new_tenant(&self.clock)
    }

    /// A request as an integrator sends it: API-Version and the default tenant's bearer token.
    pub fn request(&self, method: Method, path: &str) -> RequestBuilder {
        self.request_as(&self.tenant, method, path)
    }

    pub fn request_as(&self, tenant: &Tenant, method: Method, path: &str) -> RequestBuilder {
        self.client
            .request(method, format!("{}{path}", self.base_url))
            .header("API-Version", API_VERSION)
            .bearer_auth(&tenant.token)
    }

    /// A bare request: no headers at all.
    pub fn raw(&self, method: Method, path: &str) -> RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base_url))
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.get_as(&self.tenant, path).await
    }

    pub async fn get_as(&self, tenant: &Tenant, path: &str) -> Reply {
        Reply::read(self.request_as(tenant, Method::GET, path).send().await.expect("GET")).await
    }

    /// A JSON write with an Idempotency-Key.
    pub async fn write(&self, method: Method, path: &str, key: &str, body: &Value) -> Reply {
        self.write_as(&self.tenant, method, path, key, body).await
    }

    /// A JSON write with an Idempotency-Key, as `tenant`.
    pub async fn write_as(&self, tenant: &Tenant, method: Method, path: &str, key: &str, body: &Value) -> Reply {
        let request = self.request_as(tenant, method, path).header("Idempotency-Key", key).json(body);
        Reply::read(request.send().await.expect("write")).await
    }

    /// A POST with a fresh Idempotency-Key.
    pub async fn post(&self, path: &str, body: &Value) -> Reply {
        self.post_as(&self.tenant, path, body).await
    }

    pub async fn post_as(&self, tenant: &Tenant, path: &str, body: &Value) -> Reply {
        self.write_as(tenant, Method::POST, path, &Uuid::now_v7().to_string(), body).await
    }

    /// A PATCH with a fresh Idempotency-Key.
    pub async fn patch(&self, path: &str, body: &Value) -> Reply {
        self.patch_as(&self.tenant, path, body).await
    }

    pub async fn patch_as(&self, tenant: &Tenant, path: &str, body: &Value) -> Reply {
        self.write_as(tenant, Method::PATCH, path, &Uuid::now_v7().to_string(), body).await
    }

    /// Seeds an in-flight claim on `key` for `operation` of the default tenant, as a concurrent
    /// request holding it would (it expires 30 s of the app's clock from now).
    pub async fn seed_claim(&self, operation: &str, key: &str, method: &str, path: &str, body: &Value) {
        let mut tx = self.app.store.write().await.expect("write transaction");
        tx.idempotency()
            .insert_claim(
                &IdempotencyScope { tenant: Some(self.tenant.id), operation: operation.into(), key: key.into() },
                &tokenops_api::write::fingerprint(method, path, None, body),
                Uuid::now_v7(),
                self.clock.now().plus_millis(30_000),
                self.clock.now(),
            )
            .await
            .expect("seed the claim");
        tx.commit().await.expect("commit the claim");
    }

    /// Runs every due job to completion, as the workers would.
    pub async fn drain_jobs(&self) -> DrainReport {
        self.app.jobs.drain().await.expect("drain jobs")
    }
}
