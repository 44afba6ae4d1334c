//! Ledger identifiers as the service holds them: addresses (`0x` and 40 hex digits) and
//! transaction hashes (`0x` and 64 hex digits), both in their canonical lower-case form.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} must be 0x and {digits} hex digits: {text:?}")]
pub struct ChainIdError {
    what: &'static str,
    digits: usize,
    text: String,
}

/// The bytes `text` spells as `0x` and `N * 2` hex digits of any case.
fn parse_hex<const N: usize>(text: &str, what: &'static str) -> Result<[u8; N], ChainIdError> {
    let error = || ChainIdError { what, digits: N * 2, text: text.to_owned() };
    let digits = text.strip_prefix("0x").ok_or_else(error)?;
    if digits.len() != N * 2 {
        return Err(error());
    }
    let mut bytes = [0u8; N];
    for (byte, pair) in bytes.iter_mut().zip(digits.as_bytes().chunks(2)) {
        let high = char::from(pair[0]).to_digit(16).ok_or_else(error)?;
        let low = char::from(pair[1]).to_digit(16).ok_or_else(error)?;
        *byte = u8::try_from(high * 16 + low).map_err(|_| error())?;
    }
    Ok(bytes)
}

fn hex_text(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(2 + bytes.len() * 2);
    text.push_str("0x");
    for byte in bytes {
        text.push_str(&format!("{byte:02x}"));
    }
    text
}

/// Declares a fixed-length ledger identifier: parsed from `0x` and hex digits of any case,
/// displayed in lower case.
macro_rules! hex_id {
    ($(#[$meta:meta])* $name:ident, $len:literal, $what:literal) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name([u8; $len]);

        impl $name {
            pub fn parse(text: &str) -> Result<$name, ChainIdError> {
                parse_hex::<$len>(text, $what).map($name)
            }

            pub fn from_bytes(bytes: [u8; $len]) -> $name {
                $name(bytes)
            }

            pub fn to_bytes(self) -> [u8; $len] {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&hex_text(&self.0))
            }
        }
    };
}

hex_id!(
    /// An account's wallet or a token contract on the ledger: `0x` and 40 hex digits (a
    /// mixed-case address is not checksum-checked). Displayed as lower-case `0x` hex: how the API
    /// shows it and the stores keep it.
    Address,
    20,
    "an address"
);

hex_id!(
    /// A ledger transaction's hash: `0x` and 64 hex digits.
    TxHash,
    32,
    "a transaction hash"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse_to_their_lower_case_form() {
        let mixed = "0x52908400098527886E0F7030069857D2E4169EE7";
        let address = Address::parse(mixed).map(|a| a.to_string());
        assert_eq!(address.as_deref(), Ok("0x52908400098527886e0f7030069857d2e4169ee7"));
        for bad in [
            "",
            "0x",
            "52908400098527886e0f7030069857d2e4169ee7",
            "0x52908400098527886e0f7030069857d2e4169ee",
            "0xZZ908400098527886e0f7030069857d2e4169ee7",
            " 0x52908400098527886e0f7030069857d2e4169ee7",
        ] {
            assert!(Address::parse(bad).is_err(), "{bad:?}");
        }
        let bytes = [0xab; 20];
        assert_eq!(Address::parse(&Address::from_bytes(bytes).to_string()), Ok(Address::from_bytes(bytes)));
    }

    #[test]
    fn hashes_are_32_bytes_of_hex() {
        let text = format!("0x{}", "Ab".repeat(32));
        assert_eq!(TxHash::parse(&text).map(|h| h.to_string()), Ok(format!("0x{}", "ab".repeat(32))));
        assert!(TxHash::parse(&format!("0x{}", "ab".repeat(31))).is_err());
        assert!(TxHash::parse(&"ab".repeat(33)).is_err());
    }
}
