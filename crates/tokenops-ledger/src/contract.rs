//! The token contract as the ledgers see it: the ABI bindings generated from the compiled
//! artifact (`contracts/TokenopsToken.json`, built from `contracts/src/TokenopsToken.sol`, see
//! `contracts/README.md`), the calldata of each [`LedgerCall`], the deployment's input, and the
//! decoding of revert data into the contract's error names.
//!
//! Generating the bindings from the artifact (not from a hand-written interface) means that a
//! contract change the Rust side has not caught up with fails to compile here instead of
//! producing calls the contract does not have.

use crate::port::{LedgerCall, TokenSpec};
use alloy::primitives::{Address, Bytes, U256};
use alloy::sol_types::{SolCall, SolConstructor, SolError, SolType, sol_data};
use std::collections::HashMap;
use std::sync::LazyLock;

alloy::sol!(
    #[derive(Debug, PartialEq, Eq)]
    TokenopsToken,
    "contracts/TokenopsToken.json"
);

pub use TokenopsToken::TokenopsTokenCalls as ContractCall;

/// The artifact, for its error selectors (the names revert data decodes to).
const ARTIFACT: &str = include_str!("../contracts/TokenopsToken.json");

/// Solidity's built-in `Error(string)` and `Panic(uint256)` selectors.
const ERROR_SELECTOR: [u8; 4] = [0x08, 0xc3, 0x79, 0xa0];
const PANIC_SELECTOR: [u8; 4] = [0x4e, 0x48, 0x7b, 0x71];

/// The reason reported for a revert without data (for example out of gas).
pub const REVERTED_WITHOUT_DATA: &str = "Reverted";

/// Error name by selector, from the artifact's `errorSelectors` (`"Unauthorized(address)":
/// "0x8e4a23d6"`).
static ERROR_NAMES: LazyLock<HashMap<[u8; 4], String>> = LazyLock::new(|| {
    let mut names = HashMap::new();
    let artifact: serde_json::Value = serde_json::from_str(ARTIFACT).unwrap_or_default();
    if let Some(selectors) = artifact["errorSelectors"].as_object() {
        for (signature, selector) in selectors {
            let name = signature.split('(').next().unwrap_or(signature);
            let mut bytes = [0u8; 4];
            if let Some(hex) = selector.as_str().and_then(|s| s.strip_prefix("0x"))
                && alloy::hex::decode_to_slice(hex, &mut bytes).is_ok()
            {
                names.insert(bytes, name.to_owned());
            }
        }
    }
    names
});

/// The name of the error in revert data: the contract's custom error, `Error` or `Panic`, the
/// selector in hex for an undeclared one, [`REVERTED_WITHOUT_DATA`] for none.
pub fn revert_reason(data: &[u8]) -> String {
    let Some(selector) = data.get(..4).and_then(|s| <[u8; 4]>::try_from(s).ok()) else {
        return REVERTED_WITHOUT_DATA.to_owned();
    };
    match selector {
        ERROR_SELECTOR => "Error".to_owned(),
        PANIC_SELECTOR => "Panic".to_owned(),
        selector => {
            ERROR_NAMES.get(&selector).cloned().unwrap_or_else(|| format!("0x{}", alloy::hex::encode(selector)))
        }
    }
}

/// The calldata of a call.
pub fn calldata(call: &LedgerCall) -> Bytes {
    let encoded = match *call {
        LedgerCall::Mint { to, amount } => TokenopsToken::mintCall { to, amount }.abi_encode(),
        LedgerCall::Burn { from, amount } => TokenopsToken::burnCall { from, amount }.abi_encode(),
        LedgerCall::Transfer { to, amount, .. } => TokenopsToken::transferCall { to, value: amount }.abi_encode(),
        LedgerCall::Hold { id, payee, amount, expires_at, .. } => TokenopsToken::holdCall {
            id,
            payee: payee.unwrap_or(Address::ZERO),
            amount,
            expiresAt: expires_at.unwrap_or(0),
        }
        .abi_encode(),
        LedgerCall::ExecuteHold { id, .. } => TokenopsToken::executeHoldCall { id }.abi_encode(),
        LedgerCall::CancelHold { id, .. } => TokenopsToken::cancelHoldCall { id }.abi_encode(),
    };
    encoded.into()
}

/// The creation code of the contract.
pub fn creation_code() -> &'static [u8] {
    &TokenopsToken::BYTECODE
}

/// The input of a deployment transaction: creation code then the ABI-encoded constructor
/// arguments.
pub fn deployment_input(spec: &TokenSpec, issuer: Address) -> Bytes {
    let mut input = creation_code().to_vec();
    input.extend_from_slice(
        &TokenopsToken::constructorCall {
            name_: spec.name.clone(),
            symbol_: spec.symbol.clone(),
            decimals_: spec.decimals,
            issuer_: issuer,
        }
        .abi_encode(),
    );
    input.into()
}

/// The constructor arguments of a deployment input, or `None` when the input does not deploy
/// this contract.
pub fn decode_deployment(input: &[u8]) -> Option<(TokenSpec, Address)> {
    let arguments = input.strip_prefix(creation_code())?;
    type Arguments = (sol_data::String, sol_data::String, sol_data::Uint<8>, sol_data::Address);
    let (name, symbol, decimals, issuer) = Arguments::abi_decode_params(arguments).ok()?;
    Some((TokenSpec { name, symbol, decimals }, issuer))
}

/// The artifact's runtime code and where the constructor writes the immutables into it
/// (start, length).
struct RuntimeCode {
    code: Vec<u8>,
    immutables: Vec<(usize, usize)>,
}

static RUNTIME: LazyLock<RuntimeCode> = LazyLock::new(|| {
    let artifact: serde_json::Value = serde_json::from_str(ARTIFACT).unwrap_or_default();
    let code = artifact["deployedBytecode"].as_str().and_then(|c| alloy::hex::decode(c).ok()).unwrap_or_default();
    let mut ranges = Vec::new();
    if let Some(references) = artifact["immutableReferences"].as_object() {
        for places in references.values() {
            for place in places.as_array().into_iter().flatten() {
                if let (Some(start), Some(length)) = (place["start"].as_u64(), place["length"].as_u64()) {
                    ranges.push((start as usize, length as usize));
                }
            }
        }
    }
    RuntimeCode { code, immutables: ranges }
});

/// True when `code` (from `eth_getCode`) is this contract's runtime code: equal to the
/// artifact's once the immutables (issuer, decimals) are zeroed.
pub fn is_token_runtime_code(code: &[u8]) -> bool {
    let RuntimeCode { code: expected, immutables } = &*RUNTIME;
    if expected.is_empty() || code.len() != expected.len() {
        return false;
    }
    let mut code = code.to_vec();
    for &(start, length) in immutables {
        if let Some(bytes) = code.get_mut(start..start.saturating_add(length)) {
            bytes.fill(0);
        }
    }
    code == *expected
}

/// Revert data of a custom error (selector and arguments).
pub fn revert_data(error: impl SolError) -> Bytes {
    error.abi_encode().into()
}

/// Revert data of Solidity's `Panic(code)` (0x11: arithmetic overflow).
pub fn panic_data(code: u64) -> Bytes {
    alloy::sol_types::Panic { code: U256::from(code) }.abi_encode().into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::B256;
    use alloy::sol_types::SolInterface;

    #[test]
    fn every_custom_error_of_the_artifact_decodes_to_its_name() {
        assert!(ERROR_NAMES.len() >= 8, "the artifact's error selectors are read");
        let data = revert_data(TokenopsToken::InsufficientAvailableBalance {
            account: Address::repeat_byte(1),
            available: U256::from(5),
            needed: U256::from(7),
        });
        assert_eq!(revert_reason(&data), "InsufficientAvailableBalance");
        assert_eq!(
            revert_reason(&revert_data(TokenopsToken::HoldNotActive { id: B256::ZERO, status: 2 })),
            "HoldNotActive"
        );
        assert_eq!(revert_reason(&revert_data(TokenopsToken::ZeroAmount {})), "ZeroAmount");
        assert_eq!(revert_reason(&panic_data(0x11)), "Panic");
        assert_eq!(revert_reason(&[]), REVERTED_WITHOUT_DATA);
        assert_eq!(revert_reason(&[1, 2, 3, 4]), "0x01020304");
    }

    #[test]
    fn deployment_input_round_trips() {
        let spec = TokenSpec { name: "Euro".into(), symbol: "EUR".into(), decimals: 2 };
        let issuer = Address::repeat_byte(9);
        let input = deployment_input(&spec, issuer);
        assert_eq!(decode_deployment(&input), Some((spec, issuer)));
        assert_eq!(decode_deployment(&input[1..]), None);
    }

    #[test]
    fn calldata_decodes_as_the_contract_call() {
        let call = LedgerCall::Hold {
            owner: Address::repeat_byte(1),
            id: B256::repeat_byte(2),
            payee: None,
            amount: U256::from(10),
            expires_at: Some(99),
        };
        let decoded = ContractCall::abi_decode(&calldata(&call)).expect("decodes");
        assert_eq!(
            decoded,
            ContractCall::hold(TokenopsToken::holdCall {
                id: B256::repeat_byte(2),
                payee: Address::ZERO,
                amount: U256::from(10),
                expiresAt: 99
            })
        );
    }
}
