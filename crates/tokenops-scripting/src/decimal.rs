//! Decimal amounts as scripts see them: strings, never floats. Parsing, the canonical form and
//! the exact arithmetic (`decimal_add`, `decimal_sub`, `decimal_cmp`) scripts need to work with
//! balances and targets.

use std::cmp::Ordering;

/// The finest fraction a decimal may carry; wider than any asset's minor unit.
pub const MAX_FRACTION_DIGITS: usize = 18;

const SCALE: i128 = 1_000_000_000_000_000_000;

/// A decimal held exactly as a count of 10^-18 units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Decimal(i128);

impl Decimal {
    /// Digits with an optional point and 1–18 fraction digits, optionally led by `-` when
    /// `signed`. No exponent, no separators, no `+`.
    pub fn parse(text: &str, signed: bool) -> Option<Decimal> {
        let (negative, body) = match text.strip_prefix('-') {
            Some(rest) if signed => (true, rest),
            _ => (false, text),
        };
        let (whole, fraction) = match body.split_once('.') {
            Some((w, f)) if !f.is_empty() => (w, f),
            Some(_) => return None,
            None => (body, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !digits(whole) || !digits(fraction) || fraction.len() > MAX_FRACTION_DIGITS {
            return None;
        }
        let whole_value: i128 = whole
            .trim_start_matches('0')
            .parse()
            .or_else(|_| if whole.bytes().all(|b| b == b'0') { Ok::<i128, ()>(0) } else { Err(()) })
            .ok()?;
        let mut fraction_value: i128 = 0;
        for (i, b) in fraction.bytes().enumerate() {
            let place = u32::try_from(MAX_FRACTION_DIGITS - 1 - i).ok()?;
            fraction_value += i128::from(b - b'0') * 10i128.pow(place);
        }
        let units = whole_value.checked_mul(SCALE)?.checked_add(fraction_value)?;
        Some(Decimal(if negative { -units } else { units }))
    }

    pub fn from_integer(value: i64) -> Decimal {
        Decimal(i128::from(value) * SCALE)
    }

    pub fn checked_add(self, other: Decimal) -> Option<Decimal> {
        self.0.checked_add(other.0).map(Decimal)
    }

    pub fn checked_sub(self, other: Decimal) -> Option<Decimal> {
        self.0.checked_sub(other.0).map(Decimal)
    }

    /// Shortest exact form: no leading zeros, no trailing fraction zeros, no point for a whole
    /// number ("1000.50" → "1000.5", "007" → "7", "-0" → "0").
    pub fn canonical(self) -> String {
        let sign = if self.0 < 0 { "-" } else { "" };
        let magnitude = self.0.unsigned_abs();
        let scale = SCALE.unsigned_abs();
        let whole = magnitude / scale;
        let fraction = magnitude % scale;
        if fraction == 0 {
            return format!("{sign}{whole}");
        }
        let digits = format!("{fraction:0width$}", width = MAX_FRACTION_DIGITS);
        format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.canonical())
    }
}

pub(crate) fn compare(a: Decimal, b: Decimal) -> Ordering {
    a.cmp(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_the_canonical_form() {
        let cases =
            [("1000.00", "1000"), ("007.50", "7.5"), ("0", "0"), ("0.000000000000000001", "0.000000000000000001")];
        for (text, canonical) in cases {
            assert_eq!(Decimal::parse(text, false).map(Decimal::canonical).as_deref(), Some(canonical), "{text}");
        }
        assert_eq!(Decimal::parse("-2.5", true).map(Decimal::canonical).as_deref(), Some("-2.5"));
    }

    #[test]
    fn refuses_what_is_not_a_plain_decimal() {
        for text in ["", ".5", "5.", "1e3", "+1", "1,000", "0.0000000000000000001", "١", " 1", "-1"] {
            assert_eq!(Decimal::parse(text, false), None, "{text}");
        }
        assert_eq!(Decimal::parse("-", true), None);
        assert_eq!(Decimal::parse("999999999999999999999999", false), None, "beyond i128 at 18 decimals");
    }

    #[test]
    fn adds_and_subtracts_exactly() {
        let a = Decimal::parse("0.1", false).expect("a value");
        let b = Decimal::parse("0.2", false).expect("a value");
        assert_eq!(a.checked_add(b).expect("a value").canonical(), "0.3");
        assert_eq!(a.checked_sub(b).expect("a value").canonical(), "-0.1");
        assert_eq!(compare(a, b), Ordering::Less);
    }
}
