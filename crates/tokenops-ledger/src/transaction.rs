//! Real EVM transactions, built and read the same way by both ledgers: an EIP-1559 (or legacy
//! EIP-155) transaction calling the token contract is built here, custody signs its signing
//! hash, and the signed transaction is EIP-2718-encoded. Its hash is keccak-256 of that encoding,
//! which is what any EVM node reports. The embedded ledger decodes the same bytes, recovers the
//! sender from the signature and checks the chain id, exactly as a node would.

use crate::port::{LedgerError, SignedTransaction};
use alloy::consensus::{SignableTransaction, Transaction, TxEip1559, TxEnvelope, TxLegacy};
use alloy::eips::eip2718::{Decodable2718, Encodable2718};
use alloy::primitives::{Address, B256, Bytes, Signature, TxHash, TxKind, U256};
use secp256k1::ecdsa::{RecoverableSignature, RecoveryId};
use secp256k1::{Message, Secp256k1, VerifyOnly};
use std::sync::LazyLock;
use tokenops_custody::Custody;

/// One verification context for the process (creating one costs more than a recovery).
static SECP256K1: LazyLock<Secp256k1<VerifyOnly>> = LazyLock::new(Secp256k1::verification_only);

/// What a transaction pays for gas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fees {
    Eip1559 {
        max_fee_per_gas: u128,
        max_priority_fee_per_gas: u128,
    },
    /// A legacy (EIP-155) transaction; `gas_price` 0 on free-gas permissioned chains.
    Legacy {
        gas_price: u128,
    },
}

/// A transaction before custody signs it.
#[derive(Debug, Clone)]
pub struct UnsignedTransaction {
    pub chain_id: u64,
    pub nonce: u64,
    /// The contract called; `None` deploys.
    pub to: Option<Address>,
    pub input: Bytes,
    pub gas_limit: u64,
    pub fees: Fees,
}

/// Has custody sign `unsigned` as `sender` and encodes the result.
pub async fn sign(
    unsigned: UnsignedTransaction,
    sender: Address,
    custody: &dyn Custody,
) -> Result<SignedTransaction, LedgerError> {
    let to = unsigned.to.map_or(TxKind::Create, TxKind::Call);
    let envelope: TxEnvelope = match unsigned.fees {
        Fees::Eip1559 { max_fee_per_gas, max_priority_fee_per_gas } => {
            let tx = TxEip1559 {
                chain_id: unsigned.chain_id,
                nonce: unsigned.nonce,
                gas_limit: unsigned.gas_limit,
                max_fee_per_gas,
                max_priority_fee_per_gas,
                to,
                value: U256::ZERO,
                access_list: Default::default(),
                input: unsigned.input,
            };
            let signature = custody.sign_hash(sender, tx.signature_hash()).await.map_err(LedgerError::Signing)?;
            tx.into_signed(signature).into()
        }
        Fees::Legacy { gas_price } => {
            let tx = TxLegacy {
                chain_id: Some(unsigned.chain_id),
                nonce: unsigned.nonce,
                gas_price,
                gas_limit: unsigned.gas_limit,
                to,
                value: U256::ZERO,
                input: unsigned.input,
            };
            let signature = custody.sign_hash(sender, tx.signature_hash()).await.map_err(LedgerError::Signing)?;
            tx.into_signed(signature).into()
        }
    };
    Ok(SignedTransaction {
        hash: *envelope.tx_hash(),
        raw: envelope.encoded_2718().into(),
        sender,
        nonce: unsigned.nonce,
    })
}

/// A signed transaction as read back from its bytes.
#[derive(Debug, Clone)]
pub struct DecodedTransaction {
    pub hash: TxHash,
    /// Recovered from the signature.
    pub sender: Address,
    pub nonce: u64,
    pub chain_id: Option<u64>,
    pub to: Option<Address>,
    pub value: U256,
    pub input: Bytes,
}

/// Decodes a signed EIP-1559 or legacy transaction and recovers its sender (refusing a high-`s`
/// signature, as nodes do since EIP-2). Anything else is a final error: these bytes will never
/// be valid.
pub fn decode(raw: &[u8]) -> Result<DecodedTransaction, LedgerError> {
    let mut buffer = raw;
    let envelope = TxEnvelope::decode_2718(&mut buffer)
        .map_err(|e| LedgerError::final_(format!("not a signed EVM transaction: {e}")))?;
    if !buffer.is_empty() {
        return Err(LedgerError::final_("trailing bytes after the signed transaction"));
    }
    let (signature, signing_hash) = match &envelope {
        TxEnvelope::Eip1559(signed) => (*signed.signature(), signed.signature_hash()),
        TxEnvelope::Legacy(signed) => (*signed.signature(), signed.signature_hash()),
        _ => return Err(LedgerError::final_("only EIP-1559 and legacy transactions are accepted")),
    };
    let sender =
        recover_sender(&signature, signing_hash).ok_or_else(|| LedgerError::final_("invalid transaction signature"))?;
    Ok(DecodedTransaction {
        hash: *envelope.tx_hash(),
        sender,
        nonce: envelope.nonce(),
        chain_id: envelope.chain_id(),
        to: envelope.to(),
        value: envelope.value(),
        input: envelope.input().clone(),
    })
}

/// The address whose key made `signature` over `hash`, as an EVM node recovers it: `None` for a
/// signature that recovers to no key, or whose `s` is in the upper half of the curve order
/// (EIP-2: such a signature is a malleated copy of a valid one).
///
/// libsecp256k1 rather than alloy's k256 path: recovery is most of what the embedded ledger
/// spends per transaction, and the C library does it about five times faster.
pub fn recover_sender(signature: &Signature, hash: B256) -> Option<Address> {
    if signature.normalize_s().is_some() {
        return None;
    }
    let recovery = RecoveryId::try_from(i32::from(signature.v())).ok()?;
    let bytes = signature.as_bytes();
    let recoverable = RecoverableSignature::from_compact(&bytes[..64], recovery).ok()?;
    let key = SECP256K1.recover_ecdsa(Message::from_digest(hash.0), &recoverable).ok()?;
    let public = key.serialize_uncompressed();
    Some(Address::from_raw_public_key(&public[1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloy::primitives::keccak256;

    /// The fast recovery agrees with alloy's (k256) on random keys and hashes, and refuses what
    /// nodes refuse.
    #[test]
    fn recovery_agrees_with_k256() {
        for n in 1..=20u8 {
            let key = k256::ecdsa::SigningKey::from_slice(&[n; 32]).expect("key");
            let hash = keccak256([n]);
            let (signature, recovery) = key.sign_prehash_recoverable(hash.as_slice()).expect("sign");
            let signature = Signature::from((signature, recovery));
            let expected = Address::from_public_key(key.verifying_key());
            assert_eq!(signature.recover_address_from_prehash(&hash).expect("k256"), expected);
            assert_eq!(recover_sender(&signature, hash), Some(expected));
            // The malleated twin (n - s, flipped parity) recovers the same key but is refused.
            let order =
                U256::from_be_slice(&alloy::hex!("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141"));
            let twin = Signature::new(signature.r(), order - signature.s(), !signature.v());
            assert_eq!(recover_sender(&twin, hash), None);
        }
    }
}
