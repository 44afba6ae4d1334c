//! The ledger of tokenops: the [`Ledger`] port and its two implementations, which accept the
//! same signed EVM transactions and report the same hashes, blocks and revert reasons.
//!
//! - [`EmbeddedLedger`] (the default): an in-process chain with exactly the token contract's
//!   semantics, durable in the service's own store.
//! - [`EvmLedger`]: any EVM node over JSON-RPC (anvil in tests; Besu or similar in production).
//!
//! The token contract (`contracts/src/TokenopsToken.sol`, artifact in `contracts/` beside this
//! crate) is an ERC-20 with holds; [`contract`] holds its bindings. Custody (who signs) is the
//! port of `tokenops-custody`: the ledger builds each transaction and asks custody to sign its
//! hash, so a custody refusal never reaches the ledger.

pub mod contract;
mod embedded;
mod evm;
mod leases;
mod nonces;
pub mod port;
mod transaction;

pub use alloy::primitives::{Address, U256};
pub use embedded::{DEFAULT_CHAIN_ID, EmbeddedConfig, EmbeddedLedger};
pub use evm::{EvmConfig, EvmLedger, FeeMode, GasFunding};
pub use port::{
    Balances, Ledger, LedgerCall, LedgerError, Outcome, ReceiptStatus, SignedTransaction, TokenInfo, TokenSpec, TxHash,
};
