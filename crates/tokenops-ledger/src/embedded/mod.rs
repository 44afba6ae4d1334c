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
//! - **One producer per store.** The mempool and the chain's head live in the producing
//!   process, so only one process may produce blocks on a store: `open` takes the store's
//!   [`PRODUCER_ROLE`] (`Store::exclusive`) and refuses while another process holds it (a
//!   deployment of several worker nodes needs the EVM ledger). Nodes that only serve the API
//!   open the chain as readers (`open_reader`: balances and the head, read from the store).
//!   Should a second producer write anyway (the role lost while the database was away), its
//!   block collides on the block number's primary key and is rolled back, and it stops.
//!
//! What it leaves out, because tokenops never sends it: gas accounting (fields are accepted
//! and ignored), native value, and contract calls other than the ledger port's (`approve`,
//! `transferFrom`). Such transactions are refused at `send` with a final error.

mod blocks;
mod execute;
mod ledger;
mod mempool;

use self::blocks::{load_or_init_chain, produce_blocks};
use self::execute::Action;
use self::mempool::{Admission, Mempool, PendingTransaction};
use crate::contract::{self, ContractCall};
use crate::nonces::Nonces;
use crate::port::{LedgerError, Outcome, ReceiptStatus, SignedTransaction, TokenInfo, TxHash};
use crate::transaction::{self, Fees, UnsignedTransaction};
use alloy::primitives::{Address, B256, Bytes, U256};
use alloy::sol_types::SolInterface;
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokenops_custody::Custody;
use tokenops_domain::{Clock, SystemClock};
use tokenops_store::{Exclusive, LedgerTransaction, Store, StoreError};
use tokio::sync::{Notify, watch};

/// The embedded chain's default id (ASCII "tok"); any value works as long as it stays the same
/// for a store.
pub const DEFAULT_CHAIN_ID: u64 = 0x746f6b;

/// The store role (`Store::exclusive`) of the process that produces the embedded chain's blocks.
pub const PRODUCER_ROLE: &str = "embedded-ledger-producer";
/// How long `open` waits for the producer role: a restarted process may find its predecessor's
/// hold still being let go (a connection the database has not seen close yet).
const PRODUCER_ROLE_WAIT: Duration = Duration::from_secs(5);
const PRODUCER_ROLE_RETRY: Duration = Duration::from_millis(200);

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
    /// The producer role, held while this process produces blocks; `None` for a reader, and
    /// once closed.
    producer: Mutex<Option<Exclusive>>,
    /// Opened by `open_reader`: reads the chain, never signs, sends or produces.
    reader: bool,
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
    /// `issuer_custody` signs its deployments. Refused (`Final`) while another process produces
    /// blocks on the store.
    pub async fn open(
        store: Arc<dyn Store>,
        issuer: Address,
        issuer_custody: Arc<dyn Custody>,
        config: EmbeddedConfig,
    ) -> Result<Self, LedgerError> {
        let producer = take_producer_role(store.as_ref()).await?;
        let lost = producer.lost();
        let ledger = Self::start(store, issuer, issuer_custody, config, Some(producer)).await?;
        let inner = Arc::downgrade(&ledger.inner);
        tokio::spawn(async move {
            lost.await;
            if let Some(inner) = inner.upgrade() {
                tracing::error!("another process took the embedded ledger's producer role; this one stops");
                inner.stopped.store(true, Ordering::SeqCst);
                inner.wake.notify_one();
            }
        });
        tokio::spawn(produce_blocks(
            Arc::downgrade(&ledger.inner),
            ledger.inner.wake.clone(),
            ledger.inner.config.block_interval,
        ));
        Ok(ledger)
    }

    /// Opens the chain for reading only, on a node that does not run the workers (role `api`):
    /// balances and the head come from the store, as the producing node writes them; signing,
    /// sending and deploying are refused (`Final`). Any number of readers may run beside the one
    /// producer.
    pub async fn open_reader(
        store: Arc<dyn Store>,
        issuer: Address,
        issuer_custody: Arc<dyn Custody>,
        config: EmbeddedConfig,
    ) -> Result<Self, LedgerError> {
        Self::start(store, issuer, issuer_custody, config, None).await
    }

    async fn start(
        store: Arc<dyn Store>,
        issuer: Address,
        issuer_custody: Arc<dyn Custody>,
        config: EmbeddedConfig,
        producer: Option<Exclusive>,
    ) -> Result<Self, LedgerError> {
        let head = load_or_init_chain(store.as_ref(), &config).await?;
        let (head_number, _) = watch::channel(head.number);
        let reader = producer.is_none();
        let inner = Arc::new(Inner {
            store,
            issuer,
            issuer_custody,
            nonces: Nonces::default(),
            mempool: Mutex::new(Mempool::default()),
            head: Mutex::new(head),
            head_number,
            wake: Arc::new(Notify::new()),
            producing: tokio::sync::Mutex::new(()),
            stopped: AtomicBool::new(false),
            resync: AtomicBool::new(false),
            tokens: Mutex::new(HashMap::new()),
            producer: Mutex::new(producer),
            reader,
            config,
        });
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
        // Another process (or this one, reopening) may produce from now on.
        drop(lock(&self.inner.producer).take());
    }
}

/// Takes the store's producer role, waiting [`PRODUCER_ROLE_WAIT`] for a holder that is going
/// away.
async fn take_producer_role(store: &dyn Store) -> Result<Exclusive, LedgerError> {
    let deadline = tokio::time::Instant::now() + PRODUCER_ROLE_WAIT;
    loop {
        if let Some(held) = store.exclusive(PRODUCER_ROLE).await.map_err(temporary)? {
            return Ok(held);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(LedgerError::final_(
                "another process produces the embedded ledger's blocks on this store: the embedded ledger \
                 runs its workers on one node only (nodes of role api read it); run several worker nodes \
                 with TOKENOPS_LEDGER=evm",
            ));
        }
        tokio::time::sleep(PRODUCER_ROLE_RETRY).await;
    }
}

/// Stops the producer task now rather than at its next tick (it holds only a weak reference).
impl Drop for EmbeddedLedger {
    fn drop(&mut self) {
        self.close();
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

    /// Refuses what only the producing process may do: signing (its nonce slots), sending (its
    /// mempool) and waiting for blocks.
    fn check_producer(&self) -> Result<(), LedgerError> {
        self.check_running()?;
        if self.reader {
            Err(LedgerError::final_(
                "this node reads the embedded ledger only (role api): the node running the workers signs and sends",
            ))
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
        self.check_producer()?;
        let mut slot = self.nonces.lock(sender).await;
        let mut nonce = match slot.next() {
            Some(nonce) => nonce,
            None => {
                let pending = self.pending_nonce(sender).await?;
                slot.fill(pending, [])
            }
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
        self.check_producer()?;
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
                    None => Err(LedgerError::superseded(decoded.nonce, decoded.sender)),
                }
            }
            // Other bytes wait with this nonce: once they are included these are superseded,
            // and should they be dropped, these may still go in.
            Admission::NonceTaken => Err(LedgerError::temporary(format!(
                "another transaction with nonce {} of {} is pending",
                decoded.nonce, decoded.sender
            ))),
            Admission::Full => Err(LedgerError::temporary("the embedded ledger's mempool is full")),
        }
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
