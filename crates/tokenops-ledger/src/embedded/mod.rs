//! The embedded ledger: an in-process chain with exactly the token contract's semantics,
//! durable in the service's own store. The default ledger, so that tokenops runs with nothing
//! else installed.
//!
//! - **Transactions** are the same signed EVM transactions an EVM node takes. `send` decodes
//!   them, recovers the sender from the signature, and checks the chain id and the nonce. It
//!   decodes the ABI call and admits the transaction to the mempool (in memory, see `mempool`).
//! - **Blocks** are produced by a background task every `block_interval` (default 200 ms), or as
//!   soon as `block_trigger` transactions wait (default 500). Blocks are produced only when
//!   transactions wait: no empty blocks. A block executes its transactions in order over the
//!   rows they touch (`execute`). Then it writes the block, the transactions with their receipts,
//!   and the changed balances, holds, supplies and nonces in **one store transaction**, so
//!   throughput is bounded by block size, not by one commit per transfer.
//! - **Time**: a block's timestamp comes from the ledger's `Clock` (the service's, injectable;
//!   whole EVM seconds), and never goes below its parent's. The block's `produced_at` is the same
//!   clock's reading in microseconds. Hold expiry is judged against it, as the contract judges it
//!   against `block.timestamp`.
//! - **Hashes**: a transaction's hash is keccak-256 of its signed bytes, as on any EVM chain. A
//!   block's hash is keccak-256 over its number, parent hash, timestamp and transaction hashes:
//!   it identifies the block but is not an Ethereum header hash.
//! - **One producer per store.** Only one process should run the embedded ledger on a store. A
//!   second producer's block collides on the block number's primary key and is rolled back;
//!   the producer then stops, since its view of the chain is stale.
//!
//! What it leaves out, because tokenops never sends it: gas accounting (fields are accepted
//! and ignored), native value, and contract calls other than the ledger port's (`approve`,
//! `transferFrom`). Such transactions are refused at `send` with a final error.

mod execute;
mod mempool;

use self::execute::{Action, Balance, BlockState, Hold, HoldStatus, Keys, TokenState};
use self::mempool::{Admission, Mempool, PendingTransaction};
use crate::contract::{self, ContractCall};
use crate::nonces::Nonces;
use crate::port::{
    Balances, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, SignedTransaction, TokenInfo, TokenSpec, TxHash,
};
use crate::transaction::{self, Fees, UnsignedTransaction};
use alloy::primitives::{Address, B256, Bytes, U256, keccak256};
use alloy::sol_types::SolInterface;
use async_trait::async_trait;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;
use tokenops_custody::Custody;
use tokenops_domain::{Clock, SystemClock};
use tokenops_store::{
    LedgerBalance, LedgerBlock, LedgerBlockChanges, LedgerHold, LedgerHoldStatus, LedgerNonce, LedgerToken,
    LedgerTransaction, Store, StoreError,
};
use tokio::sync::{Notify, watch};

/// The embedded chain's default id (ASCII "tok"); any value works as long as it stays the same
/// for a store.
pub const DEFAULT_CHAIN_ID: u64 = 0x746f6b;

/// The gas limit written into the embedded ledger's transactions. The embedded ledger does not
/// meter gas; the field only has to be present.
const GAS_LIMIT: u64 = 1_000_000;
const DEPLOY_GAS_LIMIT: u64 = 5_000_000;

/// The clock's time in whole EVM seconds (a block's `timestamp`); 0 before the epoch.
fn evm_seconds(clock: &dyn Clock) -> u64 {
    u64::try_from(clock.now().as_micros() / 1_000_000).unwrap_or(0)
}

#[derive(Clone)]
pub struct EmbeddedConfig {
    pub chain_id: u64,
    /// How often a block is produced while transactions wait.
    pub block_interval: Duration,
    /// A block is produced at once when this many transactions wait.
    pub block_trigger: usize,
    /// The most transactions in one block.
    pub max_block_transactions: usize,
    /// The most transactions waiting; `send` answers `Temporary` beyond it (back-pressure).
    pub max_pending: usize,
    /// How long `deploy_token` waits for its block.
    pub inclusion_timeout: Duration,
    /// Where blocks' time comes from: the service's clock, so that hold expiry follows it.
    pub clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for EmbeddedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedConfig")
            .field("chain_id", &self.chain_id)
            .field("block_interval", &self.block_interval)
            .field("block_trigger", &self.block_trigger)
            .field("max_block_transactions", &self.max_block_transactions)
            .field("max_pending", &self.max_pending)
            .finish_non_exhaustive()
    }
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            chain_id: DEFAULT_CHAIN_ID,
            block_interval: Duration::from_millis(200),
            block_trigger: 500,
            max_block_transactions: 2_000,
            max_pending: 100_000,
            inclusion_timeout: Duration::from_secs(30),
            clock: Arc::new(SystemClock),
        }
    }
}

#[derive(Debug, Clone)]
struct Head {
    number: u64,
    hash: B256,
    timestamp: u64,
}

/// The embedded ledger. Dropping it stops block production (transactions still waiting are
/// dropped with the mempool, as on a node's restart).
pub struct EmbeddedLedger {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for EmbeddedLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedLedger").field("issuer", &self.inner.issuer).finish_non_exhaustive()
    }
}

struct Inner {
    store: Arc<dyn Store>,
    config: EmbeddedConfig,
    issuer: Address,
    issuer_custody: Arc<dyn Custody>,
    nonces: Nonces,
    mempool: Mutex<Mempool>,
    head: Mutex<Head>,
    /// The head's number, for waiters.
    head_number: watch::Sender<u64>,
    /// Wakes the producer early (enough transactions wait, or someone waits for a block).
    wake: Arc<Notify>,
    /// One block at a time (the background task, and `produce_block` called directly).
    producing: tokio::sync::Mutex<()>,
    stopped: AtomicBool,
    /// A block's commit failed with an unknown outcome (the store went away mid-commit): the
    /// head and the committed nonces are read from the store again before the next block, or
    /// a block that did land would be produced twice.
    resync: AtomicBool,
    /// Deployed tokens by address: immutable facts, cached after the first read.
    tokens: Mutex<HashMap<Address, TokenInfo>>,
}

fn temporary(error: StoreError) -> LedgerError {
    LedgerError::temporary(format!("embedded ledger store: {error}"))
}

fn corrupt(what: &str, value: &str) -> LedgerError {
    LedgerError::temporary(format!("embedded ledger store holds an invalid {what}: {value:?}"))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The store's spelling of addresses and hashes: `0x` and lower-case hex.
fn text(value: impl std::fmt::LowerHex) -> String {
    format!("{value:#x}")
}

fn parse<T: FromStr>(what: &str, value: &str) -> Result<T, LedgerError> {
    value.parse().map_err(|_| corrupt(what, value))
}

fn parse_amount(value: &str) -> Result<U256, LedgerError> {
    U256::from_str_radix(value, 10).map_err(|_| corrupt("amount", value))
}

impl EmbeddedLedger {
    /// Opens the ledger on `store` (creating its chain on first use) and starts producing
    /// blocks. `issuer` is the custody wallet that deploys tokens and signs mints and burns;
    /// `issuer_custody` signs its deployments.
    pub async fn open(
        store: Arc<dyn Store>,
        issuer: Address,
        issuer_custody: Arc<dyn Custody>,
        config: EmbeddedConfig,
    ) -> Result<Self, LedgerError> {
        let head = load_or_init_chain(store.as_ref(), &config).await?;
        let wake = Arc::new(Notify::new());
        let (head_number, _) = watch::channel(head.number);
        let inner = Arc::new(Inner {
            store,
            issuer,
            issuer_custody,
            nonces: Nonces::default(),
            mempool: Mutex::new(Mempool::default()),
            head: Mutex::new(head),
            head_number,
            wake: wake.clone(),
            producing: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
            resync: AtomicBool::new(false),
            tokens: Mutex::new(HashMap::new()),
            config,
        });
        tokio::spawn(produce_blocks(Arc::downgrade(&inner), wake, inner.config.block_interval));
        Ok(Self { inner })
    }

    /// Produces a block now from the waiting transactions; returns how many it included.
    pub async fn produce_block(&self) -> Result<usize, LedgerError> {
        self.inner.produce_block().await
    }

    /// The number of the latest block.
    pub fn head_number(&self) -> u64 {
        lock(&self.inner.head).number
    }

    /// How many transactions wait for a block.
    pub fn pending_count(&self) -> usize {
        lock(&self.inner.mempool).len()
    }

    /// Stops producing blocks and refuses every later call as `Temporary`, as an unreachable
    /// node would (tests; shutdown).
    pub fn close(&self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        self.inner.wake.notify_one();
    }
}

/// Stops the producer task now rather than at its next tick (it holds only a weak reference).
impl Drop for EmbeddedLedger {
    fn drop(&mut self) {
        self.close();
    }
}

async fn load_or_init_chain(store: &dyn Store, config: &EmbeddedConfig) -> Result<Head, LedgerError> {
    let mut tx = store.write().await.map_err(temporary)?;
    let ledger = tx.ledger();
    match ledger.chain_id().await.map_err(temporary)? {
        Some(chain_id) if chain_id != config.chain_id => {
            return Err(LedgerError::final_(format!(
                "the store holds the embedded chain {chain_id}, not the configured {}",
                config.chain_id
            )));
        }
        Some(_) => {}
        None => {
            let genesis = LedgerBlock {
                number: 0,
                hash: text(keccak256(format!("tokenops embedded ledger {}", config.chain_id))),
                parent_hash: text(B256::ZERO),
                timestamp: evm_seconds(config.clock.as_ref()),
                transaction_count: 0,
                produced_at: config.clock.now(),
            };
            ledger.init_chain(config.chain_id, &genesis).await.map_err(temporary)?;
            tracing::info!(chain_id = config.chain_id, "created the embedded ledger's chain");
        }
    }
    let head = tx.ledger().head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no genesis block"))?;
    tx.commit().await.map_err(temporary)?;
    Ok(Head { number: head.number, hash: parse("block hash", &head.hash)?, timestamp: head.timestamp })
}

/// The block producer: wakes every interval (or when woken), produces blocks while transactions
/// wait, and ends when the ledger is dropped or closed.
async fn produce_blocks(ledger: Weak<Inner>, wake: Arc<Notify>, interval: Duration) {
    loop {
        let _ = tokio::time::timeout(interval, wake.notified()).await;
        let Some(inner) = ledger.upgrade() else { return };
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        loop {
            match inner.produce_block().await {
                // A full block: more may be waiting.
                Ok(count) if count >= inner.config.max_block_transactions => continue,
                Ok(_) => break,
                Err(error) => {
                    tracing::warn!(%error, "the embedded ledger could not produce a block; retrying");
                    break;
                }
            }
        }
    }
}

impl Inner {
    fn check_running(&self) -> Result<(), LedgerError> {
        if self.stopped.load(Ordering::SeqCst) {
            Err(LedgerError::temporary("the embedded ledger is stopped"))
        } else {
            Ok(())
        }
    }

    /// The token at `address`, from the cache or the store.
    async fn token(&self, address: Address) -> Result<Option<TokenInfo>, LedgerError> {
        if let Some(info) = lock(&self.tokens).get(&address) {
            return Ok(Some(info.clone()));
        }
        let mut tx = self.store.read().await.map_err(temporary)?;
        let row = tx.ledger().token(&text(address)).await.map_err(temporary)?;
        drop(tx);
        let Some(row) = row else { return Ok(None) };
        let info = TokenInfo {
            address,
            name: row.name,
            symbol: row.symbol,
            decimals: row.decimals,
            issuer: parse("issuer", &row.issuer)?,
        };
        lock(&self.tokens).insert(address, info.clone());
        Ok(Some(info))
    }

    async fn require_token(&self, address: Address) -> Result<TokenInfo, LedgerError> {
        self.token(address).await?.ok_or_else(|| LedgerError::final_(format!("no token contract at {address}")))
    }

    /// The sender's next nonce counting waiting transactions.
    async fn pending_nonce(&self, sender: Address) -> Result<u64, LedgerError> {
        self.ensure_committed_nonce(sender).await?;
        Ok(lock(&self.mempool).pending_nonce(&sender).unwrap_or(0))
    }

    /// Makes sure the mempool knows the sender's committed nonce.
    async fn ensure_committed_nonce(&self, sender: Address) -> Result<(), LedgerError> {
        if lock(&self.mempool).committed_nonce(&sender).is_some() {
            return Ok(());
        }
        let mut tx = self.store.read().await.map_err(temporary)?;
        let stored = tx.ledger().nonces(&[text(sender)]).await.map_err(temporary)?;
        drop(tx);
        let nonce = stored.first().map_or(0, |n| n.nonce);
        lock(&self.mempool).learn_committed(sender, nonce);
        Ok(())
    }

    async fn sign(
        &self,
        to: Option<Address>,
        input: Bytes,
        sender: Address,
        gas_limit: u64,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError> {
        self.check_running()?;
        let mut slot = self.nonces.lock(sender).await;
        let mut nonce = match slot.next() {
            Some(nonce) => nonce,
            None => self.pending_nonce(sender).await?,
        };
        // After a restart, stored signatures sent again may wait in the mempool behind a gap:
        // `pending_nonce` is the gap, and the nonces after it that they hold are not free.
        while lock(&self.mempool).holds(&sender, nonce) {
            slot.take(nonce);
            nonce = slot.next().unwrap_or(nonce + 1);
        }
        let unsigned = UnsignedTransaction {
            chain_id: self.config.chain_id,
            nonce,
            to,
            input,
            gas_limit,
            fees: Fees::Eip1559 { max_fee_per_gas: 0, max_priority_fee_per_gas: 0 },
        };
        let signed = transaction::sign(unsigned, sender, custody).await?;
        slot.take(nonce);
        Ok(signed)
    }

    /// Decodes, checks and admits signed bytes.
    async fn send(&self, raw: &[u8]) -> Result<TxHash, LedgerError> {
        self.check_running()?;
        let decoded = transaction::decode(raw)?;
        if decoded.chain_id != Some(self.config.chain_id) {
            return Err(LedgerError::final_(format!(
                "the transaction is for chain {:?}, this ledger is chain {}",
                decoded.chain_id, self.config.chain_id
            )));
        }
        if !decoded.value.is_zero() {
            return Err(LedgerError::final_("the token contract accepts no native value"));
        }
        let action = match decoded.to {
            None => {
                let (spec, issuer) = contract::decode_deployment(&decoded.input).ok_or_else(|| {
                    LedgerError::final_("the embedded ledger deploys only the TokenopsToken contract")
                })?;
                Action::Deploy { spec, issuer, address: decoded.sender.create(decoded.nonce) }
            }
            Some(token) => {
                self.require_token(token).await?;
                let call = ContractCall::abi_decode(&decoded.input)
                    .map_err(|e| LedgerError::final_(format!("not a call of the token contract: {e}")))?;
                match call {
                    ContractCall::mint(_)
                    | ContractCall::burn(_)
                    | ContractCall::transfer(_)
                    | ContractCall::hold(_)
                    | ContractCall::executeHold(_)
                    | ContractCall::cancelHold(_) => Action::Call { token, call },
                    _ => return Err(LedgerError::final_("the embedded ledger does not take this call")),
                }
            }
        };
        self.ensure_committed_nonce(decoded.sender).await?;
        let pending = PendingTransaction {
            hash: decoded.hash,
            raw: Bytes::copy_from_slice(raw),
            sender: decoded.sender,
            nonce: decoded.nonce,
            to: decoded.to,
            action,
            sequence: 0,
        };
        let (admission, waiting) = {
            let mut mempool = lock(&self.mempool);
            let (admission, _) = mempool.admit(pending, self.config.max_pending);
            (admission, mempool.len())
        };
        match admission {
            Admission::Added => {
                if waiting >= self.config.block_trigger {
                    self.wake.notify_one();
                }
                Ok(decoded.hash)
            }
            Admission::AlreadyPending => Ok(decoded.hash),
            Admission::NonceUsed => {
                // Sending included bytes again answers their hash; other bytes with a used
                // nonce can never be included.
                let mut tx = self.store.read().await.map_err(temporary)?;
                let included = tx.ledger().transaction(&text(decoded.hash)).await.map_err(temporary)?;
                match included {
                    Some(_) => Ok(decoded.hash),
                    None => Err(LedgerError::final_(format!(
                        "nonce {} of {} is already used by another transaction",
                        decoded.nonce, decoded.sender
                    ))),
                }
            }
            Admission::NonceTaken => Err(LedgerError::final_(format!(
                "another transaction with nonce {} of {} is pending",
                decoded.nonce, decoded.sender
            ))),
            Admission::Full => Err(LedgerError::temporary("the embedded ledger's mempool is full")),
        }
    }

    /// Executes the waiting transactions into a block and stores it.
    async fn produce_block(&self) -> Result<usize, LedgerError> {
        let _producing = self.producing.lock().await;
        self.check_running()?;
        if self.resync.load(Ordering::SeqCst) {
            self.resync_with_store().await?;
        }
        let batch = lock(&self.mempool).executable(self.config.max_block_transactions);
        if batch.is_empty() {
            return Ok(0);
        }
        let parent = lock(&self.head).clone();
        let number = parent.number + 1;
        let timestamp = evm_seconds(self.config.clock.as_ref()).max(parent.timestamp);

        let mut keys = Keys::default();
        for transaction in &batch {
            keys.add(transaction.sender, &transaction.action);
        }
        let mut tx = self.store.write().await.map_err(temporary)?;
        let mut state = BlockState::new(number, timestamp);
        load_state(tx.ledger(), &mut keys, &mut state).await?;

        let mut transactions = Vec::with_capacity(batch.len());
        let mut nonces: HashMap<Address, u64> = HashMap::new();
        for (index, pending) in batch.iter().enumerate() {
            let result = state.apply(pending.sender, pending.hash, &pending.action);
            let (success, revert_reason, revert_data) = match result {
                Ok(()) => (true, None, None),
                Err(data) => (false, Some(contract::revert_reason(&data)), Some(data.to_vec())),
            };
            let contract_address = match &pending.action {
                Action::Deploy { address, .. } if success => Some(text(*address)),
                _ => None,
            };
            nonces.insert(pending.sender, pending.nonce + 1);
            transactions.push(LedgerTransaction {
                hash: text(pending.hash),
                block_number: number,
                index: u32::try_from(index).map_err(|_| LedgerError::final_("block too large"))?,
                sender: text(pending.sender),
                nonce: pending.nonce,
                to: pending.to.map(text),
                raw: pending.raw.to_vec(),
                success,
                revert_reason,
                revert_data,
                contract_address,
            });
        }
        if state.untracked_access {
            tracing::error!(
                block = number,
                "the embedded ledger executed a block over unloaded state; block discarded"
            );
            return Err(LedgerError::temporary("internal error: block state incomplete"));
        }

        let mut hasher_input = Vec::with_capacity(72 + 32 * batch.len());
        hasher_input.extend_from_slice(&number.to_be_bytes());
        hasher_input.extend_from_slice(parent.hash.as_slice());
        hasher_input.extend_from_slice(&timestamp.to_be_bytes());
        for pending in &batch {
            hasher_input.extend_from_slice(pending.hash.as_slice());
        }
        let hash = keccak256(&hasher_input);
        let block = LedgerBlock {
            number,
            hash: text(hash),
            parent_hash: text(parent.hash),
            timestamp,
            transaction_count: u32::try_from(batch.len()).map_err(|_| LedgerError::final_("block too large"))?,
            produced_at: self.config.clock.now(),
        };
        let (tokens, balances, holds) = changed_rows(&state);
        let nonces: Vec<LedgerNonce> =
            nonces.into_iter().map(|(address, nonce)| LedgerNonce { address: text(address), nonce }).collect();
        let written = tx
            .ledger()
            .append_block(LedgerBlockChanges {
                block: &block,
                transactions: &transactions,
                tokens: &tokens,
                balances: &balances,
                holds: &holds,
                nonces: &nonces,
            })
            .await;
        match written {
            Ok(()) => {}
            Err(StoreError::Conflict(message)) => {
                // Another producer wrote this block number: this one's view is stale.
                tracing::error!(block = number, message, "another embedded ledger writes to this store; stopping");
                self.stopped.store(true, Ordering::SeqCst);
                return Err(LedgerError::temporary("another embedded ledger produces blocks on this store"));
            }
            Err(error) => return Err(temporary(error)),
        }
        if let Err(error) = tx.commit().await {
            self.resync.store(true, Ordering::SeqCst);
            return Err(temporary(error));
        }

        lock(&self.mempool).included(&batch);
        *lock(&self.head) = Head { number, hash, timestamp };
        self.head_number.send_replace(number);
        Ok(batch.len())
    }

    /// Reads the head and the waiting senders' committed nonces from the store again, after a
    /// block's commit whose outcome is unknown.
    async fn resync_with_store(&self) -> Result<(), LedgerError> {
        let senders = lock(&self.mempool).senders();
        let mut tx = self.store.read().await.map_err(temporary)?;
        let head = tx.ledger().head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no head"))?;
        let addresses: Vec<String> = senders.iter().map(|s| text(*s)).collect();
        let nonces = tx.ledger().nonces(&addresses).await.map_err(temporary)?;
        drop(tx);
        let committed: Vec<(Address, u64)> = nonces
            .iter()
            .map(|n| Ok((parse::<Address>("address", &n.address)?, n.nonce)))
            .collect::<Result<_, LedgerError>>()?;
        let head = Head { number: head.number, hash: parse("block hash", &head.hash)?, timestamp: head.timestamp };
        if head.number != lock(&self.head).number {
            tracing::warn!(
                block = head.number,
                "a block whose commit seemed to fail had landed; the ledger carries on from it"
            );
        }
        lock(&self.mempool).resync(committed);
        self.head_number.send_replace(head.number);
        *lock(&self.head) = head;
        self.resync.store(false, Ordering::SeqCst);
        Ok(())
    }

    async fn receipt(&self, hash: TxHash) -> Result<ReceiptStatus, LedgerError> {
        Ok(self.receipts(&[hash]).await?.pop().unwrap_or(ReceiptStatus::Unknown))
    }

    /// Receipts in the order of `hashes`, the included ones read in one store transaction.
    async fn receipts(&self, hashes: &[TxHash]) -> Result<Vec<ReceiptStatus>, LedgerError> {
        self.check_running()?;
        let pending: Vec<bool> = {
            let mempool = lock(&self.mempool);
            hashes.iter().map(|hash| mempool.contains(hash)).collect()
        };
        let mut receipts = Vec::with_capacity(hashes.len());
        let mut tx = None;
        for (hash, pending) in hashes.iter().zip(pending) {
            if pending {
                receipts.push(ReceiptStatus::Pending);
                continue;
            }
            let tx = match &mut tx {
                Some(tx) => tx,
                None => tx.insert(self.store.read().await.map_err(temporary)?),
            };
            let row = tx.ledger().transaction(&text(*hash)).await.map_err(temporary)?;
            receipts.push(Self::receipt_of(row));
        }
        Ok(receipts)
    }

    fn receipt_of(row: Option<LedgerTransaction>) -> ReceiptStatus {
        match row {
            None => ReceiptStatus::Unknown,
            Some(row) => ReceiptStatus::Included {
                block_number: row.block_number,
                outcome: if row.success {
                    Outcome::Success
                } else {
                    Outcome::Reverted {
                        reason: row.revert_reason.unwrap_or_else(|| contract::REVERTED_WITHOUT_DATA.to_owned()),
                        data: row.revert_data.unwrap_or_default().into(),
                    }
                },
            },
        }
    }

    /// Waits (bounded) until the transaction is included.
    async fn wait_for_inclusion(&self, hash: TxHash) -> Result<(u64, Outcome), LedgerError> {
        let mut heads = self.head_number.subscribe();
        let deadline = tokio::time::Instant::now() + self.config.inclusion_timeout;
        loop {
            match self.receipt(hash).await? {
                ReceiptStatus::Included { block_number, outcome } => return Ok((block_number, outcome)),
                ReceiptStatus::Unknown => {
                    return Err(LedgerError::temporary(format!("transaction {hash} was dropped")));
                }
                ReceiptStatus::Pending => {
                    self.wake.notify_one();
                    if tokio::time::timeout_at(deadline, heads.changed()).await.is_err() {
                        return Err(LedgerError::temporary(format!("transaction {hash} not included in time")));
                    }
                }
            }
        }
    }
}

/// Loads the rows the block's transactions touch into `state`.
async fn load_state(
    ledger: &mut dyn tokenops_store::LedgerStore,
    keys: &mut Keys,
    state: &mut BlockState,
) -> Result<(), LedgerError> {
    for token in &keys.tokens {
        if let Some(row) = ledger.token(&text(*token)).await.map_err(temporary)? {
            state.tokens.insert(
                *token,
                TokenState {
                    spec: TokenSpec { name: row.name, symbol: row.symbol, decimals: row.decimals },
                    issuer: parse("issuer", &row.issuer)?,
                    total_supply: parse_amount(&row.total_supply)?,
                    deploy_transaction: parse("transaction hash", &row.deploy_transaction)?,
                    block_number: row.block_number,
                },
            );
        }
    }
    let hold_keys: Vec<(String, String)> = keys.holds.iter().map(|(t, id)| (text(*t), text(*id))).collect();
    for row in ledger.holds(&hold_keys).await.map_err(temporary)? {
        let token: Address = parse("token", &row.token)?;
        let hold = Hold {
            owner: parse("owner", &row.owner)?,
            payee: row.payee.as_deref().map(|p| parse("payee", p)).transpose()?.unwrap_or(Address::ZERO),
            amount: parse_amount(&row.amount)?,
            expires_at: row.expires_at,
            status: match row.status {
                LedgerHoldStatus::Active => HoldStatus::Active,
                LedgerHoldStatus::Executed => HoldStatus::Executed,
                LedgerHoldStatus::Cancelled => HoldStatus::Cancelled,
            },
        };
        keys.add_hold_parties(token, &hold);
        state.holds.insert((token, parse("hold id", &row.id)?), hold);
    }
    let balance_keys: Vec<(String, String)> = keys.balances.iter().map(|(t, w)| (text(*t), text(*w))).collect();
    let mut stored: HashMap<(Address, Address), Balance> = HashMap::with_capacity(balance_keys.len());
    for row in ledger.balances(&balance_keys).await.map_err(temporary)? {
        stored.insert(
            (parse("token", &row.token)?, parse("wallet", &row.wallet)?),
            Balance { total: parse_amount(&row.total)?, held: parse_amount(&row.held)? },
        );
    }
    for key in &keys.balances {
        state.track_balance(*key, stored.remove(key));
    }
    Ok(())
}

/// The rows a block changed, in the store's spelling.
fn changed_rows(state: &BlockState) -> (Vec<LedgerToken>, Vec<LedgerBalance>, Vec<LedgerHold>) {
    let tokens = state
        .changed_tokens
        .iter()
        .filter_map(|address| {
            let token = state.tokens.get(address)?;
            Some(LedgerToken {
                address: text(*address),
                name: token.spec.name.clone(),
                symbol: token.spec.symbol.clone(),
                decimals: token.spec.decimals,
                issuer: text(token.issuer),
                total_supply: token.total_supply.to_string(),
                deploy_transaction: text(token.deploy_transaction),
                block_number: token.block_number,
            })
        })
        .collect();
    let balances = state
        .changed_balances
        .iter()
        .filter_map(|key| {
            let balance = state.balances.get(key)?;
            Some(LedgerBalance {
                token: text(key.0),
                wallet: text(key.1),
                total: balance.total.to_string(),
                held: balance.held.to_string(),
            })
        })
        .collect();
    let holds = state
        .changed_holds
        .iter()
        .filter_map(|key| {
            let hold = state.holds.get(key)?;
            Some(LedgerHold {
                token: text(key.0),
                id: text(key.1),
                owner: text(hold.owner),
                payee: (!hold.payee.is_zero()).then(|| text(hold.payee)),
                amount: hold.amount.to_string(),
                expires_at: hold.expires_at,
                status: match hold.status {
                    HoldStatus::Active => LedgerHoldStatus::Active,
                    HoldStatus::Executed => LedgerHoldStatus::Executed,
                    HoldStatus::Cancelled => LedgerHoldStatus::Cancelled,
                },
            })
        })
        .collect();
    (tokens, balances, holds)
}

#[async_trait]
impl Ledger for EmbeddedLedger {
    fn issuer(&self) -> Address {
        self.inner.issuer
    }

    async fn deploy_token(&self, spec: &TokenSpec) -> Result<Address, LedgerError> {
        let inner = &self.inner;
        let input = contract::deployment_input(spec, inner.issuer);
        let signed = inner.sign(None, input, inner.issuer, DEPLOY_GAS_LIMIT, inner.issuer_custody.as_ref()).await?;
        self.send(&signed).await?;
        let (_, outcome) = inner.wait_for_inclusion(signed.hash).await?;
        match outcome {
            Outcome::Success => {
                let address = inner.issuer.create(signed.nonce);
                tracing::info!(%address, symbol = spec.symbol, "deployed a token on the embedded ledger");
                Ok(address)
            }
            Outcome::Reverted { reason, .. } => Err(LedgerError::final_(format!("the deployment reverted: {reason}"))),
        }
    }

    async fn adopt_token(&self, address: Address) -> Result<TokenInfo, LedgerError> {
        self.inner.check_running()?;
        self.inner.require_token(address).await
    }

    async fn register_wallet(&self, _wallet: Address) -> Result<(), LedgerError> {
        // Every address exists and nothing costs gas: nothing to prepare.
        self.inner.check_running()
    }

    async fn sign(
        &self,
        token: Address,
        call: &LedgerCall,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError> {
        self.inner.require_token(token).await?;
        let sender = call.sender(self.inner.issuer);
        self.inner.sign(Some(token), contract::calldata(call), sender, GAS_LIMIT, custody).await
    }

    async fn send(&self, transaction: &SignedTransaction) -> Result<TxHash, LedgerError> {
        let result = self.inner.send(&transaction.raw).await;
        if matches!(result, Err(LedgerError::Temporary { .. })) {
            // The outcome is unknown to the caller: the next nonce is read from the ledger again.
            self.inner.nonces.forget(transaction.sender).await;
        }
        result
    }

    async fn abandon(&self, transaction: &SignedTransaction) {
        self.inner.nonces.give_back(transaction.sender, transaction.nonce).await;
    }

    async fn next_nonce(&self, sender: Address) -> Result<u64, LedgerError> {
        self.inner.check_running()?;
        self.inner.pending_nonce(sender).await
    }

    async fn fill_nonce_gap(
        &self,
        token: Address,
        sender: Address,
        nonce: u64,
        custody: &dyn Custody,
        grace: Duration,
    ) -> Result<Option<TxHash>, LedgerError> {
        let inner = &self.inner;
        inner.check_running()?;
        inner.require_token(token).await?;
        let Some(claim) = inner.nonces.claim_gap(sender, nonce, grace).await else { return Ok(None) };
        // Under the slot's lock: still the gap, not filled meanwhile.
        if inner.pending_nonce(sender).await? != nonce {
            return Ok(None);
        }
        let unsigned = UnsignedTransaction {
            chain_id: inner.config.chain_id,
            nonce,
            to: Some(token),
            input: contract::calldata(&LedgerCall::Transfer { from: sender, to: sender, amount: U256::ZERO }),
            gas_limit: GAS_LIMIT,
            fees: Fees::Eip1559 { max_fee_per_gas: 0, max_priority_fee_per_gas: 0 },
        };
        let signed = transaction::sign(unsigned, sender, custody).await?;
        // Sent under the slot's lock: a signature of the wallet that read the ledger's count
        // before the filler is in the pool would take the same nonce.
        let sent = inner.send(&signed.raw).await;
        claim.filled();
        sent.map(Some)
    }

    async fn receipt(&self, hash: TxHash) -> Result<ReceiptStatus, LedgerError> {
        self.inner.receipt(hash).await
    }

    async fn receipts(&self, hashes: &[TxHash]) -> Result<Vec<ReceiptStatus>, LedgerError> {
        self.inner.receipts(hashes).await
    }

    async fn balances(&self, token: Address, wallet: Address) -> Result<Balances, LedgerError> {
        self.inner.check_running()?;
        let mut tx = self.inner.store.read().await.map_err(temporary)?;
        let ledger = tx.ledger();
        if ledger.token(&text(token)).await.map_err(temporary)?.is_none() {
            return Err(LedgerError::final_(format!("no token contract at {token}")));
        }
        let head = ledger.head().await.map_err(temporary)?.ok_or_else(|| corrupt("chain", "no head"))?;
        let rows = ledger.balances(&[(text(token), text(wallet))]).await.map_err(temporary)?;
        drop(tx);
        let (total, held) = match rows.first() {
            Some(row) => (parse_amount(&row.total)?, parse_amount(&row.held)?),
            None => (U256::ZERO, U256::ZERO),
        };
        Ok(Balances { total, available: total.saturating_sub(held), held, block_number: head.number })
    }
}
