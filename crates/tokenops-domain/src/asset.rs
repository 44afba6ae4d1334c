//! Assets and amounts: an asset is an ISO 4217 currency with a minor unit; an amount is a
//! positive decimal string no finer than that unit, held as an integer count of minor units.
//! Amounts are never floats.

use std::fmt;

/// An ISO 4217 currency code with a defined minor unit (`USD`: 2, `JPY`: 0, `BHD`: 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AssetId {
    currency: iso_currency::Currency,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssetError {
    #[error("{0:?} is not a recognised ISO 4217 currency code")]
    Unknown(String),
    #[error("{0} has no minor unit in ISO 4217 and cannot be tokenised")]
    NoMinorUnit(String),
}

impl AssetId {
    /// Parses a code; letters are matched case-insensitively (`usd` is `USD`).
    pub fn parse(text: &str) -> Result<AssetId, AssetError> {
        // Any case, but nothing around the three letters: " EUR" is not an ISO 4217 code.
        let code = text.to_ascii_uppercase();
        if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(AssetError::Unknown(text.to_owned()));
        }
        let currency = iso_currency::Currency::from_code(&code).ok_or_else(|| AssetError::Unknown(text.to_owned()))?;
        if currency.exponent().is_none() {
            return Err(AssetError::NoMinorUnit(code));
        }
        Ok(AssetId { currency })
    }

    pub fn code(self) -> &'static str {
        self.currency.code()
    }

    /// The currency's English name in ISO 4217 (`United States dollar`).
    pub fn name(self) -> String {
        self.currency.name().to_owned()
    }

    /// Digits after the decimal point: the token's `decimals`.
    pub fn minor_unit(self) -> u8 {
        self.currency.exponent().and_then(|e| u8::try_from(e).ok()).unwrap_or(0)
    }
}

impl fmt::Display for AssetId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// A positive amount in minor units of its asset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Amount(u128);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    #[error("must be a decimal string such as \"12.50\"")]
    Malformed,
    #[error("must be greater than zero")]
    NotPositive,
    #[error("is finer than the currency's minor unit ({0} decimal places)")]
    TooFine(u8),
    #[error("is too large")]
    TooLarge,
}

/// The largest amount accepted: 2^63 - 1 minor units (92 quadrillion dollars in cents), so
/// that amounts and positions fit both stores' 64-bit integer columns.
const MAX_MINOR_UNITS: u128 = i64::MAX as u128;

impl Amount {
    /// Parses `text` (digits, optionally a point and up to `minor_unit` digits; no sign, no
    /// exponent, no separators) in units of a currency with `minor_unit` decimals.
    pub fn parse(text: &str, minor_unit: u8) -> Result<Amount, AmountError> {
        let (whole, fraction) = match text.split_once('.') {
            Some((w, f)) => (w, f),
            None => (text, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || (text.contains('.') && fraction.is_empty()) {
            return Err(AmountError::Malformed);
        }
        // Trailing zeros carry no precision: "1.500" is 1.50 in a 2-decimal currency.
        let significant = fraction.trim_end_matches('0');
        if significant.len() > usize::from(minor_unit) {
            return Err(if fraction.len() > 60 { AmountError::Malformed } else { AmountError::TooFine(minor_unit) });
        }
        let scale = 10u128.pow(u32::from(minor_unit));
        let whole: u128 = whole
            .trim_start_matches('0')
            .parse::<u128>()
            .or_else(|_| if whole.bytes().all(|b| b == b'0') { Ok(0) } else { Err(AmountError::TooLarge) })?;
        let mut fraction_units: u128 = 0;
        for (i, b) in significant.bytes().enumerate() {
            let place = u32::from(minor_unit) - 1 - u32::try_from(i).unwrap_or(0);
            fraction_units += u128::from(b - b'0') * 10u128.pow(place);
        }
        let units =
            whole.checked_mul(scale).and_then(|w| w.checked_add(fraction_units)).ok_or(AmountError::TooLarge)?;
        if units == 0 {
            return Err(AmountError::NotPositive);
        }
        if units > MAX_MINOR_UNITS {
            return Err(AmountError::TooLarge);
        }
        Ok(Amount(units))
    }

    pub fn from_minor_units(units: u128) -> Option<Amount> {
        (units > 0 && units <= MAX_MINOR_UNITS).then_some(Amount(units))
    }

    pub fn minor_units(self) -> u128 {
        self.0
    }

    /// The amount as stored (it always fits: see `MAX_MINOR_UNITS`).
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

/// `units` minor units as a decimal string with exactly `minor_unit` decimals (`1250`, 2 →
/// `"12.50"`): the API's form of amounts and balances.
pub fn format_minor_units(units: u128, minor_unit: u8) -> String {
    if minor_unit == 0 {
        return units.to_string();
    }
    let scale = 10u128.pow(u32::from(minor_unit));
    format!("{}.{:0width$}", units / scale, units % scale, width = usize::from(minor_unit))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assets_are_iso_4217_codes_with_their_minor_units() {
        assert_eq!(AssetId::parse("USD").map(|a| a.minor_unit()), Ok(2));
        assert_eq!(AssetId::parse("jpy").map(|a| (a.code(), a.minor_unit())), Ok(("JPY", 0)));
        assert_eq!(AssetId::parse("BHD").map(|a| a.minor_unit()), Ok(3));
        assert!(matches!(AssetId::parse("ABC"), Err(AssetError::Unknown(_))));
        assert!(matches!(AssetId::parse("US"), Err(AssetError::Unknown(_))));
        assert!(matches!(AssetId::parse(" USD"), Err(AssetError::Unknown(_))));
        assert!(matches!(AssetId::parse("USD\n"), Err(AssetError::Unknown(_))));
        assert!(matches!(AssetId::parse("XAU"), Err(AssetError::NoMinorUnit(_))));
    }

    #[test]
    fn amounts_parse_to_minor_units() {
        assert_eq!(Amount::parse("12.50", 2).map(Amount::minor_units), Ok(1250));
        assert_eq!(Amount::parse("12.5", 2).map(Amount::minor_units), Ok(1250));
        assert_eq!(Amount::parse("12", 2).map(Amount::minor_units), Ok(1200));
        assert_eq!(Amount::parse("1.500", 2).map(Amount::minor_units), Ok(150));
        assert_eq!(Amount::parse("0.001", 3).map(Amount::minor_units), Ok(1));
        assert_eq!(Amount::parse("007", 0).map(Amount::minor_units), Ok(7));
        assert_eq!(Amount::parse("1.001", 2), Err(AmountError::TooFine(2)));
        assert_eq!(Amount::parse("1.5", 0), Err(AmountError::TooFine(0)));
        assert_eq!(Amount::parse("0", 2), Err(AmountError::NotPositive));
        assert_eq!(Amount::parse("0.00", 2), Err(AmountError::NotPositive));
        for bad in ["", "-1", "+1", "1e3", "1,000", " 1", "1.", ".5", "1.2.3", "NaN", "１"] {
            assert_eq!(Amount::parse(bad, 2), Err(AmountError::Malformed), "{bad:?}");
        }
        assert_eq!(Amount::parse(&"9".repeat(40), 2), Err(AmountError::TooLarge));
        assert_eq!(Amount::parse("92233720368547758.07", 2).map(Amount::as_i64), Ok(i64::MAX));
        assert_eq!(Amount::parse("92233720368547758.08", 2), Err(AmountError::TooLarge));
    }

    #[test]
    fn minor_units_format_with_the_currency_decimals() {
        assert_eq!(format_minor_units(1250, 2), "12.50");
        assert_eq!(format_minor_units(5, 2), "0.05");
        assert_eq!(format_minor_units(0, 3), "0.000");
        assert_eq!(format_minor_units(42, 0), "42");
    }
}
