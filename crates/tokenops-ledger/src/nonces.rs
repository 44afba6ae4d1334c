//! Per-wallet nonces, owned by the service. Each wallet has a slot holding its next nonce; the
//! slot is locked while a transaction is built and signed, so two signatures of one wallet never
//! get the same nonce, and the nonce advances only when custody has signed (a refusal leaves no
//! gap).
//!
//! An empty slot is filled from the ledger's own count of the wallet's transactions, pending
//! ones included: at first use, after a restart, and after a send whose outcome is unknown
//! ([`Nonces::forget`]). That count stops at the first gap, and a crash can leave one (a nonce
//! signed but never recorded, later ones recorded and sent again after the restart, waiting
//! behind it): the slot is filled with the nonces such waiting transactions hold too
//! ([`Slot::fill`]), hands out the gap first and then skips them, since a second transaction
//! with a waiting one's nonce would be refused or would replace it. Re-reading after an unknown outcome is safe: if the lost transaction
//! never arrived, its nonce goes to the next transaction and the lost bytes can never be
//! included (a resend answers "nonce already used"); if it did arrive, the count includes it.
//! What is never done is signing the *same operation* again with a new nonce while its first
//! transaction may still land; that is the pipeline's rule (send the same bytes again).
//!
//! A signature that will never be sent (it was not recorded) gives its nonce back
//! ([`Nonces::give_back`]), and the wallet's next signature takes it; otherwise the gap would
//! hold every later transaction of the wallet back for good. Giving back never empties the
//! slot: later nonces may be out, their transactions recorded, and none may go out twice.

use alloy::primitives::Address;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use tokio::sync::OwnedMutexGuard;

#[derive(Debug, Default)]
pub struct Nonces {
    slots: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// A wallet's nonces: the next one never handed out (`None` until read from the ledger), those
/// handed out but given back, which go out again first, and those above `next` held by
/// transactions waiting in the ledger's pool, which never go out.
#[derive(Debug, Default)]
pub struct Slot {
    next: Option<u64>,
    returned: BTreeSet<u64>,
    held: BTreeSet<u64>,
}

impl Slot {
    /// The nonce the next signature takes, if known: a given-back one first.
    pub fn next(&self) -> Option<u64> {
        self.returned.first().copied().or(self.next)
    }

    /// Fills an empty slot from the ledger: `pending` is its count of the wallet's transactions,
    /// `waiting` the nonces of the wallet's transactions in its pool (those below `pending`
    /// change nothing). Returns the nonce the next signature takes.
    pub fn fill(&mut self, pending: u64, waiting: impl IntoIterator<Item = u64>) -> u64 {
        self.held = waiting.into_iter().filter(|&nonce| nonce >= pending).collect();
        let next = self.skip_held(pending);
        self.next = Some(next);
        next
    }

    /// Marks `nonce` (from `next`, or read from the ledger) as handed out.
    pub fn take(&mut self, nonce: u64) {
        if !self.returned.remove(&nonce) {
            self.next = Some(self.skip_held(nonce + 1));
        }
    }

    /// The first nonce from `nonce` on that no waiting transaction holds. Held nonces passed
    /// are dropped: `next` never goes back below them (only given-back nonces go out again).
    fn skip_held(&mut self, mut nonce: u64) -> u64 {
        self.held = self.held.split_off(&nonce);
        while self.held.remove(&nonce) {
            nonce += 1;
        }
        nonce
    }
}

/// A wallet's locked slot.
pub type NonceSlot = OwnedMutexGuard<Slot>;

impl Nonces {
    fn slot(&self, wallet: Address) -> Arc<tokio::sync::Mutex<Slot>> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner).entry(wallet).or_default().clone()
    }

    /// Locks the wallet's slot until the guard is dropped.
    pub async fn lock(&self, wallet: Address) -> NonceSlot {
        self.slot(wallet).lock_owned().await
    }

    /// Empties the wallet's slot, so that its next nonce is read from the ledger again.
    pub async fn forget(&self, wallet: Address) {
        *self.lock(wallet).await = Slot::default();
    }

    /// Takes back `nonce`, handed out for a transaction that will never be sent, to hand it
    /// out again before any new one. Later nonces may be out already, their transactions
    /// recorded: the slot is never emptied here, so none of them is handed out twice.
    pub async fn give_back(&self, wallet: Address, nonce: u64) {
        let mut slot = self.lock(wallet).await;
        match slot.next {
            Some(next) if next == nonce + 1 => {
                // The last one out: step back, over any given back just below it.
                let mut next = nonce;
                while next > 0 && slot.returned.remove(&(next - 1)) {
                    next -= 1;
                }
                slot.next = Some(next);
            }
            Some(next) if nonce < next => {
                slot.returned.insert(nonce);
            }
            // Not handed out by this slot (it was read anew since): nothing to take back.
            _ => {}
        }
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
            assert_eq!(slot.next(), None);
            slot.take(4);
            assert_eq!(slot.next(), Some(5));
            assert!(nonces.slot(wallet).try_lock().is_err(), "held while signing");
        }
        assert_eq!(nonces.lock(wallet).await.next(), Some(5));
        nonces.forget(wallet).await;
        assert_eq!(nonces.lock(wallet).await.next(), None);
    }

    #[tokio::test]
    async fn nonces_given_back_go_out_again_first_and_none_twice() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(2);
        for nonce in 5..=9 {
            nonces.lock(wallet).await.take(nonce);
        }
        // 9 was the last out: the slot steps back. 6 has later ones out: it waits to go again.
        nonces.give_back(wallet, 9).await;
        nonces.give_back(wallet, 6).await;
        let mut slot = nonces.lock(wallet).await;
        assert_eq!(slot.next(), Some(6), "a given-back nonce first");
        slot.take(6);
        assert_eq!(slot.next(), Some(9), "then the next never used");
        drop(slot);
        // Giving back a run from the top steps back over all of it.
        nonces.give_back(wallet, 7).await;
        nonces.give_back(wallet, 8).await;
        assert_eq!(nonces.lock(wallet).await.next(), Some(7));
        nonces.give_back(wallet, 42).await;
        assert_eq!(nonces.lock(wallet).await.next(), Some(7), "a nonce never handed out changes nothing");
    }

    #[tokio::test]
    async fn nonces_held_by_waiting_transactions_are_skipped() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(3);
        let mut slot = nonces.lock(wallet).await;
        // The ledger counts 5 (a gap at 5); 6, 7 and 9 wait behind it. 3 is below the count.
        assert_eq!(slot.fill(5, [9, 3, 6, 7]), 5, "the gap first");
        slot.take(5);
        assert_eq!(slot.next(), Some(8), "then past the waiting run");
        slot.take(8);
        assert_eq!(slot.next(), Some(10), "and past every waiting one");
        drop(slot);
        // A given-back nonce below a held one goes out again; the held ones never do.
        nonces.give_back(wallet, 5).await;
        let mut slot = nonces.lock(wallet).await;
        assert_eq!(slot.next(), Some(5));
        slot.take(5);
        assert_eq!(slot.next(), Some(10));
        drop(slot);
        nonces.give_back(wallet, 8).await;
        let mut slot = nonces.lock(wallet).await;
        assert_eq!(slot.next(), Some(8));
        slot.take(8);
        assert_eq!(slot.next(), Some(10));
        // The count itself is never held (the ledger counts only consecutive nonces), but a
        // slot filled with it held would still not hand it out.
        assert_eq!(Slot::default().fill(4, [4, 5]), 6);
    }
}
