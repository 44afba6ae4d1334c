//! The EVM adapter: the ledger port over any EVM node's JSON-RPC (anvil in tests; Besu or
//! similar in production), through alloy's provider on the workspace's reqwest.
//!
//! - **Chain id** is read from the node at connect and written into every transaction.
//! - **Nonces** are the service's own (`nonces`): read from the node's pending count at a
//!   wallet's first use, then tracked locally, re-read after a send whose outcome is unknown.
//!   alloy's nonce and gas fillers are not used: they can leave a nonce gap after a failed
//!   estimate, and a gap stalls a wallet for good. The pending count stops at a gap (one a crash
//!   left), and transactions sent again after a restart may wait behind it: with the count, the
//!   nonces the wallet's transactions hold in the node's pool are read (`txpool_contentFrom` on
//!   geth and reth, `txpool_inspect` on anvil), and the wallet's signatures skip them. A node
//!   that shows neither (Besu, or geth without its `txpool` API) shows nothing, and then only the
//!   refusal at send below is left.
//! - **Several nodes** signing for the same wallets (worker nodes on one store): a node signs for
//!   a wallet only under its signing lease in the store (`leases`, set up by
//!   [`EvmLedger::with_signing_leases`]); a wallet another node holds is
//!   [`LedgerError::Elsewhere`]. Without leases (one node) nothing changes.
//! - **Gas** is estimated with a margin. When the estimate fails because the call would revert,
//!   the configured fallback limit is used, so the transaction still goes on chain and is
//!   included reverted, with a hash and a block, as the pipeline reports it.
//! - **Receipts**: one poll per [`Ledger::receipt`] call. A receipt counts as included once the
//!   head is `confirmations` blocks past it (0 for anvil). A reverted transaction's reason comes
//!   from replaying it with `eth_call` at its block: a receipt carries no revert data. The
//!   replay's custom error is decoded into its name. Waiting, as in `deploy_token`, is bounded by
//!   a timeout.
//! - **Errors**: no answer (connection refused, timeout, HTTP 5xx, a garbled body) is
//!   `Temporary`. The node refusing a transaction (invalid, or its nonce used by an included
//!   one) is `Final`. Its nonce held by another transaction still waiting in the node's pool is
//!   `Temporary` (see `EvmLedger::held_elsewhere`). Bytes the node already holds or has included
//!   answer their hash.

use crate::contract::{self, TokenopsToken as C};
use crate::leases::SigningLeases;
use crate::nonces::{Nonces, Slot};
use crate::port::{
    Balances, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, SignedTransaction, TokenInfo, TokenSpec, TxHash,
};
use crate::transaction::{self, Fees, UnsignedTransaction};
use alloy::eips::BlockId;
use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, Bytes, TxKind, U256};
use alloy::providers::{Provider, RootProvider};
use alloy::rpc::client::RpcClient;
use alloy::rpc::types::TransactionRequest;
use alloy::sol_types::SolCall;
use alloy::transports::{RpcError, TransportErrorKind};
use async_trait::async_trait;
use serde::de::IgnoredAny;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokenops_custody::Custody;

/// What transactions pay for gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeeMode {
    /// EIP-1559 fees estimated by the node (`eth_feeHistory`).
    Eip1559,
    /// Legacy EIP-155 transactions at a fixed gas price (0 on free-gas permissioned chains), or
    /// at the node's `eth_gasPrice` when `None`.
    Legacy { gas_price: Option<u128> },
}

/// How custody wallets get gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GasFunding {
    /// Wallets need none (free-gas chains) or are funded outside tokenops.
    None,
    /// Development nodes (anvil, Hardhat): `register_wallet` tops the wallet up to this balance
    /// with `anvil_setBalance`.
    DevSetBalance(U256),
}

#[derive(Debug, Clone)]
pub struct EvmConfig {
    /// The node's JSON-RPC URL.
    pub url: String,
    /// Bounds every JSON-RPC request, connection included.
    pub request_timeout: Duration,
    /// Blocks past a receipt's block before it counts as included (0 for anvil).
    pub confirmations: u64,
    pub fees: FeeMode,
    pub gas_funding: GasFunding,
    /// Added to every gas estimate, in percent.
    pub gas_margin_percent: u64,
    /// The gas limit of a call whose estimate fails (it would revert, and will be included
    /// reverted).
    pub fallback_gas_limit: u64,
    /// How long `deploy_token` waits for its receipt, and how often it polls.
    pub inclusion_timeout: Duration,
    pub poll_interval: Duration,
}

impl EvmConfig {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            request_timeout: Duration::from_secs(10),
            confirmations: 0,
            fees: FeeMode::Eip1559,
            gas_funding: GasFunding::None,
            gas_margin_percent: 25,
            fallback_gas_limit: 300_000,
            inclusion_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(200),
        }
    }
}

pub struct EvmLedger {
    provider: RootProvider,
    config: EvmConfig,
    /// Read from the node at connection, or at the first signature when the node did not
    /// answer then: the service starts (and serves reads) while its node is away.
    chain_id: tokio::sync::OnceCell<u64>,
    issuer: Address,
    issuer_custody: Arc<dyn Custody>,
    nonces: Nonces,
    /// Token contracts checked to be this contract.
    tokens: Mutex<HashSet<Address>>,
    /// Outcomes of included transactions already decoded (a reverted one costs a replay).
    outcomes: Mutex<HashMap<TxHash, (u64, Outcome)>>,
    /// How this node shows its pool, learnt at the first look.
    pool_api: Mutex<PoolApi>,
    /// Where other nodes may sign for the same wallets: who signs for each.
    leases: Option<SigningLeases>,
}

/// The `txpool` method the node answers. Nodes differ, and asking one that does not answer
/// costs a round trip at every slot filled, so the answer is remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PoolApi {
    Untried,
    /// geth, reth: one sender's transactions.
    ContentFrom,
    /// anvil (no `txpool_contentFrom`): a line per transaction of the whole pool.
    Inspect,
    /// Neither (Besu; geth without the `txpool` API exposed).
    Hidden,
}

/// A `txpool_*` answer: the executable transactions and those waiting behind a gap, keyed by
/// nonce (`txpool_contentFrom`) or by sender, then nonce (`txpool_inspect`).
#[derive(Debug, serde::Deserialize)]
struct Pool<T> {
    #[serde(default)]
    pending: HashMap<String, T>,
    #[serde(default)]
    queued: HashMap<String, T>,
}

impl<T> Pool<T> {
    fn entries(self) -> impl Iterator<Item = (String, T)> {
        self.pending.into_iter().chain(self.queued)
    }
}

impl Pool<IgnoredAny> {
    /// The nonces of a `txpool_contentFrom` answer.
    fn nonces(self) -> Vec<u64> {
        self.entries().filter_map(|(nonce, _)| pool_nonce(&nonce)).collect()
    }
}

impl Pool<HashMap<String, IgnoredAny>> {
    /// `sender`'s nonces in a `txpool_inspect` answer (geth checksums the senders, anvil does
    /// not: they are compared parsed).
    fn nonces_of(self, sender: Address) -> Vec<u64> {
        self.entries()
            .filter(|(from, _)| from.parse::<Address>().is_ok_and(|from| from == sender))
            .flat_map(|(_, nonces)| nonces.into_keys())
            .filter_map(|nonce| pool_nonce(&nonce))
            .collect()
    }
}

/// A pool answer's nonce key: decimal on geth and anvil, hex tolerated. Anything else is
/// skipped rather than failing the signature: the pool is read as a precaution.
fn pool_nonce(key: &str) -> Option<u64> {
    match key.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => key.parse().ok(),
    }
}

/// Whether the answer says that the node has no such method or does not serve it here:
/// JSON-RPC's -32601, Besu's -32604 "method not enabled", a provider's own wording, or a
/// gateway in front of the node refusing the request with an HTTP status that is no outage.
fn method_unavailable(error: &TransportError) -> bool {
    match error {
        RpcError::ErrorResp(payload) => {
            let message = payload.message.to_lowercase();
            matches!(payload.code, -32601 | -32604)
                || ["not found", "does not exist", "not available", "not supported", "unsupported", "not enabled"]
                    .iter()
                    .any(|phrase| message.contains(phrase))
        }
        RpcError::Transport(kind) => {
            kind.as_http_error().is_some_and(|http| matches!(http.status, 400 | 403 | 404 | 405 | 501))
        }
        _ => false,
    }
}

impl std::fmt::Debug for EvmLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvmLedger")
            .field("url", &self.config.url)
            .field("chain_id", &self.chain_id.get())
            .field("issuer", &self.issuer)
            .finish_non_exhaustive()
    }
}

type TransportError = RpcError<TransportErrorKind>;

/// No usable answer from the node: temporary. A JSON-RPC error answer to a read is temporary
/// too (a node that is syncing, or behind a load balancer, answers errors that pass); no answer
/// at all (no connection, a timeout) is the node unreachable.
fn temporary(what: &str, error: TransportError) -> LedgerError {
    let reason = format!("{what}: {error}");
    match &error {
        RpcError::Transport(kind) if kind.as_http_error().is_none() => LedgerError::Unreachable { reason },
        _ => LedgerError::temporary(reason),
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Installs rustls's ring provider unless one is installed (the workspace's reqwest has none of
/// its own; a client built without one panics).
fn ensure_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// The error message of a JSON-RPC error answer, lower-cased.
fn error_message(error: &TransportError) -> Option<String> {
    match error {
        RpcError::ErrorResp(payload) => Some(payload.message.to_lowercase()),
        _ => None,
    }
}

impl EvmLedger {
    /// Connects to the node and reads its chain id. `issuer` is the custody wallet that deploys
    /// tokens and signs mints and burns; `issuer_custody` signs its deployments.
    pub async fn connect(
        config: EvmConfig,
        issuer: Address,
        issuer_custody: Arc<dyn Custody>,
    ) -> Result<Self, LedgerError> {
        ensure_crypto_provider();
        let url: reqwest::Url =
            config.url.parse().map_err(|e| LedgerError::final_(format!("invalid EVM node URL: {e}")))?;
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout)
            .build()
            .map_err(|e| LedgerError::final_(format!("HTTP client: {e}")))?;
        let provider = RootProvider::new(RpcClient::new_http_with_client(client, url));
        let chain_id = match provider.get_chain_id().await {
            Ok(chain_id) => {
                tracing::info!(url = config.url, chain_id, "connected to the EVM node");
                tokio::sync::OnceCell::new_with(Some(chain_id))
            }
            Err(e) => {
                // What needs the node fails temporarily until it answers; everything else runs.
                tracing::warn!(url = config.url, error = %e, "the EVM node does not answer yet; starting without it");
                tokio::sync::OnceCell::new()
            }
        };
        Ok(Self {
            provider,
            config,
            chain_id,
            issuer,
            issuer_custody,
            nonces: Nonces::default(),
            tokens: Mutex::new(HashSet::new()),
            outcomes: Mutex::new(HashMap::new()),
            pool_api: Mutex::new(PoolApi::Untried),
            leases: None,
        })
    }

    /// Signs for a wallet only while this ledger holds the wallet's signing lease in `store`:
    /// for worker nodes that share the store and sign for the same wallets, so that no two of
    /// them hand out nonces for one wallet at the same time.
    pub fn with_signing_leases(mut self, store: Arc<dyn tokenops_store::Store>) -> Self {
        self.leases = Some(SigningLeases::new(store));
        self
    }

    /// Makes sure this node may sign for `wallet` now (its slot locked by the caller): holds the
    /// wallet's signing lease, and has the slot read anew if another node held it meanwhile.
    async fn lease(&self, wallet: Address, slot: &mut Slot) -> Result<(), LedgerError> {
        let Some(leases) = &self.leases else { return Ok(()) };
        match leases.hold(wallet).await? {
            Some(epoch) => {
                slot.lease(epoch);
                Ok(())
            }
            None => Err(LedgerError::elsewhere(wallet)),
        }
    }

    /// The node's chain id, asked for once it answers.
    pub async fn chain_id(&self) -> Result<u64, LedgerError> {
        let ask = || async { self.provider.get_chain_id().await.map_err(|e| temporary("eth_chainId", e)) };
        self.chain_id.get_or_try_init(ask).await.copied()
    }

    async fn fees(&self) -> Result<Fees, LedgerError> {
        Ok(match self.config.fees {
            FeeMode::Eip1559 => {
                let estimate = self.provider.estimate_eip1559_fees().await.map_err(|e| temporary("fee estimate", e))?;
                Fees::Eip1559 {
                    max_fee_per_gas: estimate.max_fee_per_gas,
                    max_priority_fee_per_gas: estimate.max_priority_fee_per_gas,
                }
            }
            FeeMode::Legacy { gas_price: Some(gas_price) } => Fees::Legacy { gas_price },
            FeeMode::Legacy { gas_price: None } => Fees::Legacy {
                gas_price: self.provider.get_gas_price().await.map_err(|e| temporary("eth_gasPrice", e))?,
            },
        })
    }

    /// The estimate plus the margin; the fallback when the call would revert.
    async fn gas_limit(
        &self,
        from: Address,
        to: Option<Address>,
        input: &Bytes,
        fallback: u64,
    ) -> Result<u64, LedgerError> {
        let mut request = TransactionRequest::default().with_from(from).with_input(input.clone());
        request.to = Some(to.map_or(TxKind::Create, TxKind::Call));
        match self.provider.estimate_gas(request).await {
            Ok(estimate) => Ok(estimate.saturating_add(estimate.saturating_mul(self.config.gas_margin_percent) / 100)),
            Err(RpcError::ErrorResp(payload)) => {
                tracing::debug!(message = %payload.message, "gas estimate failed; using the fallback limit");
                Ok(fallback)
            }
            Err(error) => Err(temporary("eth_estimateGas", error)),
        }
    }

    async fn sign(
        &self,
        to: Option<Address>,
        input: Bytes,
        sender: Address,
        fallback_gas: u64,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError> {
        if self.leases.as_ref().is_some_and(|leases| leases.known_elsewhere(sender)) {
            return Err(LedgerError::elsewhere(sender));
        }
        let gas_limit = self.gas_limit(sender, to, &input, fallback_gas).await?;
        let fees = self.fees().await?;
        // Before the wallet's nonce lock: the first read after the node was away may take long.
        let chain_id = self.chain_id().await?;
        let mut slot = self.nonces.lock(sender).await;
        self.lease(sender, &mut slot).await?;
        let nonce = match slot.next() {
            Some(nonce) => nonce,
            None => {
                let pending = self.pending_count(sender).await?;
                // Read after the count, so that a transaction of the wallet sent meanwhile
                // (an earlier signature) is seen in one or the other.
                let waiting = self.waiting_nonces(sender).await?;
                slot.fill(pending, waiting)
            }
        };
        let unsigned = UnsignedTransaction { chain_id, nonce, to, input, gas_limit, fees };
        let signed = transaction::sign(unsigned, sender, custody).await?;
        slot.take(nonce);
        Ok(signed)
    }

    /// The node's count of `sender`'s transactions, pending ones included (it stops at a gap).
    async fn pending_count(&self, sender: Address) -> Result<u64, LedgerError> {
        self.provider.get_transaction_count(sender).pending().await.map_err(|e| temporary("eth_getTransactionCount", e))
    }

    /// The nonces of `sender`'s transactions in the node's pool, executable or waiting behind a
    /// gap; none when the node does not show its pool. No answer at all is `Temporary`, as for
    /// the pending count read with it. An error answer other than "no such method" shows
    /// nothing this time and fails nothing: the pool is read as a precaution, for a gap that
    /// only a crash leaves, and refusing every first signature of every wallet because a node
    /// will not show it would stop the service.
    async fn waiting_nonces(&self, sender: Address) -> Result<Vec<u64>, LedgerError> {
        let remembered = *lock(&self.pool_api);
        let tries: &[PoolApi] = match remembered {
            PoolApi::Untried => &[PoolApi::ContentFrom, PoolApi::Inspect],
            PoolApi::Hidden => return Ok(Vec::new()),
            ref api => std::slice::from_ref(api),
        };
        for &api in tries {
            let answer = match api {
                PoolApi::ContentFrom => self
                    .provider
                    .raw_request::<_, Pool<IgnoredAny>>("txpool_contentFrom".into(), (sender,))
                    .await
                    .map(Pool::nonces),
                PoolApi::Inspect => self
                    .provider
                    .raw_request::<_, Pool<HashMap<String, IgnoredAny>>>("txpool_inspect".into(), ())
                    .await
                    .map(|pool| pool.nonces_of(sender)),
                PoolApi::Untried | PoolApi::Hidden => Ok(Vec::new()),
            };
            match answer {
                Ok(nonces) => {
                    *lock(&self.pool_api) = api;
                    return Ok(nonces);
                }
                Err(error) if method_unavailable(&error) => {
                    tracing::debug!(?api, %error, "the node does not answer this txpool method");
                }
                Err(error @ (RpcError::ErrorResp(_) | RpcError::DeserError { .. } | RpcError::NullResp)) => {
                    tracing::warn!(?api, %error, "could not read the node's pool; nonces held there are not skipped");
                    return Ok(Vec::new());
                }
                Err(error) => return Err(temporary("txpool", error)),
            }
        }
        tracing::info!(
            url = self.config.url,
            "the node does not show its pool: nonces held by transactions waiting there are not skipped"
        );
        *lock(&self.pool_api) = PoolApi::Hidden;
        Ok(Vec::new())
    }

    /// `transaction`'s nonce is held by another transaction waiting in the node's pool: neither
    /// is included yet, and the chain will include one of them. `Temporary`, not `Final`: the
    /// pipeline never signs a recorded operation again, so these bytes are its only way onto
    /// the ledger, and the waiting one may still leave the pool (evicted, or lost in a node's
    /// restart) and let them in. Failing the operation for good now would report a failure
    /// the ledger has not decided. Sending the same bytes again is harmless and bounded by the
    /// pipeline's retries: once the other is included, the answer is "nonce too low" with
    /// bytes the node does not know, which is `Final`. The slot is counted again, as after "nonce
    /// too low": it handed out a nonce the node holds, and re-reading the count and the pool
    /// moves it up to the next free one (on a node that hides its pool, the count past the
    /// waiting run once the gap under it is filled).
    async fn held_elsewhere(&self, transaction: &SignedTransaction, message: &str) -> LedgerError {
        self.nonces.recount(transaction.sender).await;
        LedgerError::temporary(format!(
            "nonce {} of {} is held by another transaction waiting in the node's pool: {message}",
            transaction.nonce, transaction.sender
        ))
    }

    /// Whether the node holds or has included these very bytes.
    async fn knows(&self, hash: TxHash) -> Result<bool, LedgerError> {
        let known =
            self.provider.get_transaction_by_hash(hash).await.map_err(|e| temporary("eth_getTransactionByHash", e))?;
        Ok(known.is_some())
    }

    /// Checks that `address` holds this token contract: its runtime code equals the artifact's
    /// with the immutables (issuer, decimals) zeroed.
    async fn check_token(&self, address: Address) -> Result<(), LedgerError> {
        if lock(&self.tokens).contains(&address) {
            return Ok(());
        }
        let code = self.provider.get_code_at(address).await.map_err(|e| temporary("eth_getCode", e))?;
        if code.is_empty() {
            return Err(LedgerError::final_(format!("no token contract at {address}")));
        }
        if !contract::is_token_runtime_code(&code) {
            return Err(LedgerError::final_(format!("the contract at {address} is not the tokenops token")));
        }
        lock(&self.tokens).insert(address);
        Ok(())
    }

    /// `eth_call` of a view at `block`.
    async fn view<T: SolCall>(&self, token: Address, call: T, block: Option<u64>) -> Result<T::Return, LedgerError> {
        let request = TransactionRequest::default().with_to(token).with_input(call.abi_encode());
        let mut pending = self.provider.call(request);
        if let Some(number) = block {
            pending = pending.block(BlockId::number(number));
        }
        let output = pending.await.map_err(|e| temporary("eth_call", e))?;
        T::abi_decode_returns(&output)
            .map_err(|e| LedgerError::final_(format!("{token} did not answer as the token contract: {e}")))
    }

    /// The revert data of an included transaction, by replaying it at its block.
    async fn revert_data(&self, hash: TxHash, block: u64) -> Result<Bytes, LedgerError> {
        let Some(tx) =
            self.provider.get_transaction_by_hash(hash).await.map_err(|e| temporary("eth_getTransactionByHash", e))?
        else {
            return Ok(Bytes::new());
        };
        use alloy::consensus::Transaction as _;
        let mut request = TransactionRequest::default()
            .with_from(tx.inner.signer())
            .with_input(tx.input().clone())
            .with_gas_limit(tx.gas_limit())
            .with_value(tx.value());
        request.to = Some(tx.kind());
        match self.provider.call(request).block(BlockId::number(block)).await {
            // The replay succeeded: the state that made it revert is gone.
            Ok(_) => Ok(Bytes::new()),
            Err(RpcError::ErrorResp(payload)) => Ok(payload.as_revert_data().unwrap_or_default()),
            Err(error) => Err(temporary("eth_call (replay)", error)),
        }
    }

    /// Waits (bounded) for a transaction's inclusion, polling.
    async fn wait_for_inclusion(&self, hash: TxHash) -> Result<(u64, Outcome), LedgerError> {
        let deadline = tokio::time::Instant::now() + self.config.inclusion_timeout;
        loop {
            if let ReceiptStatus::Included { block_number, outcome } = self.receipt(hash).await? {
                return Ok((block_number, outcome));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LedgerError::temporary(format!("transaction {hash} not included in time")));
            }
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}

#[async_trait]
impl Ledger for EvmLedger {
    fn issuer(&self) -> Address {
        self.issuer
    }

    async fn latest_block(&self) -> Result<u64, LedgerError> {
        self.provider.get_block_number().await.map_err(|e| temporary("eth_blockNumber", e))
    }

    async fn deploy_token(&self, spec: &TokenSpec) -> Result<Address, LedgerError> {
        self.register_wallet(self.issuer).await?;
        let input = contract::deployment_input(spec, self.issuer);
        let signed = self.sign(None, input, self.issuer, 5_000_000, self.issuer_custody.as_ref()).await?;
        if let Err(e) = self.send(&signed).await {
            // Nothing records these bytes to send again: bytes the node does not hold give their
            // nonce back, or the deployment tried again would wait behind the gap for good.
            if matches!(self.knows(signed.hash).await, Ok(false)) {
                self.nonces.give_back(signed.sender, signed.nonce).await;
            }
            return Err(e);
        }
        let (_, outcome) = self.wait_for_inclusion(signed.hash).await?;
        match outcome {
            Outcome::Success => {
                let address = self.issuer.create(signed.nonce);
                lock(&self.tokens).insert(address);
                tracing::info!(%address, symbol = spec.symbol, "deployed a token on the EVM node");
                Ok(address)
            }
            Outcome::Reverted { reason, .. } => Err(LedgerError::final_(format!("the deployment reverted: {reason}"))),
        }
    }

    async fn adopt_token(&self, address: Address) -> Result<TokenInfo, LedgerError> {
        self.check_token(address).await?;
        let block = self.provider.get_block_number().await.map_err(|e| temporary("eth_blockNumber", e))?;
        let (name, symbol, decimals, issuer) = tokio::try_join!(
            self.view(address, C::nameCall {}, Some(block)),
            self.view(address, C::symbolCall {}, Some(block)),
            self.view(address, C::decimalsCall {}, Some(block)),
            self.view(address, C::issuerCall {}, Some(block)),
        )?;
        Ok(TokenInfo { address, name, symbol, decimals, issuer })
    }

    async fn register_wallet(&self, wallet: Address) -> Result<(), LedgerError> {
        match self.config.gas_funding {
            GasFunding::None => Ok(()),
            GasFunding::DevSetBalance(amount) => {
                let balance = self.provider.get_balance(wallet).await.map_err(|e| temporary("eth_getBalance", e))?;
                if balance < amount {
                    self.provider
                        .raw_request::<_, serde_json::Value>("anvil_setBalance".into(), (wallet, amount))
                        .await
                        .map_err(|e| temporary("anvil_setBalance", e))?;
                }
                Ok(())
            }
        }
    }

    async fn sign(
        &self,
        token: Address,
        call: &LedgerCall,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError> {
        self.check_token(token).await?;
        let sender = call.sender(self.issuer);
        let fallback = self.config.fallback_gas_limit;
        EvmLedger::sign(self, Some(token), contract::calldata(call), sender, fallback, custody).await
    }

    async fn send(&self, transaction: &SignedTransaction) -> Result<TxHash, LedgerError> {
        let error = match self.provider.send_raw_transaction(&transaction.raw).await {
            Ok(pending) => return Ok(*pending.tx_hash()),
            Err(error) => error,
        };
        let Some(message) = error_message(&error) else {
            // The outcome is unknown: the node may hold the transaction or not. The wallet's
            // count is read from the node again (it may be ahead); the nonce stays these bytes'.
            self.nonces.recount(transaction.sender).await;
            return Err(temporary("eth_sendRawTransaction", error));
        };
        if message.contains("already known")
            || message.contains("already imported")
            || message.contains("known transaction")
        {
            // geth and anvil answer so only for these very bytes; a node that answered so for
            // other bytes with this nonce would leave the operation tracking a hash that never
            // comes. Only a resend pays for the look.
            if self.knows(transaction.hash).await? {
                return Ok(transaction.hash);
            }
            return Err(self.held_elsewhere(transaction, &message).await);
        }
        if message.contains("nonce too low") || message.contains("nonce is too low") {
            // Sending included bytes again answers their hash; other bytes with a used nonce can
            // never be included.
            let known = self.knows(transaction.hash).await?;
            self.nonces.recount(transaction.sender).await;
            if known {
                return Ok(transaction.hash);
            }
            return Err(LedgerError::superseded(transaction.nonce, transaction.sender));
        }
        // "replacement transaction underpriced" on geth and anvil; other nodes word it with
        // "replace" too. (A plain "transaction underpriced" is the pool's minimum fee: final.)
        if message.contains("replace") {
            return Err(self.held_elsewhere(transaction, &message).await);
        }
        if message.contains("txpool is full") || message.contains("limit exceeded") || message.contains("busy") {
            self.nonces.recount(transaction.sender).await;
            return Err(LedgerError::temporary(format!("the node refused for now: {message}")));
        }
        Err(LedgerError::final_(format!("the node refused the transaction: {message}")))
    }

    async fn abandon(&self, transaction: &SignedTransaction) {
        self.nonces.give_back(transaction.sender, transaction.nonce).await;
    }

    async fn next_nonce(&self, sender: Address) -> Result<u64, LedgerError> {
        self.pending_count(sender).await
    }

    async fn fill_nonce_gap(
        &self,
        token: Address,
        sender: Address,
        nonce: u64,
        custody: &dyn Custody,
        grace: Duration,
    ) -> Result<Option<TxHash>, LedgerError> {
        self.check_token(token).await?;
        let input = contract::calldata(&LedgerCall::Transfer { from: sender, to: sender, amount: U256::ZERO });
        let gas_limit = self.gas_limit(sender, Some(token), &input, self.config.fallback_gas_limit).await?;
        let fees = self.fees().await?;
        let chain_id = self.chain_id().await?;
        let Some(mut claim) = self.nonces.claim_gap(sender, nonce, grace).await else { return Ok(None) };
        // Another node signs for the wallet: it may be handing the nonce out right now.
        match self.lease(sender, claim.slot()).await {
            Err(LedgerError::Elsewhere { .. }) => return Ok(None),
            other => other?,
        }
        // Under the slot's lock: still the gap, not filled meanwhile.
        if self.pending_count(sender).await? != nonce {
            return Ok(None);
        }
        let unsigned = UnsignedTransaction { chain_id, nonce, to: Some(token), input, gas_limit, fees };
        let signed = transaction::sign(unsigned, sender, custody).await?;
        // Sent under the slot's lock: a signature of the wallet that read the node's count
        // before the filler is in its pool would take the same nonce. (`send` itself may
        // recount the slot, which needs the lock: the node is asked directly here.)
        let sent = self.provider.send_raw_transaction(&signed.raw).await.map(|pending| *pending.tx_hash());
        claim.filled();
        match sent {
            Ok(hash) => Ok(Some(hash)),
            // A refusal or no answer: the gap may still be there, and the next sweep looks again.
            Err(error) => Err(temporary("eth_sendRawTransaction", error)),
        }
    }

    async fn receipt(&self, hash: TxHash) -> Result<ReceiptStatus, LedgerError> {
        if let Some((block_number, outcome)) = lock(&self.outcomes).get(&hash).cloned() {
            return Ok(ReceiptStatus::Included { block_number, outcome });
        }
        let receipt =
            self.provider.get_transaction_receipt(hash).await.map_err(|e| temporary("eth_getTransactionReceipt", e))?;
        let Some(receipt) = receipt else {
            let known = self
                .provider
                .get_transaction_by_hash(hash)
                .await
                .map_err(|e| temporary("eth_getTransactionByHash", e))?;
            return Ok(if known.is_some() { ReceiptStatus::Pending } else { ReceiptStatus::Unknown });
        };
        let Some(block_number) = receipt.block_number else { return Ok(ReceiptStatus::Pending) };
        if self.config.confirmations > 0 {
            let head = self.provider.get_block_number().await.map_err(|e| temporary("eth_blockNumber", e))?;
            if head.saturating_sub(block_number) < self.config.confirmations {
                return Ok(ReceiptStatus::Pending);
            }
        }
        let outcome = if receipt.status() {
            Outcome::Success
        } else {
            let data = self.revert_data(hash, block_number).await?;
            Outcome::Reverted { reason: contract::revert_reason(&data), data }
        };
        lock(&self.outcomes).insert(hash, (block_number, outcome.clone()));
        Ok(ReceiptStatus::Included { block_number, outcome })
    }

    async fn balances(&self, token: Address, wallet: Address) -> Result<Balances, LedgerError> {
        self.check_token(token).await?;
        let block = self.provider.get_block_number().await.map_err(|e| temporary("eth_blockNumber", e))?;
        let (total, available, held) = tokio::try_join!(
            self.view(token, C::balanceOfCall { account: wallet }, Some(block)),
            self.view(token, C::availableBalanceOfCall { account: wallet }, Some(block)),
            self.view(token, C::heldBalanceOfCall { account: wallet }, Some(block)),
        )?;
        Ok(Balances { total, available, held, block_number: block })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_senders_nonces_are_read_from_either_pool_answer() {
        // geth's `txpool_contentFrom`: nonce keys, decimal.
        let answer = serde_json::json!({
            "pending": { "7": { "nonce": "0x7" } },
            "queued": { "9": { "nonce": "0x9" }, "0xa": {}, "eleven": {} }
        });
        let mut nonces = serde_json::from_value::<Pool<IgnoredAny>>(answer).expect("contentFrom").nonces();
        nonces.sort_unstable();
        assert_eq!(nonces, [7, 9, 10]);

        // `txpool_inspect`: senders (checksummed on geth, lower-case on anvil), then nonces.
        let sender: Address = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266".parse().expect("address");
        let answer = serde_json::json!({
            "pending": { "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266": { "3": "a summary" } },
            "queued": {
                "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266": { "5": "a summary", "6": "a summary" },
                "0x70997970c51812dc3a010c7d01b50e0d17dc79c8": { "4": "another sender's" }
            }
        });
        let mut nonces =
            serde_json::from_value::<Pool<HashMap<String, IgnoredAny>>>(answer).expect("inspect").nonces_of(sender);
        nonces.sort_unstable();
        assert_eq!(nonces, [3, 5, 6]);

        let empty = serde_json::from_value::<Pool<IgnoredAny>>(serde_json::json!({})).expect("no transactions");
        assert!(empty.nonces().is_empty());
    }
}
