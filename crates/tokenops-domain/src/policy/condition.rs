//! The condition grammar of a rule's `when` entries, parsed for the catalogue field it
//! constrains, and matching a condition against an event's value.
//!
//! ```text
//! condition  = range | comparison | equality          (whitespace around tokens is ignored)
//! range      = ("[" | "(") decimal ".." decimal ("]" | ")")   "[" "]" inclusive, "(" ")" exclusive
//! comparison = (">=" | ">" | "<=" | "<") decimal
//! equality   = "==" value                             a decimal on AMOUNT fields, a token on STRING
//! decimal    = digits ["." digits]                    no sign, no exponent (see `Decimal`)
//! ```
//!
//! Ranges and comparisons suit AMOUNT fields only; `==` suits both types. `!=` is refused (the
//! specification rejects it). On the asset fields (assetId, targetAssetId) the `==` value must
//! be a recognised ISO 4217 code, held upper-case: a misspelt currency (`== EUT`) would
//! otherwise never match and its rule would silently never fire.

use super::catalogue::{ContextField, FieldType};
use super::decimal::{Decimal, DecimalError};
use crate::asset::AssetId;
use std::fmt;

/// A parsed condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// `lo <= / < value <= / < hi`; never empty (see `ConditionError::EmptyRange`).
    Range {
        lo: Decimal,
        lo_inclusive: bool,
        hi: Decimal,
        hi_inclusive: bool,
    },
    Compare {
        op: Comparison,
        value: Decimal,
    },
    Equals(FieldValue),
}

/// The ordering operators of a comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comparison {
    AtLeast,
    Above,
    AtMost,
    Below,
}

impl Comparison {
    pub fn as_str(self) -> &'static str {
        match self {
            Comparison::AtLeast => ">=",
            Comparison::Above => ">",
            Comparison::AtMost => "<=",
            Comparison::Below => "<",
        }
    }

    fn holds(self, value: Decimal, bound: Decimal) -> bool {
        match self {
            Comparison::AtLeast => value >= bound,
            Comparison::Above => value > bound,
            Comparison::AtMost => value <= bound,
            Comparison::Below => value < bound,
        }
    }
}

/// A value of a context field: an event's, or the operand of an equality.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FieldValue {
    Amount(Decimal),
    /// A STRING field's value; on asset fields an upper-case ISO 4217 code.
    Text(String),
}

const FORMS: &str = "[lo .. hi), [lo .. hi], (lo .. hi], (lo .. hi), >= d, > d, <= d, < d, == value";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConditionError {
    #[error("is empty; use one of {FORMS}")]
    Empty,
    #[error("the operator != is not supported; write the accepted values with == or a range instead")]
    NotEqualUnsupported,
    #[error("unknown operator in {0:?}; the supported forms are {FORMS}")]
    UnknownOperator(String),
    #[error("a range is written [lo .. hi), [lo .. hi], (lo .. hi] or (lo .. hi); {0:?} is not")]
    MalformedRange(String),
    #[error("range lower bound {lo} is above its upper bound {hi}")]
    InvertedRange { lo: Decimal, hi: Decimal },
    #[error("range {0} contains no value")]
    EmptyRange(String),
    #[error("{0}")]
    Decimal(#[from] DecimalError),
    #[error("operator {op} has no value")]
    MissingValue { op: &'static str },
    #[error("{field} is a {} field: only == applies to it", field.field_type())]
    OrderingOnString { field: ContextField },
    #[error("the value {0:?} must be a single token without spaces")]
    BadToken(String),
    #[error("{value:?} is not a recognised ISO 4217 currency code, so this condition could never match")]
    UnknownCurrency { value: String },
}

impl Condition {
    /// Parses `text` as a condition on `field`, applying the field type's rules.
    pub fn parse(text: &str, field: ContextField) -> Result<Condition, ConditionError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(ConditionError::Empty);
        }
        if text.starts_with('[') || text.starts_with('(') {
            if field.field_type() != FieldType::Amount {
                return Err(ConditionError::OrderingOnString { field });
            }
            return parse_range(text);
        }
        if text.starts_with("!=") {
            return Err(ConditionError::NotEqualUnsupported);
        }
        // Longest operators first, so that ">=" is not read as ">" then "=...".
        for op in ["==", ">=", "<=", ">", "<"] {
            if let Some(rest) = text.strip_prefix(op) {
                let operand = rest.trim();
                if operand.is_empty() {
                    return Err(ConditionError::MissingValue { op });
                }
                return match op {
                    "==" => parse_equality(operand, field),
                    _ if field.field_type() != FieldType::Amount => Err(ConditionError::OrderingOnString { field }),
                    _ => {
                        let op = match op {
                            ">=" => Comparison::AtLeast,
                            ">" => Comparison::Above,
                            "<=" => Comparison::AtMost,
                            _ => Comparison::Below,
                        };
                        Ok(Condition::Compare { op, value: Decimal::parse(operand)? })
                    }
                };
            }
        }
        Err(ConditionError::UnknownOperator(text.to_owned()))
    }

    /// Whether `value` satisfies the condition. A value of the other type never does (content
    /// validation makes that impossible for catalogue fields).
    pub fn matches(&self, value: &FieldValue) -> bool {
        match (self, value) {
            (Condition::Equals(expected), actual) => expected == actual,
            (Condition::Range { lo, lo_inclusive, hi, hi_inclusive }, FieldValue::Amount(v)) => {
                let above_lo = if *lo_inclusive { v >= lo } else { v > lo };
                let below_hi = if *hi_inclusive { v <= hi } else { v < hi };
                above_lo && below_hi
            }
            (Condition::Compare { op, value: bound }, FieldValue::Amount(v)) => op.holds(*v, *bound),
            _ => false,
        }
    }
}

fn parse_range(text: &str) -> Result<Condition, ConditionError> {
    let malformed = || ConditionError::MalformedRange(text.to_owned());
    let lo_inclusive = text.starts_with('[');
    let hi_inclusive = match text.chars().last() {
        Some(']') => true,
        Some(')') => false,
        _ => return Err(malformed()),
    };
    let inner = text.get(1..text.len() - 1).ok_or_else(malformed)?;
    let (lo, hi) = inner.split_once("..").ok_or_else(malformed)?;
    let (lo, hi) = (lo.trim(), hi.trim());
    if lo.is_empty() || hi.is_empty() || hi.contains("..") {
        return Err(malformed());
    }
    let (lo, hi) = (Decimal::parse(lo)?, Decimal::parse(hi)?);
    if lo > hi {
        return Err(ConditionError::InvertedRange { lo, hi });
    }
    let condition = Condition::Range { lo, lo_inclusive, hi, hi_inclusive };
    if lo == hi && !(lo_inclusive && hi_inclusive) {
        return Err(ConditionError::EmptyRange(condition.to_string()));
    }
    Ok(condition)
}

fn parse_equality(operand: &str, field: ContextField) -> Result<Condition, ConditionError> {
    match field.field_type() {
        FieldType::Amount => Ok(Condition::Equals(FieldValue::Amount(Decimal::parse(operand)?))),
        FieldType::String => {
            if operand.chars().any(char::is_whitespace) {
                return Err(ConditionError::BadToken(operand.to_owned()));
            }
            if field.is_asset() {
                let asset = AssetId::parse(operand)
                    .map_err(|_| ConditionError::UnknownCurrency { value: operand.to_owned() })?;
                return Ok(Condition::Equals(FieldValue::Text(asset.code().to_owned())));
            }
            Ok(Condition::Equals(FieldValue::Text(operand.to_owned())))
        }
    }
}

impl fmt::Display for FieldValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FieldValue::Amount(d) => write!(f, "{d}"),
            FieldValue::Text(t) => f.write_str(t),
        }
    }
}

/// The canonical text of the condition, which parses back to the same condition.
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Condition::Range { lo, lo_inclusive, hi, hi_inclusive } => {
                let open = if *lo_inclusive { '[' } else { '(' };
                let close = if *hi_inclusive { ']' } else { ')' };
                write!(f, "{open}{lo} .. {hi}{close}")
            }
            Condition::Compare { op, value } => write!(f, "{} {value}", op.as_str()),
            Condition::Equals(value) => write!(f, "== {value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ContextField::{Amount, AssetId as Asset, TargetAssetId};

    fn d(text: &str) -> Decimal {
        Decimal::parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn amount(text: &str) -> FieldValue {
        FieldValue::Amount(d(text))
    }

    fn cond(text: &str, field: ContextField) -> Condition {
        Condition::parse(text, field).unwrap_or_else(|e| panic!("{text:?}: {e}"))
    }

    #[test]
    fn a_half_open_range_includes_its_low_end_and_excludes_its_high_end() {
        let c = cond("[1000 .. 10000)", Amount);
        assert!(c.matches(&amount("1000")));
        assert!(c.matches(&amount("9999.99")));
        assert!(!c.matches(&amount("10000")));
        assert!(!c.matches(&amount("999.999")));
    }

    #[test]
    fn a_closed_range_includes_both_ends() {
        let c = cond("[1000 .. 10000]", Amount);
        assert!(c.matches(&amount("1000")) && c.matches(&amount("10000.00")));
        assert!(!c.matches(&amount("10000.01")));
    }

    #[test]
    fn parentheses_exclude_their_end() {
        let c = cond("(1000 .. 10000]", Amount);
        assert!(!c.matches(&amount("1000")) && c.matches(&amount("1000.001")) && c.matches(&amount("10000")));
        let c = cond("(0 .. 1)", Amount);
        assert!(!c.matches(&amount("0")) && c.matches(&amount("0.5")) && !c.matches(&amount("1")));
    }

    #[test]
    fn a_range_whose_lower_bound_is_above_its_upper_is_refused() {
        assert!(matches!(Condition::parse("[10 .. 5)", Amount), Err(ConditionError::InvertedRange { .. })));
    }

    #[test]
    fn an_empty_range_is_refused_but_a_one_point_closed_range_is_not() {
        for empty in ["[5 .. 5)", "(5 .. 5]", "(5 .. 5)", "[5 .. 5.00)"] {
            assert!(matches!(Condition::parse(empty, Amount), Err(ConditionError::EmptyRange(_))), "{empty}");
        }
        assert!(cond("[5 .. 5]", Amount).matches(&amount("5.0")));
    }

    #[test]
    fn malformed_ranges_are_refused() {
        for bad in ["[1 .. 2", "[1 2)", "[1 .. 2 .. 3)", "[.. 2)", "[1 ..)", "[-1 .. 2)", "[1 ... 2)", "[1 .. 2}"] {
            assert!(Condition::parse(bad, Amount).is_err(), "{bad}");
        }
    }

    #[test]
    fn comparisons_hold_as_their_operator_says() {
        let v = amount("100");
        assert!(cond(">= 100", Amount).matches(&v));
        assert!(!cond("> 100", Amount).matches(&v));
        assert!(cond("<= 100.00", Amount).matches(&v));
        assert!(!cond("< 100", Amount).matches(&v));
        assert!(cond("> 99.999", Amount).matches(&v));
    }

    #[test]
    fn whitespace_around_tokens_is_tolerated() {
        assert_eq!(cond("  >=10000 ", Amount), cond(">= 10000", Amount));
        assert_eq!(cond("[ 1 ..2 )", Amount), cond("[1 .. 2)", Amount));
        assert_eq!(cond("==EUR", Asset), cond("== EUR", Asset));
    }

    #[test]
    fn the_not_equal_operator_is_refused_as_unsupported() {
        let err = Condition::parse("!= EUR", Asset);
        assert_eq!(err, Err(ConditionError::NotEqualUnsupported));
        assert!(ConditionError::NotEqualUnsupported.to_string().contains("not supported"));
        assert_eq!(Condition::parse("!=5", Amount), Err(ConditionError::NotEqualUnsupported));
    }

    #[test]
    fn other_operators_are_refused_naming_the_supported_forms() {
        for bad in ["= 5", "=> 5", "~ EUR", "in (EUR, USD)", "5", "EUR", "<> 5"] {
            let err = Condition::parse(bad, Amount);
            assert!(matches!(err, Err(ConditionError::UnknownOperator(_)) | Err(ConditionError::Decimal(_))), "{bad}");
        }
        let message = Condition::parse("= 5", Amount).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("[lo .. hi)") && message.contains("=="), "{message}");
    }

    #[test]
    fn ranges_and_comparisons_suit_amount_fields_only() {
        for text in ["[1 .. 2)", ">= 1", "< 3"] {
            assert_eq!(Condition::parse(text, Asset), Err(ConditionError::OrderingOnString { field: Asset }));
            assert!(Condition::parse(text, TargetAssetId).is_err());
        }
    }

    #[test]
    fn equality_on_an_amount_compares_decimals() {
        let c = cond("== 10000", Amount);
        assert!(c.matches(&amount("10000.00")));
        assert!(!c.matches(&amount("10000.01")));
        assert!(matches!(Condition::parse("== EUR", Amount), Err(ConditionError::Decimal(_))));
    }

    #[test]
    fn equality_on_an_asset_field_needs_a_recognised_currency_code() {
        assert!(matches!(Condition::parse("== EUT", Asset), Err(ConditionError::UnknownCurrency { .. })));
        assert!(matches!(Condition::parse("== EURO", TargetAssetId), Err(ConditionError::UnknownCurrency { .. })));
        assert!(matches!(Condition::parse("== E UR", Asset), Err(ConditionError::BadToken(_))));
        assert_eq!(Condition::parse("==", Asset), Err(ConditionError::MissingValue { op: "==" }));
    }

    #[test]
    fn currency_codes_are_held_upper_case() {
        let c = cond("== eur", Asset);
        assert_eq!(c, Condition::Equals(FieldValue::Text("EUR".into())));
        assert!(c.matches(&FieldValue::Text("EUR".into())));
        assert!(!c.matches(&FieldValue::Text("USD".into())));
    }

    #[test]
    fn a_value_of_the_other_type_never_matches() {
        assert!(!cond(">= 1", Amount).matches(&FieldValue::Text("EUR".into())));
        assert!(!cond("== EUR", Asset).matches(&amount("1")));
    }

    #[test]
    fn display_is_canonical_and_parses_back() {
        for (text, field, shown) in [
            ("[1000.00 .. 10000)", Amount, "[1000 .. 10000)"),
            ("(0.5..2]", Amount, "(0.5 .. 2]"),
            (">=10", Amount, ">= 10"),
            ("== usd", Asset, "== USD"),
            ("== 7.50", Amount, "== 7.5"),
        ] {
            let c = cond(text, field);
            assert_eq!(c.to_string(), shown);
            assert_eq!(cond(&c.to_string(), field), c);
        }
    }
}
