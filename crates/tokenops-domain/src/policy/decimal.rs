//! Exact non-negative decimals for amount conditions and event amounts: a plain decimal
//! string held as an integer and a scale, compared exactly. Never a float: `0.1 + 0.2` style
//! drift would move a threshold.

use std::cmp::Ordering;
use std::fmt;

/// At most this many significant digits: every value then fits a `u128` (whose range is about
/// 3.4 × 10^38), with room to spare for any amount a currency can hold.
pub const MAX_DIGITS: usize = 38;

/// Longer text is refused outright, before counting leading or trailing zeros.
const MAX_TEXT_LEN: usize = 100;

/// A non-negative decimal number, normalised (no trailing fractional zeros), so that equal
/// values are equal structurally: `10000.00` and `10000` are the same `Decimal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Decimal {
    /// The value times 10^scale.
    units: u128,
    scale: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    #[error("{0:?} is not a plain decimal number (digits, optionally a point and more digits; no sign or exponent)")]
    Malformed(String),
    #[error("{0:?} has more than {MAX_DIGITS} significant digits")]
    TooLong(String),
}

impl Decimal {
    pub const ZERO: Decimal = Decimal { units: 0, scale: 0 };

    /// Parses `digits[.digits]`: no sign, no exponent, no spaces, no separators, a digit on
    /// both sides of the point (`.5` and `5.` are refused as likely typos).
    pub fn parse(text: &str) -> Result<Decimal, DecimalError> {
        let malformed = || DecimalError::Malformed(text.to_owned());
        if text.len() > MAX_TEXT_LEN {
            return Err(DecimalError::TooLong(text.to_owned()));
        }
        let (whole, fraction) = match text.split_once('.') {
            Some((w, f)) => (w, Some(f)),
            None => (text, None),
        };
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || fraction.is_some_and(|f| !digits(f)) {
            return Err(malformed());
        }
        let whole = whole.trim_start_matches('0');
        let fraction = fraction.unwrap_or("").trim_end_matches('0');
        if whole.len() + fraction.len() > MAX_DIGITS {
            return Err(DecimalError::TooLong(text.to_owned()));
        }
        let mut units: u128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            // Cannot overflow: at most MAX_DIGITS digits.
            units = units * 10 + u128::from(b - b'0');
        }
        let scale = u32::try_from(fraction.len()).map_err(|_| malformed())?;
        Ok(Decimal::normalised(units, scale))
    }

    /// `units` minor units of a currency with `minor_unit` decimals: an event's amount.
    pub fn from_minor_units(units: u128, minor_unit: u8) -> Decimal {
        Decimal::normalised(units, u32::from(minor_unit))
    }

    fn normalised(mut units: u128, mut scale: u32) -> Decimal {
        while scale > 0 && units.is_multiple_of(10) {
            units /= 10;
            scale -= 1;
        }
        if units == 0 {
            scale = 0;
        }
        Decimal { units, scale }
    }

    /// Digits after the point once trailing zeros are dropped.
    pub fn scale(self) -> u32 {
        self.scale
    }

    fn split(self) -> (u128, u128) {
        let factor = 10u128.pow(self.scale);
        (self.units / factor, self.units % factor)
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Decimal) -> Ordering {
        // Whole parts first, then fractions aligned to the larger scale: a fraction is below
        // 10^scale <= 10^38, so aligning never overflows, where aligning whole values could.
        let (a_whole, a_fraction) = self.split();
        let (b_whole, b_fraction) = other.split();
        a_whole.cmp(&b_whole).then_with(|| {
            let scale = self.scale.max(other.scale);
            let a = a_fraction * 10u128.pow(scale - self.scale);
            let b = b_fraction * 10u128.pow(scale - other.scale);
            a.cmp(&b)
        })
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Decimal) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (whole, fraction) = self.split();
        if self.scale == 0 {
            write!(f, "{whole}")
        } else {
            let width = usize::try_from(self.scale).unwrap_or(0);
            write!(f, "{whole}.{fraction:0width$}")
        }
    }
}

impl std::str::FromStr for Decimal {
    type Err = DecimalError;

    fn from_str(text: &str) -> Result<Decimal, DecimalError> {
        Decimal::parse(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn plain_decimal_strings_parse() {
        assert_eq!(d("10000").to_string(), "10000");
        assert_eq!(d("10000.00").to_string(), "10000");
        assert_eq!(d("0.5").to_string(), "0.5");
        assert_eq!(d("007.250").to_string(), "7.25");
        assert_eq!(d("0").to_string(), "0");
        assert_eq!(d("0.000").to_string(), "0");
    }

    #[test]
    fn signs_exponents_spaces_and_bare_points_are_refused() {
        for bad in ["", "-1", "+1", "1e3", "1 000", " 1", "1 ", ".5", "5.", "1.2.3", "1,5", "abc", "١"] {
            assert!(Decimal::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn more_than_38_significant_digits_are_refused() {
        let ok = "9".repeat(38);
        assert!(Decimal::parse(&ok).is_ok());
        assert!(matches!(Decimal::parse(&"9".repeat(39)), Err(DecimalError::TooLong(_))));
        assert!(Decimal::parse(&format!("0.{}", "1".repeat(38))).is_ok());
        assert!(Decimal::parse(&format!("1.{}", "1".repeat(38))).is_err());
        // Leading and trailing zeros are not significant.
        assert!(Decimal::parse(&format!("000{ok}.000")).is_ok());
    }

    #[test]
    fn equal_values_at_different_scales_are_equal() {
        assert_eq!(d("10000"), d("10000.000"));
        assert_eq!(d("1.50"), Decimal::from_minor_units(150, 2));
        assert_eq!(d("0"), Decimal::ZERO);
    }

    #[test]
    fn comparison_is_exact() {
        assert!(d("0.1") < d("0.10000000000000000000000000000000000001"));
        assert!(d("9999.99") < d("10000"));
        assert!(d("10000.001") > d("10000"));
        assert!(d("2") > d("1.999"));
        let big = d(&"9".repeat(38));
        assert!(big > d("0.5"));
        assert!(d(&format!("0.{}", "9".repeat(37))) < d("1"));
    }
}
