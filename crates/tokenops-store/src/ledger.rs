//! The embedded ledger's persistence: its chain (blocks, transactions with their receipts) and
//! its state (token deployments, balances, holds, account nonces). The ledger produces one block
//! per store transaction and writes everything the block changed with one
//! [`LedgerStore::append_block`] call, so its throughput is bounded by block size, not by one
//! commit per transfer.
//!
//! Values are plain text so that this crate needs no EVM types: addresses, hashes and hold ids
//! are `0x`-prefixed lower-case hex; amounts are the decimal text of a `uint256` (never a float,
//! never a bounded integer column); block timestamps are EVM seconds. The ledger is platform
//! state, not tenant-scoped: tenants reach it through their accounts' wallets.
//!
//! Beside it, for an EVM ledger shared by several worker nodes, the wallets' signing leases:
//! which node hands out each wallet's nonces ([`LedgerStore::take_signing_leases`]).

use async_trait::async_trait;
use tokenops_domain::Timestamp;

use crate::StoreResult;

/// A produced block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerBlock {
    pub number: u64,
    pub hash: String,
    pub parent_hash: String,
    /// EVM block time: seconds since the Unix epoch, from the ledger's clock.
    pub timestamp: u64,
    pub transaction_count: u32,
    /// When the block was written (wall-clock microseconds), for operators.
    pub produced_at: Timestamp,
}

/// An included transaction and its receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerTransaction {
    /// keccak-256 of `raw`.
    pub hash: String,
    pub block_number: u64,
    /// Position in the block.
    pub index: u32,
    /// The signer recovered from the signature.
    pub sender: String,
    pub nonce: u64,
    /// The called contract; `None` for a deployment.
    pub to: Option<String>,
    /// The signed transaction exactly as submitted (EIP-2718 encoding).
    pub raw: Vec<u8>,
    pub success: bool,
    /// The decoded custom error name of a reverted transaction (for example
    /// `InsufficientAvailableBalance`).
    pub revert_reason: Option<String>,
    /// The ABI-encoded revert data (selector and arguments).
    pub revert_data: Option<Vec<u8>>,
    /// The deployed contract's address, for a successful deployment.
    pub contract_address: Option<String>,
}

/// A deployed token contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerToken {
    pub address: String,
    pub name: String,
    pub symbol: String,
    pub decimals: u8,
    /// The only account allowed to mint and burn.
    pub issuer: String,
    /// Decimal text of the `uint256` supply (mint checks it for overflow, as the contract does).
    pub total_supply: String,
    pub deploy_transaction: String,
    pub block_number: u64,
}

/// One wallet's balance of one token. `total` includes `held`; available = total − held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerBalance {
    pub token: String,
    pub wallet: String,
    pub total: String,
    pub held: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerHoldStatus {
    Active,
    Executed,
    Cancelled,
}

impl LedgerHoldStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerHoldStatus::Active => "ACTIVE",
            LedgerHoldStatus::Executed => "EXECUTED",
            LedgerHoldStatus::Cancelled => "CANCELLED",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "ACTIVE" => Some(LedgerHoldStatus::Active),
            "EXECUTED" => Some(LedgerHoldStatus::Executed),
            "CANCELLED" => Some(LedgerHoldStatus::Cancelled),
            _ => None,
        }
    }
}

/// A hold of one token, identified by its 32-byte id within that token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerHold {
    pub token: String,
    pub id: String,
    pub owner: String,
    pub payee: Option<String>,
    pub amount: String,
    /// EVM seconds; 0 = never expires.
    pub expires_at: u64,
    pub status: LedgerHoldStatus,
}

/// The next nonce of an account (the count of its included transactions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerNonce {
    pub address: String,
    pub nonce: u64,
}

/// Everything one block changes. State rows are the new values (upserts); `tokens` holds new
/// deployments and tokens whose supply changed.
#[derive(Debug, Clone, Copy)]
pub struct LedgerBlockChanges<'a> {
    pub block: &'a LedgerBlock,
    pub transactions: &'a [LedgerTransaction],
    pub tokens: &'a [LedgerToken],
    pub balances: &'a [LedgerBalance],
    pub holds: &'a [LedgerHold],
    pub nonces: &'a [LedgerNonce],
}

#[async_trait]
pub trait LedgerStore: Send {
    /// The chain id and genesis were recorded by `init_chain`; `None` on a fresh store.
    async fn chain_id(&mut self) -> StoreResult<Option<u64>>;
    /// Records the chain id and the genesis block (number 0); `StoreError::Conflict` when the
    /// chain exists.
    async fn init_chain(&mut self, chain_id: u64, genesis: &LedgerBlock) -> StoreResult<()>;
    /// The block with the highest number.
    async fn head(&mut self) -> StoreResult<Option<LedgerBlock>>;
    async fn block(&mut self, number: u64) -> StoreResult<Option<LedgerBlock>>;
    /// Writes a block with its transactions and state changes. The block goes first, so a
    /// second producer writing the same number fails with `StoreError::Conflict` before it
    /// changes anything (the caller then rolls back).
    async fn append_block(&mut self, changes: LedgerBlockChanges<'_>) -> StoreResult<()>;
    async fn transaction(&mut self, hash: &str) -> StoreResult<Option<LedgerTransaction>>;
    async fn token(&mut self, address: &str) -> StoreResult<Option<LedgerToken>>;
    /// The stored balances of the (token, wallet) pairs; a pair without a row has none (zero).
    async fn balances(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerBalance>>;
    /// The stored holds of the (token, id) pairs; a pair without a row is unknown.
    async fn holds(&mut self, keys: &[(String, String)]) -> StoreResult<Vec<LedgerHold>>;
    /// The stored nonces of the addresses; an address without a row has nonce 0.
    async fn nonces(&mut self, addresses: &[String]) -> StoreResult<Vec<LedgerNonce>>;
    /// Takes or keeps for `node` the signing lease of each of `wallets` that no other node
    /// holds unexpired, until `lease_ms` past the store's own clock (one clock for every node,
    /// whatever theirs say). Answers the wallets `node` holds now, each with its lease's epoch:
    /// the epoch goes up whenever a lease changes hands, and stays while one node keeps it
    /// (a lapse nobody took included), so a node can tell whether another signed meanwhile.
    async fn take_signing_leases(
        &mut self,
        node: &str,
        wallets: &[String],
        lease_ms: u64,
    ) -> StoreResult<Vec<(String, u64)>>;
}
