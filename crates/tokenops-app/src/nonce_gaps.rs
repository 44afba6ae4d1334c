//! `nonce_gaps.heal`: the sweep that frees a wallet whose transactions wait on the ledger behind
//! a nonce nothing will fill. A crash of the store or of the service between signing and
//! recording leaves such a gap (a nonce handed out, its signature lost or of unknown fate), and a
//! ledger takes a wallet's transactions only in nonce order, so without this sweep they would
//! wait until the next process start re-read the nonces.
//!
//! For each wallet with a recorded signature unchanged for longer than the grace, the ledger's
//! next nonce for it is compared with the store's recorded signatures:
//! - the store holds the signature of that nonce (recorded, never known to be sent): those same
//!   bytes are sent again, the only thing ever sent for an operation whose outcome is unknown;
//! - the store holds none, and this process did not hand the nonce out within the grace (so no
//!   signature of it can still be on its way to the store): the nonce is used up by a transfer
//!   of zero tokens from the wallet to itself ([`tokenops_ledger::Ledger::fill_nonce_gap`]). The
//!   operation that lost that signature has none recorded, so it is signed anew with another
//!   nonce, and the lost bytes can never be included.

use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokenops_custody::Address;
use tokenops_domain::TenantId;
use tokenops_domain::asset::AssetId;
use tokenops_domain::operation::OperationState;
use tokenops_ledger::SignedTransaction;
use tokenops_store::Job;

use crate::jobs::{Finished, JobContext, JobError, JobHandler, kinds};
use crate::settlement::{Pipeline, decode_signed, parse_address};

/// The most nonces one sweep sends or fills per wallet; the next sweep carries on.
const STEPS_PER_WALLET: usize = 256;
/// The most in-flight signed operations one sweep reads.
const CANDIDATES: u32 = 100_000;
/// How many long-unchanged in-flight operations the sweep looks at to decide whether to read
/// the signatures at all (SUBMITTED ones, which hold no nonce, may come first).
const STALE_PROBE: u32 = 1_000;

pub struct HealNonceGaps {
    pub pipeline: Arc<Pipeline>,
    /// How long a signature may take from custody to the store; also how long a recorded
    /// signature must have waited before its wallet is looked at.
    pub grace: Duration,
}

/// A wallet's recorded signatures of in-flight operations, by nonce, and one of its
/// operations' token (any will do for a filler).
#[derive(Default)]
struct Wallet {
    recorded: BTreeMap<u64, SignedTransaction>,
    waiting_long: bool,
    asset: Option<(TenantId, AssetId)>,
}

impl HealNonceGaps {
    /// Sends or fills the wallet's next nonces while a recorded signature waits behind them.
    async fn heal(&self, sender: Address, wallet: &Wallet) -> Result<(), JobError> {
        let p = &self.pipeline;
        let Some(&highest) = wallet.recorded.keys().next_back() else { return Ok(()) };
        let mut token = None;
        for _ in 0..STEPS_PER_WALLET {
            let next = p.ledger.next_nonce(sender).await.map_err(JobError::retry)?;
            if next > highest {
                return Ok(());
            }
            if let Some(transaction) = wallet.recorded.get(&next) {
                p.ledger.send(transaction).await.map_err(JobError::retry)?;
                tracing::warn!(%sender, nonce = next, hash = %transaction.hash, "sent again a recorded transaction the ledger did not hold");
                metrics::counter!("tokenops_nonce_gaps_healed_total", "how" => "resent").increment(1);
            } else {
                let token = match token {
                    Some(token) => token,
                    None => *token.insert(self.token_of(wallet).await?),
                };
                let filled = p
                    .ledger
                    .fill_nonce_gap(token, sender, next, p.custody.as_ref(), self.grace)
                    .await
                    .map_err(JobError::retry)?;
                let Some(hash) = filled else {
                    // Handed out within the grace: its signature may still be recorded.
                    return Ok(());
                };
                tracing::warn!(%sender, nonce = next, %hash, "filled a nonce gap that held the wallet's transactions back");
                metrics::counter!("tokenops_nonce_gaps_healed_total", "how" => "filled").increment(1);
            }
            if p.ledger.next_nonce(sender).await.map_err(JobError::retry)? <= next {
                return Ok(());
            }
        }
        Ok(())
    }

    async fn token_of(&self, wallet: &Wallet) -> Result<Address, JobError> {
        let (tenant, asset) = wallet.asset.as_ref().ok_or_else(|| JobError::Retry("no asset".into()))?;
        let mut tx = self.pipeline.store.read().await?;
        let contract = tx.contracts().get(*tenant, *asset).await?;
        parse_address(contract.as_ref().and_then(|c| c.address), "the contract").map_err(JobError::Retry)
    }
}

#[async_trait]
impl JobHandler for HealNonceGaps {
    fn kind(&self) -> &'static str {
        kinds::NONCE_GAPS_HEAL
    }

    async fn run(&self, _job: &Job, ctx: &JobContext) -> Result<Finished, JobError> {
        let p = &self.pipeline;
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let before = ctx.clock().now().minus_millis(grace_ms);
        let unsettled = {
            let mut tx = p.store.read().await?;
            // Nothing signed has waited past the grace (the common case, under load too): one
            // indexed look, instead of reading every in-flight signature every few seconds.
            let stale = tx.operations().in_flight_unchanged_since(before, STALE_PROBE).await?;
            let signed_waiting =
                stale.iter().any(|o| matches!(o.state, OperationState::PendingSettlement | OperationState::Settling));
            // A full probe may have stopped short of them: then look anyway.
            if !signed_waiting && stale.len() < STALE_PROBE as usize {
                return ctx.finish(p.store.write().await?).await;
            }
            tx.operations().unsettled_signed(CANDIDATES).await?
        };
        let mut wallets: BTreeMap<Address, Wallet> = BTreeMap::new();
        for operation in &unsettled {
            let Some(Ok(transaction)) = operation.signed_transaction.as_deref().map(decode_signed) else { continue };
            let wallet = wallets.entry(transaction.sender).or_default();
            wallet.waiting_long |= operation.updated_at < before;
            wallet.asset.get_or_insert((operation.tenant_id, operation.asset_id));
            wallet.recorded.insert(transaction.nonce, transaction);
        }
        // A wallet whose signatures all moved lately is flowing: nothing to ask the ledger.
        for (sender, wallet) in wallets.iter().filter(|(_, w)| w.waiting_long) {
            if let Err(e) = self.heal(*sender, wallet).await {
                tracing::warn!(%sender, error = %e, "could not heal the wallet's nonces this time");
            }
        }
        ctx.finish(p.store.write().await?).await
    }
}
