//! The ledger's settings: embedded or an EVM node (`TOKENOPS_LEDGER`), the node's URL,
//! confirmations and development gas, and the embedded ledger's block interval.

use super::sources::Reader;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerKind {
    Embedded,
    Evm,
}

pub(super) struct Ledger {
    pub kind: LedgerKind,
    pub evm_rpc_url: Option<String>,
    pub evm_confirmations: u64,
    pub evm_dev_gas: bool,
    pub block_interval: Duration,
}

pub(super) fn read(r: &mut Reader) -> Ledger {
    let kind = r.parse("TOKENOPS_LEDGER", LedgerKind::Embedded, "must be embedded or evm", |v| match v {
        "embedded" => Some(LedgerKind::Embedded),
        "evm" => Some(LedgerKind::Evm),
        _ => None,
    });
    let evm_rpc_url = r.text("TOKENOPS_EVM_RPC_URL");
    if kind == LedgerKind::Evm && evm_rpc_url.is_none() {
        r.problems.push("TOKENOPS_EVM_RPC_URL: required when TOKENOPS_LEDGER=evm".into());
    }
    let evm_confirmations = r.integer("TOKENOPS_EVM_CONFIRMATIONS", 0, 0, 1_000).unsigned_abs();
    let evm_dev_gas = r.parse("TOKENOPS_EVM_GAS_FUNDING", false, "must be none or dev", |v| match v {
        "none" => Some(false),
        "dev" => Some(true),
        _ => None,
    });
    let block_interval = r.millis("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS", 200, 1, 60_000);
    Ledger { kind, evm_rpc_url, evm_confirmations, evm_dev_gas, block_interval }
}

#[cfg(test)]
mod tests {
    use crate::config::tests::load;
    use crate::config::{CustodySettings, LedgerKind};
    use std::time::Duration;

    #[test]
    fn ledger_and_custody_settings() {
        let c = load(&[]).expect("valid");
        assert_eq!(c.ledger, LedgerKind::Embedded);
        assert_eq!(c.custody, CustodySettings::Embedded);
        assert_eq!(c.ledger_block_interval, Duration::from_millis(200));
        let c = load(&[
            ("TOKENOPS_LEDGER", "evm"),
            ("TOKENOPS_EVM_RPC_URL", "http://127.0.0.1:8545"),
            ("TOKENOPS_EVM_CONFIRMATIONS", "3"),
            ("TOKENOPS_EVM_GAS_FUNDING", "dev"),
            ("TOKENOPS_CUSTODY", "remote"),
            ("TOKENOPS_CUSTODY_URL", "https://signer.bank.example/"),
            ("TOKENOPS_CUSTODY_TOKEN", "t0ken-s3cret"),
        ])
        .expect("valid");
        assert_eq!((c.ledger, c.evm_confirmations, c.evm_dev_gas), (LedgerKind::Evm, 3, true));
        assert_eq!(
            c.custody,
            CustodySettings::Remote { url: "https://signer.bank.example".into(), token: Some("t0ken-s3cret".into()) }
        );
        assert!(!format!("{:?}", c.custody).contains("t0ken-s3cret"), "the signer's token is never printed");
        let e = load(&[
            ("TOKENOPS_CUSTODY", "remote"),
            ("TOKENOPS_EVM_GAS_FUNDING", "plenty"),
            ("TOKENOPS_LEDGER_BLOCK_INTERVAL_MS", "0"),
        ])
        .expect_err("invalid");
        for name in ["TOKENOPS_CUSTODY_URL", "TOKENOPS_EVM_GAS_FUNDING", "TOKENOPS_LEDGER_BLOCK_INTERVAL_MS"] {
            assert!(e.to_string().contains(name), "{name} missing from {e}");
        }
    }
}
