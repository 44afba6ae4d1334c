//! Per-wallet nonces, owned by the service. Each wallet has a slot holding its next nonce; the
//! slot is locked while a transaction is built and signed, so two signatures of one wallet never
//! get the same nonce, and the nonce advances only when custody has signed (a refusal leaves no
//! gap).
//!
//! An empty slot is filled from the ledger's own count of the wallet's transactions, pending
//! ones included: at first use and after a restart. That count stops at the first gap, and a
//! crash can leave one (a nonce signed but never recorded, later ones recorded and sent again
//! after the restart, waiting behind it): the slot is filled with the nonces such waiting
//! transactions hold too ([`Slot::fill`]), hands out the gap first and then skips them, since a
//! second transaction with a waiting one's nonce would be refused or would replace it.
//!
//! After a send whose outcome is unknown, or an answer showing the ledger ahead of the slot, the
//! slot is counted again ([`Nonces::recount`]), but it only ever moves up: a nonce this process
//! handed out stays out. Its signature may be recorded, and the pipeline's rule is to send the
//! same bytes again until they land (never to sign the operation anew), so handing the nonce to
//! another transaction would make that operation fail for good once the other is included.
//!
//! A signature that will never be sent (it was not recorded) gives its nonce back
//! ([`Nonces::give_back`]), and the wallet's next signature takes it; otherwise the gap would
//! hold every later transaction of the wallet back for good. Giving back never empties the
//! slot: later nonces may be out, their transactions recorded, and none may go out twice.
//!
//! Where nobody can tell whether a signature was recorded (the store failed at its commit), or
//! the process died between signing and recording, the nonce stays out and its gap holds the
//! wallet back. The settlement's gap sweep fills such a gap from what the store and the ledger
//! show ([`Nonces::claim_gap`]): a nonce is filled only once this process handed it out long
//! enough ago that its signature can no longer be on its way to the store.
//!
//! Where several nodes sign for one wallet's ledger, each signs only under the wallet's signing
//! lease (`leases`), and a slot used under a lease another node held since is read from the
//! ledger afresh ([`Slot::lease`]).

use alloy::primitives::Address;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::OwnedMutexGuard;

/// How long a handed-out nonce is remembered: far longer than any gap sweep's grace.
const HANDED_OUT_MEMORY: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
pub struct Nonces {
    slots: Mutex<HashMap<Address, Arc<tokio::sync::Mutex<Slot>>>>,
}

/// A wallet's nonces: the next one never handed out (`None` until read from the ledger, and to be
/// read again, as a floor, while `recount` is set), those handed out but given back, which go out
/// again first, and those above `next` held by transactions waiting in the ledger's pool, which
/// never go out. `handed_out` remembers when
/// each recent signature took its nonce (a monotonic instant: it bounds how long a signature
/// may still be on its way to the store, which is real time, not the business clock), and
/// `handed_out_order` the same in the order taken, so forgetting the old ones looks only at
/// those (a wallet signing hundreds a second holds tens of thousands).
#[derive(Debug, Default)]
pub struct Slot {
    next: Option<u64>,
    recount: bool,
    returned: BTreeSet<u64>,
    held: BTreeSet<u64>,
    handed_out: BTreeMap<u64, Instant>,
    handed_out_order: VecDeque<(Instant, u64)>,
    /// The epoch of the signing lease the slot was last used under (none without leases).
    epoch: Option<u64>,
}

impl Slot {
    /// The nonce the next signature takes, if known without asking the ledger: a given-back one
    /// first.
    pub fn next(&self) -> Option<u64> {
        if self.recount {
            return None;
        }
        self.returned.first().copied().or(self.next)
    }

    /// Fills the slot from the ledger when [`Slot::next`] does not know: `pending` is its count
    /// of the wallet's transactions, `waiting` the nonces of the wallet's transactions in its
    /// pool (those below `pending` change nothing). A slot counted again never goes below the
    /// nonces it handed out, and keeps those given back that the ledger has not used. Returns
    /// the nonce the next signature takes.
    pub fn fill(&mut self, pending: u64, waiting: impl IntoIterator<Item = u64>) -> u64 {
        let waiting: BTreeSet<u64> = waiting.into_iter().filter(|&nonce| nonce >= pending).collect();
        self.returned.retain(|nonce| *nonce >= pending && !waiting.contains(nonce));
        let floor = self.next.map_or(pending, |next| next.max(pending));
        self.held = waiting;
        let next = self.skip_held(floor);
        self.next = Some(next);
        self.recount = false;
        self.returned.first().copied().unwrap_or(next)
    }

    /// The slot is about to be used under the wallet's signing lease of `epoch`. Under another
    /// epoch than before, another node signed for the wallet meanwhile, and what the slot knows
    /// is stale: it is read from the ledger again, and not with its own `next` as a floor (the
    /// other node may have used fewer nonces than this one handed out, whose signatures that
    /// node's nonces then superseded). When this node handed out each nonce is kept: the gap
    /// sweep's grace still holds for them.
    pub fn lease(&mut self, epoch: u64) {
        if self.epoch != Some(epoch) {
            self.next = None;
            self.recount = false;
            self.returned.clear();
            self.held.clear();
            self.epoch = Some(epoch);
        }
    }

    /// Marks `nonce` (from `next`, or read from the ledger) as handed out.
    pub fn take(&mut self, nonce: u64) {
        self.take_at(nonce, Instant::now());
    }

    fn take_at(&mut self, nonce: u64, now: Instant) {
        while let Some(&(at, old)) = self.handed_out_order.front() {
            if now.duration_since(at) < HANDED_OUT_MEMORY {
                break;
            }
            self.handed_out_order.pop_front();
            // A nonce given back and taken again is remembered from its later taking.
            if self.handed_out.get(&old) == Some(&at) {
                self.handed_out.remove(&old);
            }
        }
        self.handed_out.insert(nonce, now);
        self.handed_out_order.push_back((now, nonce));
        self.consume(nonce);
    }

    /// `nonce` is used and never goes out again.
    fn consume(&mut self, nonce: u64) {
        if !self.returned.remove(&nonce) && self.next.is_none_or(|next| nonce >= next) {
            self.next = Some(self.skip_held(nonce + 1));
        }
    }

    /// Whether this slot handed `nonce` out less than `grace` ago.
    fn handed_out_within(&self, nonce: u64, grace: Duration) -> bool {
        self.handed_out.get(&nonce).is_some_and(|at| at.elapsed() < grace)
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

    /// Has the wallet's next nonce read from the ledger again before its next signature, for
    /// when the ledger may be ahead of the slot. The slot only moves up: the nonces it handed out
    /// stay out, since their signatures may be recorded and will be sent again.
    pub async fn recount(&self, wallet: Address) {
        self.lock(wallet).await.recount = true;
    }

    /// Locks the wallet's slot for filling `nonce`, a gap that holds the wallet's later
    /// transactions back, unless this process handed the nonce out less than `grace` ago (its
    /// signature may still be recorded and sent): then `None`. The caller signs the filler
    /// under the lock and calls [`GapClaim::filled`] once it is signed, so no signature of this
    /// process takes the nonce again.
    pub async fn claim_gap(&self, wallet: Address, nonce: u64, grace: Duration) -> Option<GapClaim> {
        let slot = self.lock(wallet).await;
        (!slot.handed_out_within(nonce, grace)).then_some(GapClaim { slot, nonce })
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

/// A nonce claimed for a filler, with its wallet's slot locked.
pub struct GapClaim {
    slot: NonceSlot,
    nonce: u64,
}

impl GapClaim {
    /// The wallet's slot, locked for the filler.
    pub fn slot(&mut self) -> &mut Slot {
        &mut self.slot
    }

    /// The filler is signed: the nonce is used. A slot not read from the ledger yet stays so
    /// (the ledger will count the filler).
    pub fn filled(mut self) {
        let nonce = self.nonce;
        if self.slot.next.is_some() {
            self.slot.consume(nonce);
        } else {
            self.slot.returned.remove(&nonce);
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
        nonces.recount(wallet).await;
        assert_eq!(nonces.lock(wallet).await.next(), None, "to be read from the ledger again");
    }

    #[test]
    fn old_nonces_are_forgotten_and_a_retaken_one_is_remembered_from_its_later_taking() {
        let mut slot = Slot::default();
        let start = Instant::now();
        for nonce in 0..1_000 {
            slot.take_at(nonce, start);
        }
        slot.returned.insert(3);
        slot.take_at(3, start + Duration::from_secs(300));
        slot.take_at(1_000, start + HANDED_OUT_MEMORY + Duration::from_secs(1));
        let remembered: Vec<u64> = slot.handed_out.keys().copied().collect();
        assert_eq!(remembered, vec![3, 1_000], "the rest were taken too long ago");
        assert_eq!(slot.handed_out_order.len(), 2);
    }

    #[tokio::test]
    async fn a_recount_moves_the_slot_only_up_past_what_it_handed_out() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(7);
        for nonce in 11..=13 {
            nonces.lock(wallet).await.take(nonce);
        }
        nonces.give_back(wallet, 11).await;
        // A send of 12 had an unknown outcome: the ledger counts only 11 (12 and 13 were not
        // sent yet), but their signatures are recorded and will be sent again.
        nonces.recount(wallet).await;
        let mut slot = nonces.lock(wallet).await;
        assert_eq!(slot.fill(11, []), 11, "the given-back nonce first");
        slot.take(11);
        assert_eq!(slot.next(), Some(14), "never 12 or 13 again");
        drop(slot);
        // The ledger ahead of the slot (another signer used 14 to 19): the slot moves up, and a
        // given-back nonce the ledger has used is dropped.
        nonces.give_back(wallet, 11).await;
        nonces.recount(wallet).await;
        let mut slot = nonces.lock(wallet).await;
        assert_eq!(slot.fill(20, [21]), 20);
        slot.take(20);
        assert_eq!(slot.next(), Some(22), "past the waiting one");
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

    #[tokio::test]
    async fn a_slot_used_under_a_lease_another_node_held_since_is_read_afresh() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(8);
        let mut slot = nonces.lock(wallet).await;
        slot.lease(1);
        assert_eq!(slot.fill(10, [12]), 10);
        for nonce in [10, 11, 13] {
            slot.take(nonce);
        }
        slot.returned.insert(11);
        slot.lease(1);
        assert_eq!(slot.next(), Some(11), "the same lease: the slot is kept");
        // Another node held the wallet meanwhile: the slot is read from the ledger again, even
        // below what this node handed out (the other node's nonces superseded those).
        slot.lease(3);
        assert_eq!(slot.next(), None);
        assert_eq!(slot.fill(12, []), 12);
        assert!(slot.handed_out_within(13, Duration::from_secs(60)), "when 13 went out is kept");
    }

    #[tokio::test]
    async fn a_gap_is_filled_only_once_its_nonce_has_been_out_longer_than_the_grace() {
        let nonces = Nonces::default();
        let wallet = Address::repeat_byte(4);
        for nonce in 22..=24 {
            nonces.lock(wallet).await.take(nonce);
        }
        // 22's signature may still be on its way to the store.
        assert!(nonces.claim_gap(wallet, 22, Duration::from_secs(60)).await.is_none());
        // Counting the slot again (after an unknown send) does not forget when 22 went out.
        nonces.recount(wallet).await;
        assert!(nonces.claim_gap(wallet, 22, Duration::from_secs(60)).await.is_none());
        // Past the grace (none here) it may be filled; the slot still counts again, above 24.
        nonces.claim_gap(wallet, 22, Duration::ZERO).await.expect("claimable").filled();
        assert_eq!(nonces.lock(wallet).await.next(), None);
        assert_eq!(nonces.lock(wallet).await.fill(22, []), 25);
        // A nonce never handed out by this process (a restart lost it) may be filled at once,
        // and the slot never hands it out afterwards.
        let other = Address::repeat_byte(5);
        nonces.lock(other).await.fill(7, [8, 9]);
        nonces.claim_gap(other, 7, Duration::from_secs(60)).await.expect("claimable").filled();
        assert_eq!(nonces.lock(other).await.next(), Some(10), "past the filler and the waiting ones");
        // A given-back nonce that is filled is not handed out again either.
        let third = Address::repeat_byte(6);
        for nonce in 3..=5 {
            nonces.lock(third).await.take(nonce);
        }
        nonces.give_back(third, 3).await;
        nonces.claim_gap(third, 3, Duration::ZERO).await.expect("claimable").filled();
        assert_eq!(nonces.lock(third).await.next(), Some(6));
    }
}
