//! The one place the domain's ledger identifiers (`Address`, `TxHash`) and the ledger port's
//! (`tokenops_custody::{Address, B256}`) turn into each other: both are the same bytes.

use tokenops_custody::B256;
use tokenops_domain::chain::{Address, TxHash};

pub fn ledger_address(address: Address) -> tokenops_custody::Address {
    tokenops_custody::Address::from(address.to_bytes())
}

pub fn domain_address(address: tokenops_custody::Address) -> Address {
    Address::from_bytes(address.into_array())
}

pub fn ledger_hash(hash: TxHash) -> B256 {
    B256::from(hash.to_bytes())
}

pub fn domain_hash(hash: B256) -> TxHash {
    TxHash::from_bytes(hash.0)
}
