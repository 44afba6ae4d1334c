//! Which worker node signs for a wallet, when several share one EVM ledger and one store: a node
//! hands out a wallet's nonces only while it holds the wallet's signing lease in the store
//! ([`LedgerStore::take_signing_leases`]), so two nodes never give one nonce to two transactions.
//!
//! - **Held**: a lease runs [`LEASE`] from the store's clock. A node counts it from before it
//!   asked, by its own monotonic clock, so it always believes it expired before the store does.
//!   It signs only with at least [`RENEW_BELOW`] of it left (more than a batch takes from its
//!   first signature to its last send); below that, the next signature renews it first, with
//!   every other lease this node used lately that is due, in one statement. A node signing
//!   steadily therefore pays one store round trip every couple of seconds, not one per signature,
//!   and a lease nobody used for [`LEASE`] lapses by itself.
//! - **Elsewhere**: a wallet another node holds is not asked about again for
//!   [`RECHECK_ELSEWHERE`], so operations that wait for it cost no round trip each. A killed
//!   node's leases expire within [`LEASE`]; the survivor takes them at its next look.
//! - **Handover**: the lease's epoch changes whenever it changes hands. A node that takes a
//!   wallet under a new epoch drops what its nonce slot knew and reads it from the ledger again
//!   (`Slot::lease`): the other node's nonces are on the ledger, or never will be.

use alloy::primitives::Address;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokenops_store::Store;

use crate::port::LedgerError;

/// How long a lease runs from the store's clock at its taking or renewal. A SIGKILLed node's
/// wallets wait this long at most for another node.
pub(crate) const LEASE: Duration = Duration::from_secs(5);
/// A signature starts only with this much of the lease left, else the lease is renewed first.
pub(crate) const RENEW_BELOW: Duration = Duration::from_secs(3);
/// How long a wallet another node holds is taken to stay there before asking the store again.
pub(crate) const RECHECK_ELSEWHERE: Duration = Duration::from_millis(500);

/// This node's view of the wallets' signing leases.
pub(crate) struct SigningLeases {
    store: Arc<dyn Store>,
    /// This process's ledger, as the leases name it: fresh at each start, so a restarted node
    /// never mistakes its dead predecessor's leases (and nonces) for its own.
    node: String,
    known: Mutex<HashMap<Address, Known>>,
}

#[derive(Debug, Clone, Copy)]
enum Known {
    /// Held under `epoch` until `until`; last signed for at `used`.
    Held { epoch: u64, until: Instant, used: Instant },
    /// Another node held it when last asked; not asked again before `until`.
    Elsewhere { until: Instant },
}

impl SigningLeases {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self { store, node: uuid::Uuid::now_v7().to_string(), known: Mutex::new(HashMap::new()) }
    }

    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<Address, Known>> {
        self.known.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether another node held `wallet` when last asked, recently enough not to ask again:
    /// what a signature checks before paying the node's gas and fee estimates.
    pub(crate) fn known_elsewhere(&self, wallet: Address) -> bool {
        matches!(self.known().get(&wallet), Some(Known::Elsewhere { until }) if *until > Instant::now())
    }

    /// The epoch of this node's lease of `wallet`, with at least [`RENEW_BELOW`] of it left
    /// (taken or renewed first if need be); `None` while another node holds it. Called under the
    /// wallet's slot lock, so one signature at a time decides for a wallet.
    pub(crate) async fn hold(&self, wallet: Address) -> Result<Option<u64>, LedgerError> {
        let now = Instant::now();
        let due: Vec<Address> = {
            let mut known = self.known();
            match known.get_mut(&wallet) {
                Some(Known::Held { epoch, until, used }) if *until >= now + RENEW_BELOW => {
                    *used = now;
                    return Ok(Some(*epoch));
                }
                Some(Known::Elsewhere { until }) if *until > now => return Ok(None),
                _ => {}
            }
            // Renewed together: this node's other leases in use that would soon need it.
            let mut due: Vec<Address> = known
                .iter()
                .filter(|(other, lease)| {
                    **other != wallet
                        && matches!(lease, Known::Held { until, used, .. }
                            if *until < now + RENEW_BELOW && now.duration_since(*used) < LEASE)
                })
                .map(|(other, _)| *other)
                .collect();
            due.push(wallet);
            due
        };
        let asked = Instant::now();
        let held = self.take(&due).await?;
        let mut known = self.known();
        let mut answer = None;
        for address in due {
            let lease = match held.get(&address) {
                Some(&epoch) => {
                    let used = match known.get(&address) {
                        Some(Known::Held { used, .. }) if address != wallet => *used,
                        _ => now,
                    };
                    let changed =
                        !matches!(known.get(&address), Some(Known::Held { epoch: before, .. }) if *before == epoch);
                    if changed {
                        tracing::info!(wallet = %address, epoch, "took the wallet's signing lease");
                    }
                    Known::Held { epoch, until: asked + LEASE, used }
                }
                None => Known::Elsewhere { until: Instant::now() + RECHECK_ELSEWHERE },
            };
            if address == wallet {
                answer = match lease {
                    Known::Held { epoch, .. } => Some(epoch),
                    Known::Elsewhere { .. } => None,
                };
            }
            known.insert(address, lease);
        }
        Ok(answer)
    }

    /// One statement in one commit: the wallets of `wallets` this node holds now, by epoch.
    async fn take(&self, wallets: &[Address]) -> Result<HashMap<Address, u64>, LedgerError> {
        let unavailable = |e: tokenops_store::StoreError| LedgerError::temporary(format!("signing leases: {e}"));
        let texts: Vec<String> = wallets.iter().map(|w| format!("{w:#x}")).collect();
        let mut tx = self.store.write().await.map_err(unavailable)?;
        let lease_ms = u64::try_from(LEASE.as_millis()).unwrap_or(u64::MAX);
        let held = tx.ledger().take_signing_leases(&self.node, &texts, lease_ms).await.map_err(unavailable)?;
        tx.commit().await.map_err(unavailable)?;
        Ok(held.into_iter().filter_map(|(wallet, epoch)| Some((wallet.parse::<Address>().ok()?, epoch))).collect())
    }
}
