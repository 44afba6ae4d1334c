//! The ledger port: what the operation pipeline asks of a ledger, and what it gets back. Both
//! implementations ([`crate::EmbeddedLedger`], [`crate::EvmLedger`]) accept the same signed EVM
//! transactions, report the same hashes, block numbers and revert reasons, and are held to that
//! by one conformance suite (`tests/conformance.rs`).
//!
//! Submission is two steps, [`Ledger::sign`] then [`Ledger::send`] ([`Ledger::submit`] does
//! both): the pipeline stores the signed bytes between them, so that after an unknown outcome
//! (a timeout, a crash, a receipt that says `Unknown`) it sends **the same bytes** again instead
//! of signing the operation anew with another nonce, which could execute it twice. Sending the
//! same bytes twice is harmless on both ledgers: they have one hash and one nonce.

use alloy::primitives::{Address, B256, Bytes, U256};
use async_trait::async_trait;
use tokenops_custody::{Custody, CustodyError};

pub use alloy::primitives::TxHash;

/// One operation on a token contract. The sender (whose custody key signs) is named in the
/// call: the issuer for mint and burn (see [`Ledger::issuer`]), `from` for a transfer, the owner
/// for a hold, the actor for completing one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LedgerCall {
    /// `mint(to, amount)`, signed by the issuer.
    Mint { to: Address, amount: U256 },
    /// `burn(from, amount)`, signed by the issuer; only available (not held) funds.
    Burn { from: Address, amount: U256 },
    /// `transfer(to, amount)`, signed by `from`; only available funds.
    Transfer { from: Address, to: Address, amount: U256 },
    /// `hold(id, payee, amount, expiresAt)`, signed by the owner. `payee: None` executes back
    /// to the owner; `expires_at: None` never expires (EVM seconds otherwise).
    Hold { owner: Address, id: B256, payee: Option<Address>, amount: U256, expires_at: Option<u64> },
    /// `executeHold(id)`: the spec's RELEASE (pays the payee), by the owner or the issuer.
    ExecuteHold { actor: Address, id: B256 },
    /// `cancelHold(id)`: the spec's CANCEL (back to the owner's available balance), by the owner
    /// or the issuer, or by anyone once the hold has expired.
    CancelHold { actor: Address, id: B256 },
}

impl LedgerCall {
    /// The account that signs the transaction.
    pub fn sender(&self, issuer: Address) -> Address {
        match *self {
            LedgerCall::Mint { .. } | LedgerCall::Burn { .. } => issuer,
            LedgerCall::Transfer { from, .. } => from,
            LedgerCall::Hold { owner, .. } => owner,
            LedgerCall::ExecuteHold { actor, .. } | LedgerCall::CancelHold { actor, .. } => actor,
        }
    }
}

/// A token to deploy: one per currency, `decimals` equal to its minor unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    pub name: String,
    pub symbol: String,
    pub decimals: u8,
}

/// A deployed token as the ledger reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    pub address: Address,
    pub name: String,
    pub symbol: String,
    pub decimals: u8,
    /// The only account that may mint and burn.
    pub issuer: Address,
}

/// A transaction signed by custody, ready to send (and to send again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedTransaction {
    /// keccak-256 of `raw`: the hash every EVM node reports.
    pub hash: TxHash,
    /// The EIP-2718 encoding, signature included.
    pub raw: Bytes,
    pub sender: Address,
    pub nonce: u64,
}

/// How an included transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// The contract refused. `reason` is the decoded custom error's name (for example
    /// `InsufficientAvailableBalance`), `Panic` or `Error` for Solidity's built-in ones, the
    /// 4-byte selector in hex for an error the contract does not declare, and `Reverted` when
    /// the ledger gave no revert data. `data` is the raw revert data.
    Reverted {
        reason: String,
        data: Bytes,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReceiptStatus {
    /// The ledger holds the transaction but has not included it (or, on an EVM node with a
    /// confirmation depth, not deep enough yet).
    Pending,
    Included {
        block_number: u64,
        outcome: Outcome,
    },
    /// The ledger does not know the hash: never received, or dropped (the embedded ledger's
    /// mempool does not survive a restart). Send the same signed bytes again.
    Unknown,
}

/// A wallet's balances of one token, all read at `block_number`. `total = available + held`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balances {
    pub total: U256,
    pub available: U256,
    pub held: U256,
    pub block_number: u64,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum LedgerError {
    /// The ledger could not be reached or did not answer in time (or the embedded ledger's store
    /// failed): retry, with the same signed bytes if there are some.
    #[error("ledger temporarily unavailable: {reason}")]
    Temporary { reason: String },
    /// No answer at all from the node (no connection, or none in time): nothing can be learnt
    /// of the ledger until it answers, so a sent transaction's fate is unknown, not failed.
    /// Temporary, like [`LedgerError::Temporary`].
    #[error("ledger unreachable: {reason}")]
    Unreachable { reason: String },
    /// The request is invalid and will stay so (an unknown token, a malformed or wrongly signed
    /// transaction, a failed deployment).
    #[error("ledger refused: {reason}")]
    Final { reason: String },
    /// These signed bytes can never be included: another transaction of their sender is
    /// included with their nonce, and they are not. Nothing of them reached the ledger, so the
    /// call may be signed anew (with another nonce) without any risk of running twice.
    #[error("ledger refused: {reason}")]
    Superseded { reason: String },
    /// Another worker node signs for the sender now (it holds the wallet's signing lease):
    /// nothing was signed. Temporary, and no failure of the call: it goes to whichever node
    /// holds the wallet then.
    #[error("{reason}")]
    Elsewhere { reason: String },
    /// Custody did not sign: nothing reached the ledger. A refusal is the spec's
    /// `SIGNING_REJECTED`; an unavailable custody is temporary (see [`LedgerError::is_temporary`]).
    #[error("signing failed: {0}")]
    Signing(#[source] CustodyError),
}

impl LedgerError {
    pub fn temporary(reason: impl Into<String>) -> Self {
        LedgerError::Temporary { reason: reason.into() }
    }

    pub fn final_(reason: impl Into<String>) -> Self {
        LedgerError::Final { reason: reason.into() }
    }

    /// The bytes of `nonce` of `sender` lost it to another transaction that is included.
    pub fn superseded(nonce: u64, sender: Address) -> Self {
        LedgerError::Superseded { reason: format!("nonce {nonce} of {sender} is already used by another transaction") }
    }

    /// Another node holds `wallet`'s signing lease.
    pub fn elsewhere(wallet: Address) -> Self {
        LedgerError::Elsewhere { reason: format!("another node signs for {wallet} now") }
    }

    /// True when retrying may succeed: the ledger or custody was unavailable, or another node
    /// signed for the wallet.
    pub fn is_temporary(&self) -> bool {
        match self {
            LedgerError::Temporary { .. } | LedgerError::Unreachable { .. } | LedgerError::Elsewhere { .. } => true,
            LedgerError::Final { .. } | LedgerError::Superseded { .. } => false,
            LedgerError::Signing(error) => !error.is_refusal(),
        }
    }
}

/// A ledger holding token contracts.
#[async_trait]
pub trait Ledger: Send + Sync {
    /// The platform's issuer: the custody wallet that deploys tokens and signs mints and burns.
    fn issuer(&self) -> Address;

    /// Deploys a token contract (signed by the issuer) and waits, bounded, until it is included.
    async fn deploy_token(&self, spec: &TokenSpec) -> Result<Address, LedgerError>;

    /// The number of the ledger's latest block: a cheap probe that the ledger answers
    /// (readiness, and the last block seen in the metrics).
    async fn latest_block(&self) -> Result<u64, LedgerError>;

    /// Reads a token contract already on the ledger. `Final` when there is no token there.
    async fn adopt_token(&self, address: Address) -> Result<TokenInfo, LedgerError>;

    /// Prepares a custody wallet for use (on a dev EVM node: gives it gas). Idempotent.
    async fn register_wallet(&self, wallet: Address) -> Result<(), LedgerError>;

    /// Builds the call's transaction with the sender's next nonce and has custody sign it.
    /// Nothing reaches the ledger. The nonce is taken only when custody signs, so a refusal
    /// leaves no gap.
    async fn sign(
        &self,
        token: Address,
        call: &LedgerCall,
        custody: &dyn Custody,
    ) -> Result<SignedTransaction, LedgerError>;

    /// Hands the signed transaction to the ledger. Sending bytes the ledger already holds or
    /// has included answers their hash again.
    async fn send(&self, transaction: &SignedTransaction) -> Result<TxHash, LedgerError>;

    /// Gives back the nonce of a signed transaction that will never be sent (it was not
    /// recorded): the sender's next signature takes it, so the gap it would leave is filled
    /// instead of holding every later transaction of the wallet back.
    async fn abandon(&self, transaction: &SignedTransaction);

    /// The nonce of `sender` the ledger would include next: its count of the sender's
    /// transactions, included or waiting, up to the first nonce it holds no transaction for (a
    /// gap, when later ones wait).
    async fn next_nonce(&self, sender: Address) -> Result<u64, LedgerError>;

    /// Uses up `nonce` of `sender`, a gap no transaction will ever fill, with a transaction
    /// that moves nothing (a transfer of zero `token`s from the sender to itself), and sends it,
    /// so that the sender's later transactions can be included. `Ok(None)` when this ledger
    /// handed the nonce out less than `grace` ago: that signature may still be recorded and
    /// sent, and must not be made void.
    async fn fill_nonce_gap(
        &self,
        token: Address,
        sender: Address,
        nonce: u64,
        custody: &dyn Custody,
        grace: std::time::Duration,
    ) -> Result<Option<TxHash>, LedgerError>;

    /// `sign` then `send`.
    async fn submit(&self, token: Address, call: &LedgerCall, custody: &dyn Custody) -> Result<TxHash, LedgerError> {
        let transaction = self.sign(token, call, custody).await?;
        self.send(&transaction).await
    }

    async fn receipt(&self, hash: TxHash) -> Result<ReceiptStatus, LedgerError>;

    /// The receipts of several transactions, in the order of `hashes` (a ledger may read them
    /// together).
    async fn receipts(&self, hashes: &[TxHash]) -> Result<Vec<ReceiptStatus>, LedgerError> {
        let mut receipts = Vec::with_capacity(hashes.len());
        for hash in hashes {
            receipts.push(self.receipt(*hash).await?);
        }
        Ok(receipts)
    }

    async fn balances(&self, token: Address, wallet: Address) -> Result<Balances, LedgerError>;
}
