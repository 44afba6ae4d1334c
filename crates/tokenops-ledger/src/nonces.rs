//! Per-wallet nonces, owned by the service. Each wallet has a slot holding its next nonce; the
//! slot is locked while a transaction is built and signed, so two signatures of one wallet never
//! get the same nonce, and the nonce advances only when custody has signed (a refusal leaves no
//! gap).
//!
//! An empty slot is filled from the ledger's own count of the wallet's transactions, pending
//! ones included: at first use, after a restart, and after a send whose outcome is unknown
//! ([`Nonces::forget`]). Re-reading after an unknown outcome is safe: if the lost transaction
//! never arrived, its nonce goes to the next transaction and the lost bytes can never be
//! included (a resend answers "nonce already used"); if it did arrive, the count includes it.
//! What is never done is signing the *same operation* again with a new nonce while its first
//! transaction may still land; that is the pipeline's rule (send the same bytes again).

use alloy::primitives::Address;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::OwnedMutexGuard;

#[derive(Debug, Default)]
pub struct Nonces {
    slots: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Option<u64>>>>>,
}

/// A wallet's locked slot: `None` until read from the ledger.
pub type NonceSlot = OwnedMutexGuard<Option<u64>>;

impl Nonces {
    fn slot(&self, wallet: Address) -> Arc<tokio::sync::Mutex<Option<u64>>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner).entry(wallet).or_default().clone()
    }

    /// Locks the wallet's slot until the guard is dropped.
    pub async fn lock(&self, wallet: Address) -> NonceSlot {
        self.slot(wallet).lock_owned().await
    }

    /// Empties the wallet's slot, so that its next nonce is read from the ledger again.
    pub async fn forget(&self, wallet: Address) {
        *self.lock(wallet).await = None;
    }

    /// Takes back `nonce`, handed out for a transaction that will never be sent. When it was
    /// the last one handed out, the slot simply steps back to it; otherwise later nonces are
    /// out already and the slot is emptied, to be read from the ledger again.
    pub async fn give_back(&self, wallet: Address, nonce: u64) {
        let mut slot = self.lock(wallet).await;
        *slot = match *slot {
            Some(next) if next == nonce + 1 => Some(nonce),
            _ => None,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_slot_is_held_until_released_and_can_be_forgotten() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(1);
        {
            let mut slot = nonces.lock(wallet).await;
            assert_eq!(*slot, None);
            *slot = Some(5);
            assert!(nonces.slot(wallet).try_lock().is_err(), "held while signing");
        }
        assert_eq!(*nonces.lock(wallet).await, Some(5));
        nonces.forget(wallet).await;
        assert_eq!(*nonces.lock(wallet).await, None);
    }

    #[tokio::test]
    async fn a_nonce_given_back_is_handed_out_again_or_the_slot_is_read_anew() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(2);
        *nonces.lock(wallet).await = Some(8);
        nonces.give_back(wallet, 7).await;
        nonces.give_back(wallet, 6).await;
        assert_eq!(*nonces.lock(wallet).await, Some(6), "the last ones handed out step back");
        nonces.give_back(wallet, 3).await;
        assert_eq!(*nonces.lock(wallet).await, None, "a nonce with later ones out empties the slot");
    }
}
