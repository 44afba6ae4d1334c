//! The embedded ledger's mempool: admitted transactions waiting for a block, in memory like a
//! node's. It does not survive a restart, and need not: a transaction that was pending then
//! reads as `Unknown`, and the pipeline sends the same signed bytes again (its nonce is still
//! free, since it was never included).
//!
//! Per sender, transactions wait in nonce order; a block takes, for every sender, the run of
//! consecutive nonces starting at its committed nonce, and interleaves senders in arrival order.
//! A transaction behind a nonce gap waits until the gap is filled.

use super::execute::Action;
use alloy::primitives::{Address, Bytes, TxHash};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;

#[derive(Debug)]
pub struct PendingTransaction {
    pub hash: TxHash,
    pub raw: Bytes,
    pub sender: Address,
    pub nonce: u64,
    pub to: Option<Address>,
    pub action: Action,
    /// Arrival order.
    pub sequence: u64,
}

/// What admitting a transaction did.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Added,
    /// The same transaction is already waiting.
    AlreadyPending,
    /// The sender's committed nonce is past this one: it was included (if its hash is in the
    /// store) or can never be.
    NonceUsed,
    /// Another transaction of the sender with the same nonce is waiting.
    NonceTaken,
    Full,
}

#[derive(Debug, Default)]
pub struct Mempool {
    by_hash: HashMap<TxHash, Arc<PendingTransaction>>,
    by_sender: HashMap<Address, BTreeMap<u64, Arc<PendingTransaction>>>,
    /// Next nonce per sender as committed in the store (loaded on a sender's first admission).
    committed: HashMap<Address, u64>,
    sequence: u64,
}

impl Mempool {
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn contains(&self, hash: &TxHash) -> bool {
        self.by_hash.contains_key(hash)
    }

    pub fn committed_nonce(&self, sender: &Address) -> Option<u64> {
        self.committed.get(sender).copied()
    }

    /// Records a sender's committed nonce read from the store, unless a newer one is known (a
    /// block committed since the read).
    pub fn learn_committed(&mut self, sender: Address, nonce: u64) {
        let known = self.committed.entry(sender).or_insert(nonce);
        *known = (*known).max(nonce);
    }

    /// The senders with transactions waiting.
    pub fn senders(&self) -> Vec<Address> {
        self.by_sender.keys().copied().collect()
    }

    /// After a block's commit of unknown outcome: learns the committed nonces read from the
    /// store again and drops the waiting transactions they pass (that block landed after all).
    pub fn resync(&mut self, committed: impl IntoIterator<Item = (Address, u64)>) {
        for (sender, nonce) in committed {
            self.learn_committed(sender, nonce);
            let Some(waiting) = self.by_sender.get_mut(&sender) else { continue };
            let kept = waiting.split_off(&nonce);
            for passed in std::mem::replace(waiting, kept).into_values() {
                self.by_hash.remove(&passed.hash);
            }
            if waiting.is_empty() {
                self.by_sender.remove(&sender);
            }
        }
    }

    /// Whether a transaction of `sender` with `nonce` waits here.
    pub fn holds(&self, sender: &Address, nonce: u64) -> bool {
        self.by_sender.get(sender).is_some_and(|waiting| waiting.contains_key(&nonce))
    }

    /// The sender's next nonce counting waiting transactions: committed, plus the run of
    /// consecutive waiting nonces after it. `None` when the committed nonce is not known yet.
    pub fn pending_nonce(&self, sender: &Address) -> Option<u64> {
        let mut next = self.committed_nonce(sender)?;
        if let Some(waiting) = self.by_sender.get(sender) {
            while waiting.contains_key(&next) {
                next += 1;
            }
        }
        Some(next)
    }

    /// Admits a transaction whose sender's committed nonce is known.
    pub fn admit(
        &mut self,
        mut transaction: PendingTransaction,
        limit: usize,
    ) -> (Admission, Option<Arc<PendingTransaction>>) {
        if self.by_hash.contains_key(&transaction.hash) {
            return (Admission::AlreadyPending, None);
        }
        let committed = self.committed_nonce(&transaction.sender).unwrap_or(0);
        if transaction.nonce < committed {
            return (Admission::NonceUsed, None);
        }
        if self.by_sender.get(&transaction.sender).is_some_and(|w| w.contains_key(&transaction.nonce)) {
            return (Admission::NonceTaken, None);
        }
        if self.by_hash.len() >= limit {
            return (Admission::Full, None);
        }
        self.sequence += 1;
        transaction.sequence = self.sequence;
        let transaction = Arc::new(transaction);
        self.by_hash.insert(transaction.hash, transaction.clone());
        self.by_sender.entry(transaction.sender).or_default().insert(transaction.nonce, transaction.clone());
        (Admission::Added, Some(transaction))
    }

    /// Up to `limit` executable transactions in block order (nonce order per sender, senders
    /// interleaved by arrival). They stay here until [`Mempool::included`].
    pub fn executable(&self, limit: usize) -> Vec<Arc<PendingTransaction>> {
        // Per sender, the run of consecutive nonces from the committed one.
        let mut runs: Vec<Vec<Arc<PendingTransaction>>> = Vec::new();
        for (sender, waiting) in &self.by_sender {
            let Some(mut next) = self.committed_nonce(sender) else { continue };
            let mut run = Vec::new();
            for (nonce, transaction) in waiting.range(next..) {
                if *nonce != next {
                    break;
                }
                run.push(transaction.clone());
                next += 1;
            }
            if !run.is_empty() {
                run.reverse(); // pop() takes the lowest nonce first
                runs.push(run);
            }
        }
        let mut heap: BinaryHeap<Reverse<(u64, usize)>> =
            runs.iter().enumerate().filter_map(|(i, run)| run.last().map(|t| Reverse((t.sequence, i)))).collect();
        let mut block = Vec::with_capacity(limit.min(self.by_hash.len()));
        while block.len() < limit {
            let Some(Reverse((_, i))) = heap.pop() else { break };
            let Some(transaction) = runs[i].pop() else { continue };
            block.push(transaction);
            if let Some(next) = runs[i].last() {
                heap.push(Reverse((next.sequence, i)));
            }
        }
        block
    }

    /// Removes transactions a committed block included and advances their senders' nonces.
    pub fn included(&mut self, transactions: &[Arc<PendingTransaction>]) {
        for transaction in transactions {
            self.by_hash.remove(&transaction.hash);
            if let Some(waiting) = self.by_sender.get_mut(&transaction.sender) {
                waiting.remove(&transaction.nonce);
                if waiting.is_empty() {
                    self.by_sender.remove(&transaction.sender);
                }
            }
            let committed = self.committed.entry(transaction.sender).or_insert(0);
            *committed = (*committed).max(transaction.nonce + 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::ContractCall;
    use crate::contract::TokenopsToken as C;
    use alloy::primitives::B256;

    fn pending(sender: u8, nonce: u64, tag: u8) -> PendingTransaction {
        PendingTransaction {
            hash: B256::from_slice(&[sender, tag, nonce as u8].iter().cycle().take(32).copied().collect::<Vec<_>>()),
            raw: Bytes::new(),
            sender: Address::repeat_byte(sender),
            nonce,
            to: None,
            action: Action::Call {
                token: Address::ZERO,
                call: ContractCall::cancelHold(C::cancelHoldCall { id: B256::ZERO }),
            },
            sequence: 0,
        }
    }

    #[test]
    fn blocks_take_consecutive_nonces_in_arrival_order() {
        let mut pool = Mempool::default();
        pool.learn_committed(Address::repeat_byte(1), 0);
        pool.learn_committed(Address::repeat_byte(2), 5);
        assert_eq!(pool.admit(pending(1, 1, 0), 100).0, Admission::Added); // waits for nonce 0
        assert_eq!(pool.admit(pending(2, 5, 0), 100).0, Admission::Added);
        assert_eq!(pool.admit(pending(1, 0, 0), 100).0, Admission::Added);
        assert_eq!(pool.admit(pending(2, 7, 0), 100).0, Admission::Added); // gap at 6
        assert_eq!(pool.admit(pending(2, 5, 0), 100).0, Admission::AlreadyPending);
        assert_eq!(pool.admit(pending(2, 5, 1), 100).0, Admission::NonceTaken);
        assert_eq!(pool.admit(pending(2, 4, 1), 100).0, Admission::NonceUsed);
        assert_eq!(pool.pending_nonce(&Address::repeat_byte(1)), Some(2));
        assert_eq!(pool.pending_nonce(&Address::repeat_byte(2)), Some(6));

        let block = pool.executable(10);
        let order: Vec<(u8, u64)> = block.iter().map(|t| (t.sender.0[0], t.nonce)).collect();
        assert_eq!(order, [(2, 5), (1, 0), (1, 1)]);
        assert_eq!(pool.executable(2).len(), 2);
        pool.included(&block);
        assert_eq!(pool.len(), 1);
        assert_eq!(pool.committed_nonce(&Address::repeat_byte(1)), Some(2));
        assert!(pool.executable(10).is_empty(), "nonce 7 waits behind the gap at 6");
        assert_eq!(pool.admit(pending(9, 0, 0), 1).0, Admission::Full);
    }

    #[test]
    fn a_resync_drops_what_a_block_that_landed_after_all_included() {
        let mut pool = Mempool::default();
        let sender = Address::repeat_byte(1);
        pool.learn_committed(sender, 0);
        for nonce in 0..4 {
            assert_eq!(pool.admit(pending(1, nonce, 0), 100).0, Admission::Added);
        }
        // The block with nonces 0 and 1 committed, though its commit answered an error.
        pool.resync([(sender, 2)]);
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.pending_nonce(&sender), Some(4));
        assert!(!pool.holds(&sender, 1) && pool.holds(&sender, 2));
        assert_eq!(pool.executable(10).iter().map(|t| t.nonce).collect::<Vec<_>>(), vec![2, 3]);
        pool.resync([(sender, 4)]);
        assert_eq!(pool.len(), 0);
        assert!(pool.senders().is_empty());
    }
}
