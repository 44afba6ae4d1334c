//! The platform's JWS_ES256 delivery signing key: generated on first need, sealed in the store
//! (associated data: purpose and kid), shared by every node, and published as a JWKS
//! (`/.well-known/webhook-jwks.json`, supplement §7). The oldest stored key signs; all are
//! published (two nodes that raced at the first need both stored one).

use std::sync::Arc;
use tokenops_identity::Sealer;
use tokenops_store::{Store, StoreError, WebhookSigningKeyRecord};
use tokenops_webhooks::signing::JwsKey;

use crate::clock::Clock;
use crate::error::{AppResult, Error};

fn seal_aad(kid: &str) -> Vec<u8> {
    format!("tokenops/webhook-signing-key/{kid}").into_bytes()
}

pub struct DeliveryKeys {
    store: Arc<dyn Store>,
    sealer: Arc<Sealer>,
    clock: Arc<dyn Clock>,
    /// The stored keys, opened, oldest first; read once per process.
    cache: tokio::sync::Mutex<Option<Vec<Arc<JwsKey>>>>,
}

impl DeliveryKeys {
    pub fn new(store: Arc<dyn Store>, sealer: Arc<Sealer>, clock: Arc<dyn Clock>) -> Self {
        Self { store, sealer, clock, cache: tokio::sync::Mutex::new(None) }
    }

    /// The key that signs.
    pub async fn signing_key(&self) -> AppResult<Arc<JwsKey>> {
        let keys = self.keys().await?;
        keys.first().cloned().ok_or_else(|| Error::internal("no webhook signing key after creating one"))
    }

    /// `{"keys": [...]}` with every stored key's public JWK.
    pub async fn jwks(&self) -> AppResult<serde_json::Value> {
        let keys = self.keys().await?;
        Ok(serde_json::json!({ "keys": keys.iter().map(|k| k.public_jwk()).collect::<Vec<_>>() }))
    }

    async fn keys(&self) -> AppResult<Vec<Arc<JwsKey>>> {
        let mut cache = self.cache.lock().await;
        if let Some(keys) = cache.as_ref() {
            return Ok(keys.clone());
        }
        let mut stored = self.read().await?;
        if stored.is_empty() {
            self.create().await?;
            stored = self.read().await?;
        }
        let keys = stored
            .iter()
            .map(|record| {
                let der = self
                    .sealer
                    .open(&record.sealed_key, &seal_aad(&record.kid))
                    .map_err(|e| Error::internal(format!("webhook signing key {}: {e}", record.kid)))?;
                JwsKey::from_pkcs8_der(&der)
                    .map(Arc::new)
                    .map_err(|e| Error::internal(format!("webhook signing key {}: {e}", record.kid)))
            })
            .collect::<AppResult<Vec<_>>>()?;
        *cache = Some(keys.clone());
        Ok(keys)
    }

    async fn read(&self) -> AppResult<Vec<WebhookSigningKeyRecord>> {
        let mut tx = self.store.read().await?;
        Ok(tx.webhooks().signing_keys().await?)
    }

    async fn create(&self) -> AppResult<()> {
        let key = JwsKey::generate();
        let record = WebhookSigningKeyRecord {
            kid: key.kid().to_owned(),
            sealed_key: self.sealer.seal(&key.to_pkcs8_der(), &seal_aad(key.kid())),
            created_at: self.clock.now(),
        };
        let mut tx = self.store.write().await?;
        match tx.webhooks().insert_signing_key(&record).await {
            Ok(()) => tx.commit().await?,
            // A kid is the key's thumbprint: a conflict is the same key, never another's.
            Err(StoreError::Conflict(_)) => {}
            Err(e) => return Err(e.into()),
        }
        Ok(())
    }
}
