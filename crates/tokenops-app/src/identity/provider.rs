//! The embedded identity provider: keeps a current ES256 signing key (created on first start,
//! replaced when older than the rotation age, the previous one published until every token it
//! signed has expired), issues access tokens, serves the JWKS document, authenticates machine
//! clients for the client-credentials grant, and bootstraps the platform operator's client.
//!
//! Keys are stored sealed under the master key and cached per node; a node reloads them from
//! the store when its copy is older than `ring_refresh_ms`, which is how a rotation on one node
//! reaches the others.

use crate::audit::platform_record;
use crate::clock::Clock;
use crate::error::{AppResult, Error};
use crate::write::{AuditAction, AuditResource};
use serde::Serialize;
use std::sync::Arc;
use tokenops_domain::audit::{AuditOutcome, AuditSource};
use tokenops_domain::{TenantId, Timestamp, new_id};
use tokenops_identity::keys::{KeyRing, SigningKey};
use tokenops_identity::tokens::{AccessClaims, IssuedToken, TokenIssuer};
use tokenops_identity::{Sealer, opaque};
use tokenops_store::{MachineClientRecord, SigningKeyRecord, Store, Tx};
use tokio::sync::RwLock;
use uuid::Uuid;

#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// The `iss` of every token, `{public_url}/idp` by default.
    pub issuer: String,
    pub access_ttl_secs: i64,
    /// Lifetime of refresh tokens handed out by sign-in.
    pub refresh_ttl_secs: i64,
    /// A current key older than this is replaced by a new one.
    pub signing_key_rotation_secs: i64,
    /// How stale a node's cached copy of the keys may get.
    pub ring_refresh_ms: i64,
}

/// A machine client's credentials, shown once. `Debug` hides the secret.
#[derive(Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorCredentials {
    pub client_id: Uuid,
    pub client_secret: String,
    pub token_url: String,
}

/// The shortest time between reloads caused by a `kid` this node does not know.
const UNKNOWN_KID_RELOAD_MS: i64 = 5_000;

impl std::fmt::Debug for OperatorCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorCredentials")
            .field("client_id", &self.client_id)
            .field("token_url", &self.token_url)
            .finish_non_exhaustive()
    }
}

struct CachedRing {
    ring: KeyRing,
    loaded_at: Option<Timestamp>,
}

pub struct IdentityProvider {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    sealer: Arc<Sealer>,
    settings: ProviderSettings,
    issuer: TokenIssuer,
    cache: RwLock<CachedRing>,
}

const SIGNING_KEY_ROTATE: AuditAction = AuditAction {
    name: "identity.signing_key.rotate",
    category: "IDENTITY",
    resource_type: "signing_key",
    per_caller: false,
};
/// A machine client as the provider sees it (IDENTITY), unlike `clients::MACHINE_CLIENT`, the
/// organisation's management of its clients.
const PROVIDER_CLIENT: AuditResource = AuditResource { category: "IDENTITY", resource_type: "machine_client" };
const CLIENT_CREDENTIALS: AuditAction = PROVIDER_CLIENT.action("auth.client_credentials");
const OPERATOR_CLIENT_CREATE: AuditAction = PROVIDER_CLIENT.action("identity.operator_client.create");

impl IdentityProvider {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, sealer: Arc<Sealer>, settings: ProviderSettings) -> Self {
        let issuer = TokenIssuer { issuer: settings.issuer.clone(), access_ttl_secs: settings.access_ttl_secs };
        Self {
            store,
            clock,
            sealer,
            settings,
            issuer,
            cache: RwLock::new(CachedRing { ring: KeyRing::default(), loaded_at: None }),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.settings.issuer
    }

    pub fn refresh_ttl_secs(&self) -> i64 {
        self.settings.refresh_ttl_secs
    }

    pub fn token_url(&self) -> String {
        format!("{}/oauth2/token", self.settings.issuer)
    }

    async fn read_ring(&self, tx: &mut dyn Tx) -> AppResult<KeyRing> {
        let records = tx.signing_keys().list().await?;
        let mut keys = Vec::with_capacity(records.len());
        for record in records {
            let key = SigningKey::from_sealed(
                &record.kid,
                &record.sealed_key,
                record.created_at,
                record.retire_at,
                &self.sealer,
            )
            .map_err(|e| {
                Error::internal(format!("signing key {} cannot be opened with this master key: {e}", record.kid))
            })?;
            keys.push(key);
        }
        Ok(KeyRing { keys })
    }

    /// Makes sure a current signing key exists and is younger than the rotation age; run at
    /// start and by maintenance.
    pub async fn ensure_current_key(&self) -> AppResult<()> {
        let now = self.clock.now();
        let mut tx = self.store.write().await?;
        let mut ring = self.read_ring(&mut *tx).await?;
        let stale = ring
            .current()
            .is_none_or(|k| k.created_at.plus_millis(self.settings.signing_key_rotation_secs * 1_000) <= now);
        if stale {
            self.rotate_in(&mut *tx, &mut ring, now).await?;
        }
        tx.commit().await?;
        self.replace_cache(ring, now).await;
        Ok(())
    }

    /// Replaces the current signing key now; the previous ones stay published for the overlap.
    pub async fn rotate(&self) -> AppResult<String> {
        let now = self.clock.now();
        let mut tx = self.store.write().await?;
        let mut ring = self.read_ring(&mut *tx).await?;
        let kid = self.rotate_in(&mut *tx, &mut ring, now).await?;
        tx.commit().await?;
        self.replace_cache(ring, now).await;
        Ok(kid)
    }

    async fn rotate_in(&self, tx: &mut dyn Tx, ring: &mut KeyRing, now: Timestamp) -> AppResult<String> {
        // Tokens signed by the outgoing key live at most one access lifetime (plus the
        // verifier's leeway): that is how long it must stay published.
        // Plus slack for nodes' cached key copies (30 s) and clock skew between them.
        let overlap =
            std::time::Duration::from_secs(u64::try_from(self.settings.access_ttl_secs + 300).unwrap_or(3_900));
        let previous: Vec<String> = ring.published(now).iter().map(|k| k.kid.clone()).collect();
        let key = ring.rotate(now, overlap).clone();
        for kid in previous {
            if let Some(retire_at) = ring.keys.iter().find(|k| k.kid == kid).and_then(|k| k.retire_at) {
                tx.signing_keys().set_retire_at(&kid, retire_at).await?;
            }
        }
        tx.signing_keys()
            .insert(&SigningKeyRecord {
                kid: key.kid.clone(),
                sealed_key: key.to_sealed(&self.sealer),
                created_at: key.created_at,
                retire_at: None,
            })
            .await?;
        tx.signing_keys().delete_retired(now).await?;
        let record =
            platform_record(AuditSource::System, &SIGNING_KEY_ROTATE, key.kid.clone(), serde_json::json!({}), now);
        tx.audit().record(&record).await?;
        Ok(key.kid)
    }

    async fn replace_cache(&self, ring: KeyRing, now: Timestamp) {
        let mut cache = self.cache.write().await;
        cache.ring = ring;
        cache.loaded_at = Some(now);
    }

    /// The key ring, reloaded from the store when this node's copy is stale.
    async fn ring(&self) -> AppResult<tokio::sync::RwLockReadGuard<'_, CachedRing>> {
        let now = self.clock.now();
        {
            let cache = self.cache.read().await;
            if cache.loaded_at.is_some_and(|at| at.plus_millis(self.settings.ring_refresh_ms) > now) {
                return Ok(cache);
            }
        }
        let mut tx = self.store.read().await?;
        let ring = self.read_ring(&mut *tx).await?;
        drop(tx);
        self.replace_cache(ring, now).await;
        Ok(self.cache.read().await)
    }

    /// The published keys as a JWKS document.
    pub async fn jwks(&self) -> AppResult<serde_json::Value> {
        let now = self.clock.now();
        Ok(self.ring().await?.ring.jwks(now))
    }

    /// An access token for `subject` in `tenant` (none for the platform operator).
    pub async fn issue(&self, subject: &str, tenant: Option<TenantId>) -> AppResult<IssuedToken> {
        let now = self.clock.now();
        let cache = self.ring().await?;
        let claims = AccessClaims { sub: subject.to_owned(), tenant_id: tenant, extra: None };
        self.issuer.issue(&cache.ring, &claims, now).map_err(|e| Error::internal(format!("issuing a token: {e}")))
    }

    /// The client-credentials grant: a token whose `sub` is the client id. `None` when the
    /// client is unknown, inactive or the secret is wrong (the caller answers `invalid_client`).
    /// `request_id` is the token request's, for its audit record.
    pub async fn client_credentials(
        &self,
        client_id: &str,
        secret: &str,
        request_id: &str,
    ) -> AppResult<Option<IssuedToken>> {
        let Ok(id) = Uuid::parse_str(client_id) else { return Ok(None) };
        let client = {
            let mut tx = self.store.read().await?;
            tx.machine_clients().get(id).await?
        };
        let tenant = client.as_ref().and_then(|c| c.tenant_id);
        let granted = client.filter(|c| c.active && opaque::opaque_matches(secret, &c.secret_hash));
        // Every grant and every refusal of a known client is an identity event in the client's
        // organisation's audit log (an unknown client id is recorded on the platform's).
        let detail = serde_json::json!({ "granted": granted.is_some() });
        let mut record =
            platform_record(AuditSource::System, &CLIENT_CREDENTIALS, id.to_string(), detail, self.clock.now());
        record.tenant_id = tenant;
        record.actor_id = Some(id.to_string());
        record.source = AuditSource::Api;
        record.request_id = Some(request_id.to_owned());
        record.http_status = Some(200);
        if granted.is_none() {
            record.outcome = AuditOutcome::Failure;
            // The endpoint's answer to a refused client (RFC 6749 §5.2 invalid_client).
            record.http_status = Some(401);
        }
        let mut tx = self.store.write().await?;
        tx.audit().record(&record).await?;
        tx.commit().await?;
        let Some(client) = granted else {
            return Ok(None);
        };
        Ok(Some(self.issue(&client.id.to_string(), client.tenant_id).await?))
    }

    /// Creates a platform operator client; its secret is returned once and stored hashed.
    pub async fn create_operator_client(&self, name: &str) -> AppResult<OperatorCredentials> {
        self.create_operator_client_then(name, |_| Ok(())).await
    }

    /// Creates an operator client and hands its credentials to `keep` before the client is
    /// committed: if keeping them fails, no client exists whose secret nobody has.
    async fn create_operator_client_then(
        &self,
        name: &str,
        keep: impl FnOnce(&OperatorCredentials) -> std::io::Result<()>,
    ) -> AppResult<OperatorCredentials> {
        let now = self.clock.now();
        let (secret, secret_hash) = opaque::new_opaque_token();
        let client = MachineClientRecord {
            id: new_id(),
            tenant_id: None,
            name: name.to_owned(),
            role_id: None,
            secret_hash,
            active: true,
            created_at: now,
        };
        let credentials =
            OperatorCredentials { client_id: client.id, client_secret: secret, token_url: self.token_url() };
        let mut tx = self.store.write().await?;
        tx.machine_clients().insert(&client).await?;
        let detail = serde_json::json!({ "name": name });
        tx.audit()
            .record(&platform_record(AuditSource::System, &OPERATOR_CLIENT_CREATE, client.id.to_string(), detail, now))
            .await?;
        keep(&credentials).map_err(Error::internal)?;
        tx.commit().await?;
        Ok(credentials)
    }

    /// On a store without any operator client (the first start), creates one whose credentials
    /// `keep` stores (the credentials file) before the client is committed.
    pub async fn bootstrap_operator(
        &self,
        keep: impl FnOnce(&OperatorCredentials) -> std::io::Result<()>,
    ) -> AppResult<Option<OperatorCredentials>> {
        let existing = {
            let mut tx = self.store.read().await?;
            tx.machine_clients().count_operator_clients().await?
        };
        if existing > 0 {
            return Ok(None);
        }
        Ok(Some(self.create_operator_client_then("platform operator", keep).await?))
    }
}

/// The verifier of the embedded provider reads the published keys in-process. A `kid` this node
/// does not know yet (another node rotated) forces one reload from the store.
#[async_trait::async_trait]
impl tokenops_identity::PublishedKeys for IdentityProvider {
    async fn published_jwks(&self, now: Timestamp, kid: &str) -> Option<serde_json::Value> {
        let known = match self.ring().await {
            Ok(cache) => cache.ring.published(now).iter().any(|k| k.kid == kid),
            Err(e) => {
                tracing::warn!(error = %e, "could not read the signing keys");
                return None;
            }
        };
        let recently_loaded =
            self.cache.read().await.loaded_at.is_some_and(|at| at.plus_millis(UNKNOWN_KID_RELOAD_MS) > now);
        if !known && !recently_loaded {
            // Reload now rather than wait for the cache to age, at most every few seconds, so
            // made-up kids cannot make every request read and unseal the keys.
            let fresh = async {
                let mut tx = self.store.read().await?;
                self.read_ring(&mut *tx).await
            }
            .await;
            if let Ok(ring) = fresh {
                self.replace_cache(ring, now).await;
            }
        }
        self.jwks().await.ok()
    }
}
