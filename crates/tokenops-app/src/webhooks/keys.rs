//! The platform's JWS_ES256 delivery signing keys: generated on first need, sealed in the store
//! (associated data: purpose and kid), shared by every node, published as a JWKS
//! (`/.well-known/webhook-jwks.json`, supplement §7), and, only where the operator sets an age,
//! rotated by it (beyond the spec, which has no rotation for this scheme): `webhooks.rotate_key`
//! replaces the signing key once it is `TOKENOPS_WEBHOOK_JWS_KEY_ROTATION_DAYS` old; the replaced key signs no more and stays
//! published for [`JWS_KEY_OVERLAP_MS`], then is withdrawn.
//!
//! The oldest key not retiring signs (two nodes that raced at the first need both stored one,
//! and agree on it); a rotation retires every other key, so the new one is the only candidate.

use async_trait::async_trait;
use std::sync::Arc;
use tokenops_domain::Timestamp;
use tokenops_domain::audit::AuditSource;
use tokenops_identity::Sealer;
use tokenops_store::{Job, Store, StoreError, Tx, WebhookSigningKeyRecord};
use tokenops_webhooks::signing::JwsKey;

use crate::audit::platform_record;
use crate::clock::Clock;
use crate::error::{AppResult, Error};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::write::AuditAction;

/// How long a replaced key stays in the JWKS. It must outlive every signature it made: a
/// delivery's JWS expires 60 s after it was made, other nodes may sign with the old key until
/// their copy of the keys is reloaded ([`CACHE_MS`]), and receivers' clocks drift (their
/// `Webhook-Timestamp` tolerance is 300 s). Ten minutes covers all of it with room to spare.
pub const JWS_KEY_OVERLAP_MS: i64 = 10 * 60_000;

/// How stale a node's copy of the keys may get: how long a rotation on one node takes to reach
/// the others.
const CACHE_MS: i64 = 30_000;

// A JWS lives 60 s, a node's copy of the keys may be CACHE_MS old, and receivers' clocks may be
// off by the 300 s timestamp tolerance: the overlap outlives all of them.
const _: () = assert!(JWS_KEY_OVERLAP_MS >= CACHE_MS + 60_000 + 300_000);

const DAY_MS: i64 = 24 * 3_600_000;

fn seal_aad(kid: &str) -> Vec<u8> {
    format!("tokenops/webhook-signing-key/{kid}").into_bytes()
}

/// A stored key, opened.
#[derive(Clone)]
struct OpenKey {
    key: Arc<JwsKey>,
    created_at: Timestamp,
    retire_at: Option<Timestamp>,
}

impl OpenKey {
    fn published(&self, now: Timestamp) -> bool {
        self.retire_at.is_none_or(|at| at > now)
    }
}

struct Cached {
    /// Oldest first, as the store lists them.
    keys: Vec<OpenKey>,
    loaded_at: Timestamp,
}

pub struct DeliveryKeys {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    clock: Arc<dyn Clock>,
    cache: tokio::sync::Mutex<Option<Cached>>,
}

impl DeliveryKeys {
    pub fn new(store: Arc<dyn Store>, sealer: Arc<Sealer>, clock: Arc<dyn Clock>) -> Self {
        Self { store, sealer, clock, cache: tokio::sync::Mutex::new(None) }
    }

    /// The key that signs: the oldest one not retiring.
    pub async fn signing_key(&self) -> AppResult<Arc<JwsKey>> {
        let keys = self.keys().await?;
        current(&keys)
            .map(|k| k.key.clone())
            .ok_or_else(|| Error::internal("no webhook signing key after creating one"))
    }

    /// `{"keys": [...]}`: every key not yet withdrawn, newest first.
    pub async fn jwks(&self) -> AppResult<serde_json::Value> {
        let now = self.clock.now();
        let keys = self.keys().await?;
        let published: Vec<serde_json::Value> =
            keys.iter().rev().filter(|k| k.published(now)).map(|k| k.key.public_jwk()).collect();
        Ok(serde_json::json!({ "keys": published }))
    }

    async fn keys(&self) -> AppResult<Vec<OpenKey>> {
        let now = self.clock.now();
        let mut cache = self.cache.lock().await;
        if let Some(cached) = cache.as_ref()
            && cached.loaded_at.plus_millis(CACHE_MS) > now
            && current(&cached.keys).is_some()
        {
            return Ok(cached.keys.clone());
        }
        let mut stored = self.read().await?;
        if !stored.iter().any(|r| r.retire_at.is_none()) {
            self.create(now).await?;
            stored = self.read().await?;
        }
        let keys = stored.iter().map(|record| self.open(record)).collect::<AppResult<Vec<_>>>()?;
        *cache = Some(Cached { keys: keys.clone(), loaded_at: now });
        Ok(keys)
    }

    fn open(&self, record: &WebhookSigningKeyRecord) -> AppResult<OpenKey> {
        let der = self
            .sealer
            .open(&record.sealed_key, &seal_aad(&record.kid))
            .map_err(|e| Error::internal(format!("webhook signing key {}: {e}", record.kid)))?;
        let key = JwsKey::from_pkcs8_der(&der)
            .map_err(|e| Error::internal(format!("webhook signing key {}: {e}", record.kid)))?;
        Ok(OpenKey { key: Arc::new(key), created_at: record.created_at, retire_at: record.retire_at })
    }

    async fn read(&self) -> AppResult<Vec<WebhookSigningKeyRecord>> {
        let mut tx = self.store.read().await?;
        Ok(tx.webhooks().signing_keys().await?)
    }

    fn new_record(&self, now: Timestamp) -> WebhookSigningKeyRecord {
        let key = JwsKey::generate();
        let der = zeroize::Zeroizing::new(key.to_pkcs8_der());
        WebhookSigningKeyRecord {
            kid: key.kid().to_owned(),
            sealed_key: self.sealer.seal(&der, &seal_aad(key.kid())),
            created_at: now,
            retire_at: None,
        }
    }

    async fn create(&self, now: Timestamp) -> AppResult<()> {
        let record = self.new_record(now);
        let mut tx = self.store.write().await?;
        match tx.webhooks().insert_signing_key(&record).await {
            Ok(()) => tx.commit().await?,
            // A kid is the key's thumbprint: a conflict is the same key, never another's.
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }

    /// In `tx`: replaces the signing key when it is `rotation_days` old (0: never), and deletes
    /// the keys whose overlap has ended. Returns the new key's kid when it rotated. Nothing
    /// happens before the first key exists (it is made on first need).
    async fn rotate_in(&self, tx: &mut dyn Tx, rotation_days: u32, now: Timestamp) -> AppResult<Option<String>> {
        let stored = tx.webhooks().signing_keys().await?;
        let due = rotation_days > 0
            && stored
                .iter()
                .filter(|r| r.retire_at.is_none())
                .min_by_key(|r| (r.created_at, r.kid.clone()))
                .is_some_and(|r| r.created_at.plus_millis(i64::from(rotation_days) * DAY_MS) <= now);
        let mut rotated = None;
        if due {
            let retire_at = now.plus_millis(JWS_KEY_OVERLAP_MS);
            let mut retired = Vec::new();
            for record in stored.iter().filter(|r| r.retire_at.is_none()) {
                if !tx.webhooks().retire_signing_key(&record.kid, retire_at).await? {
                    return Err(Error::internal("another node rotated the webhook signing key meanwhile"));
                }
                retired.push(record.kid.clone());
            }
            let record = self.new_record(now);
            tx.webhooks().insert_signing_key(&record).await?;
            let detail = serde_json::json!({ "retired": retired, "retireAt": retire_at.to_iso8601() });
            let audit = platform_record(AuditSource::Worker, &SIGNING_KEY_ROTATE, record.kid.clone(), detail, now);
            tx.audit().record(&audit).await?;
            rotated = Some(record.kid);
        }
        tx.webhooks().delete_retired_signing_keys(now).await?;
        Ok(rotated)
    }

    /// Makes the next use read the keys from the store again.
    async fn forget(&self) {
        *self.cache.lock().await = None;
    }
}

/// The oldest key not retiring.
fn current(keys: &[OpenKey]) -> Option<&OpenKey> {
    keys.iter().filter(|k| k.retire_at.is_none()).min_by_key(|k| (k.created_at, k.key.kid().to_owned()))
}

const SIGNING_KEY_ROTATE: AuditAction = AuditAction {
    name: "webhook.signing_key.rotate",
    category: "WEBHOOKS",
    resource_type: "webhook_signing_key",
    per_caller: false,
};

/// `webhooks.rotate_key` (periodic): the age check, the rotation and the withdrawal of keys
/// past their overlap, with the job's completion in one commit.
pub struct RotateDeliveryKey {
    pub keys: Arc<DeliveryKeys>,
    pub store: Arc<dyn Store>,
    pub rotation_days: u32,
}

#[async_trait]
impl JobHandler for RotateDeliveryKey {
    fn kind(&self) -> &'static str {
        kinds::WEBHOOKS_ROTATE_KEY
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let now = ctx.clock().now();
        let mut tx = self.store.write().await?;
        let rotated = self.keys.rotate_in(tx.as_mut(), self.rotation_days, now).await.map_err(JobError::retry)?;
        let finished = ctx.finish(tx).await?;
        if let Some(kid) = rotated {
            tracing::info!(kid, "rotated the webhook JWS signing key");
        }
        // This node signs with the new key at once; the others within `CACHE_MS`.
        self.keys.forget().await;
        Ok(finished)
    }
}
