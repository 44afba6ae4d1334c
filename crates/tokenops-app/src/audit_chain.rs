//! The audit log's sealed chain: the sealer (job `audit.seal`) that takes each chain's unsealed
//! records into hashed blocks and signs the chain's head with the platform's published JWS key,
//! the signed head as the API shows it, and verification of a stored chain. The byte forms are
//! `tokenops_domain::audit_chain`'s; `docs/audit.md` explains the design.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokenops_domain::TenantId;
use tokenops_domain::audit::AuditSeal;
use tokenops_domain::audit_chain::{
    self, AuditBlock, ChainHead, ChainVerifier, GENESIS, Mismatch, Verified, block_hash, from_hex, record_hash, to_hex,
};
use tokenops_store::{Job, Store};
use tokenops_webhooks::signing::{JwsKey, sign_compact};

use crate::clock::Clock;
use crate::error::{AppResult, Error};
use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::webhooks::DeliveryKeys;

/// The most records one block takes: one short write transaction each.
pub const BLOCK_MAX: u32 = 1_000;
/// The most blocks one run of the sealer writes; the next run goes on.
const BLOCKS_PER_RUN: usize = 1_000;
/// The JWS header `typ` of a signed head, so that no delivery's JWS passes for one.
pub const HEAD_TYP: &str = "tokenops-audit-head+jws";
/// How many sealed records a verification reads at a time.
const VERIFY_BATCH: u32 = 2_000;

/// The payload of a signed head: the head and who signed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadClaims {
    pub iss: String,
    #[serde(flatten)]
    pub head: ChainHead,
}

/// A chain's head with its compact JWS.
#[derive(Debug, Clone)]
pub struct SignedHead {
    pub head: ChainHead,
    pub signature: String,
}

/// Signs `head` as the platform (`issuer`), with the webhook JWS key.
pub fn sign_head(key: &JwsKey, issuer: &str, head: &ChainHead) -> String {
    let claims = HeadClaims { iss: issuer.to_owned(), head: head.clone() };
    // A struct of strings and integers always serialises.
    let payload = serde_json::to_vec(&claims).unwrap_or_default();
    sign_compact(key, HEAD_TYP, &payload)
}

/// The head a signed head's JWS states, once its signature checks against `jwks`.
pub fn open_head(signature: &str, jwks: &serde_json::Value) -> Result<HeadClaims, String> {
    let payload = tokenops_webhooks::verify::verify_compact(signature, jwks, HEAD_TYP)
        .map_err(|e| format!("the head's signature does not verify: {e}"))?;
    serde_json::from_slice(&payload).map_err(|e| format!("the head's payload is not a chain head: {e}"))
}

/// The head a block states for its chain.
fn head_of(block: &AuditBlock) -> ChainHead {
    ChainHead {
        chain_id: block.chain_id,
        block_number: block.number,
        hash: block.hash.clone(),
        record_count: block.chain_records(),
        sealed_at: block.sealed_at.to_iso8601(),
    }
}

/// What one run of the sealer did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SealReport {
    pub blocks: usize,
    pub records: usize,
}

pub struct AuditChain {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    keys: Arc<DeliveryKeys>,
    issuer: String,
    /// The key every chain's latest head is known to be signed with (none at start).
    heads_signed_by: std::sync::Mutex<Option<String>>,
}

impl AuditChain {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>, keys: Arc<DeliveryKeys>, issuer: String) -> Self {
        Self { store, clock, keys, issuer, heads_signed_by: std::sync::Mutex::new(None) }
    }

    /// Seals every chain's unsealed records, a block of at most [`BLOCK_MAX`] per transaction,
    /// until none is left or the run has written [`BLOCKS_PER_RUN`] blocks.
    pub async fn seal_all(&self) -> AppResult<SealReport> {
        let mut report = SealReport::default();
        // The key is read (and made, on first need) before any write transaction: SQLite has
        // one writer, and making the key writes.
        let key = self.keys.signing_key().await?;
        self.sign_heads_with(&key).await?;
        loop {
            let chains = {
                let mut tx = self.store.read().await?;
                tx.audit().unsealed_chains(100).await?
            };
            if chains.is_empty() {
                return Ok(report);
            }
            for chain in chains {
                loop {
                    if report.blocks >= BLOCKS_PER_RUN {
                        return Ok(report);
                    }
                    let sealed = self.seal_block(&key, chain).await?;
                    if sealed == 0 {
                        break;
                    }
                    report.blocks += 1;
                    report.records += sealed;
                }
            }
        }
    }

    /// Signs anew, with `key`, every chain's latest head signed with another key: after a
    /// rotation the replaced key leaves the JWKS within minutes, and a head it signed could no
    /// longer be checked. Done once per key and process (the first run checks every chain).
    async fn sign_heads_with(&self, key: &JwsKey) -> AppResult<()> {
        let current = Some(key.kid().to_owned());
        if *self.heads_signed_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner) == current {
            return Ok(());
        }
        let mut after = None;
        loop {
            let blocks = {
                let mut tx = self.store.read().await?;
                tx.audit().last_blocks(after, 500).await?
            };
            let Some(last) = blocks.last() else { break };
            after = Some(last.chain_id);
            let stale: Vec<&AuditBlock> = blocks
                .iter()
                .filter(|b| tokenops_webhooks::verify::compact_kid(&b.head_signature).as_deref() != Some(key.kid()))
                .collect();
            if !stale.is_empty() {
                let mut tx = self.store.write().await?;
                for block in stale {
                    let signature = sign_head(key, &self.issuer, &head_of(block));
                    tx.audit().resign_head(block.chain_id, block.number, &signature).await?;
                }
                tx.commit().await?;
            }
        }
        *self.heads_signed_by.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = current;
        Ok(())
    }

    /// Seals the next block of `chain`: the unsealed records this transaction sees, after the
    /// chain's last block. A concurrent sealer's block or seal makes this one a conflict, rolled
    /// back whole.
    async fn seal_block(&self, key: &JwsKey, chain: Option<TenantId>) -> AppResult<usize> {
        let mut tx = self.store.write().await?;
        let last = tx.audit().last_block(chain).await?;
        let records = tx.audit().unsealed(chain, BLOCK_MAX).await?;
        if records.is_empty() {
            return Ok(0);
        }
        let (number, first_seq, previous) = match &last {
            None => (1, 1, GENESIS),
            Some(block) => (
                block.number + 1,
                block.chain_records() + 1,
                from_hex(&block.hash).ok_or_else(|| Error::internal(format!("audit block {} hash", block.number)))?,
            ),
        };
        let hashes: Vec<[u8; 32]> = records.iter().map(record_hash).collect();
        let seals: Vec<_> = records
            .iter()
            .zip(&hashes)
            .enumerate()
            .map(|(i, (r, hash))| {
                let chain_seq = first_seq + i64::try_from(i).unwrap_or(i64::MAX);
                (r.id, AuditSeal { chain_seq, block_number: number, record_hash: to_hex(hash) })
            })
            .collect();
        let chain_id = audit_chain::chain_id(chain);
        let hash = to_hex(&block_hash(chain_id, number, &previous, &hashes));
        let sealed_at = self.clock.now();
        let record_count = i64::try_from(records.len()).unwrap_or(i64::MAX);
        let head = ChainHead {
            chain_id,
            block_number: number,
            hash: hash.clone(),
            record_count: first_seq + record_count - 1,
            sealed_at: sealed_at.to_iso8601(),
        };
        let block = AuditBlock {
            chain_id,
            number,
            previous_hash: to_hex(&previous),
            hash,
            first_seq,
            record_count,
            sealed_at,
            head_signature: sign_head(key, &self.issuer, &head),
        };
        tx.audit().seal_block(chain, &block, &seals).await?;
        tx.commit().await?;
        Ok(records.len())
    }

    /// Who signs the heads: the service's public URL.
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The chain's signed head, if anything is sealed yet.
    pub async fn head(&self, chain: Option<TenantId>) -> AppResult<Option<SignedHead>> {
        let mut tx = self.store.read().await?;
        Ok(tx
            .audit()
            .last_block(chain)
            .await?
            .map(|block| SignedHead { head: head_of(&block), signature: block.head_signature }))
    }

    /// The published key set the heads are signed with (`/.well-known/webhook-jwks.json`).
    pub async fn jwks(&self) -> AppResult<serde_json::Value> {
        self.keys.jwks().await
    }

    /// Checks the stored chain against `head` (a head signed earlier and kept by the caller),
    /// or else against the stored head, whose signature is checked with this platform's keys.
    /// `Ok(Err(_))` names the first record or block that does not match.
    pub async fn verify(
        &self,
        chain: Option<TenantId>,
        head: Option<ChainHead>,
    ) -> AppResult<Result<VerifyOutcome, Mismatch>> {
        let head = match head {
            Some(head) => head,
            None => {
                let Some(stored) = self.head(chain).await? else {
                    return Err(Error::not_found("nothing of this chain is sealed yet"));
                };
                let claims = match open_head(&stored.signature, &self.jwks().await?) {
                    Ok(claims) => claims,
                    Err(reason) => return Ok(Err(Mismatch::Head { reason })),
                };
                if claims.head != stored.head {
                    return Ok(Err(Mismatch::Head {
                        reason: "the stored head differs from the head its signature states".into(),
                    }));
                }
                claims.head
            }
        };
        if head.chain_id != audit_chain::chain_id(chain) {
            return Ok(Err(Mismatch::Head { reason: "the head is another chain's".into() }));
        }
        let blocks = {
            let mut tx = self.store.read().await?;
            tx.audit().block_hashes(chain).await?
        };
        let mut verifier = ChainVerifier::new(head).with_stored_blocks(blocks);
        let mut after = 0;
        loop {
            let batch = {
                let mut tx = self.store.read().await?;
                tx.audit().sealed_after(chain, after, VERIFY_BATCH).await?
            };
            for record in &batch {
                if let Err(mismatch) = verifier.push(record) {
                    return Ok(Err(mismatch));
                }
            }
            match batch.last().and_then(|r| r.seal.as_ref()) {
                Some(seal) if batch.len() == VERIFY_BATCH as usize => after = seal.chain_seq,
                _ => break,
            }
        }
        let unsealed = {
            let mut tx = self.store.read().await?;
            tx.audit().unsealed_count(chain).await?
        };
        Ok(verifier.finish().map(|verified| VerifyOutcome { verified, unsealed }))
    }
}

/// A chain that verifies: what was checked, and how many records wait for the sealer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyOutcome {
    pub verified: Verified,
    pub unsealed: u64,
}

/// `audit.seal`: the periodic sealer. Its effects (blocks) commit as it goes, each block a
/// transaction of its own; a run cut short leaves whole blocks behind and the next run goes on
/// from the last one, so nothing is sealed twice or skipped.
pub struct SealAuditChain(pub Arc<AuditChain>);

#[async_trait]
impl JobHandler for SealAuditChain {
    fn kind(&self) -> &'static str {
        kinds::AUDIT_SEAL
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let report = self.0.seal_all().await.map_err(JobError::retry)?;
        if report.blocks > 0 {
            tracing::info!(blocks = report.blocks, records = report.records, "sealed audit records");
        }
        let tx = self.0.store.write().await?;
        ctx.finish(tx).await
    }
}
