//! Reading a request body's JSON strictly: a key given twice in one object, or a number of
//! magnitude 2^53 or more that is not a whole number within 64 bits (written past 64 bits, or
//! with a fraction or an exponent), is refused with the field named, where a plain parse would
//! silently keep the last value or a rounded one (a payment reference of twenty digits read back
//! as `1.8446744073709552e19`, a transfer with two `amount`s). Smaller numbers are read as
//! serde_json reads them (a float to its nearest double).

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};
use std::cell::RefCell;
use std::fmt;

/// What a well-formed document is refused for, and where: a JSON path such as `params.ref` or
/// `approvers[2].group` (empty for the document itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    DuplicateKey { path: String },
    ImpreciseNumber { path: String },
}

impl Refusal {
    pub fn path(&self) -> &str {
        match self {
            Refusal::DuplicateKey { path } | Refusal::ImpreciseNumber { path } => path,
        }
    }

    pub fn problem(&self) -> &'static str {
        match self {
            Refusal::DuplicateKey { .. } => "is given more than once",
            Refusal::ImpreciseNumber { .. } => {
                "is a number past 2^53 that cannot be kept exactly (a whole number within 64 bits can): send it as a string"
            }
        }
    }

    fn within(&mut self, segment: Segment<'_>) {
        let path = match self {
            Refusal::DuplicateKey { path } | Refusal::ImpreciseNumber { path } => path,
        };
        let joined = match segment {
            Segment::Key(key) if path.is_empty() => key.to_owned(),
            Segment::Key(key) if path.starts_with('[') => format!("{key}{path}"),
            Segment::Key(key) => format!("{key}.{path}"),
            Segment::Index(index) if path.is_empty() || path.starts_with('[') => format!("[{index}]{path}"),
            Segment::Index(index) => format!("[{index}].{path}"),
        };
        *path = joined;
    }
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Not JSON (or more after the document).
    Malformed,
    Refused(Refusal),
}

/// A whole number arriving as a float is one written past 64 bits, or with a fraction or an
/// exponent; from this magnitude on, a float cannot tell it from its neighbours.
const EXACT_FLOAT_LIMIT: f64 = 9_007_199_254_740_992.0;

/// The document `bytes` hold, as `serde_json::from_slice` would read it, unless it is refused.
pub fn parse(bytes: &[u8]) -> Result<Value, ParseError> {
    let refusal = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = Strict { refusal: &refusal }.deserialize(&mut deserializer).and_then(|value| {
        deserializer.end()?;
        Ok(value)
    });
    match (parsed, refusal.into_inner()) {
        (_, Some(refusal)) => Err(ParseError::Refused(refusal)),
        (Ok(value), None) => Ok(value),
        (Err(_), None) => Err(ParseError::Malformed),
    }
}

/// Builds the `Value` serde_json's own visitor would, recording the first refusal (the error
/// it returns only unwinds the parse; each enclosing object or array adds its step to the path).
struct Strict<'a> {
    refusal: &'a RefCell<Option<Refusal>>,
}

impl Strict<'_> {
    fn refuse<E: de::Error>(&self, refusal: Refusal) -> E {
        *self.refusal.borrow_mut() = Some(refusal);
        E::custom("refused")
    }

    fn within(&self, segment: Segment<'_>) {
        if let Some(refusal) = self.refusal.borrow_mut().as_mut() {
            refusal.within(segment);
        }
    }

    fn child(&self) -> Strict<'_> {
        Strict { refusal: self.refusal }
    }
}

impl<'de> DeserializeSeed<'de> for Strict<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Strict<'_> {
    type Value = Value;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_bool<E>(self, value: bool) -> Result<Value, E> {
        Ok(Value::Bool(value))
    }

    fn visit_i64<E>(self, value: i64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_u64<E>(self, value: u64) -> Result<Value, E> {
        Ok(Value::Number(value.into()))
    }

    fn visit_f64<E: de::Error>(self, value: f64) -> Result<Value, E> {
        if value.is_finite() && value.fract() == 0.0 && value.abs() >= EXACT_FLOAT_LIMIT {
            return Err(self.refuse(Refusal::ImpreciseNumber { path: String::new() }));
        }
        Ok(Number::from_f64(value).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, value: &str) -> Result<Value, E> {
        Ok(Value::String(value.to_owned()))
    }

    fn visit_string<E>(self, value: String) -> Result<Value, E> {
        Ok(Value::String(value))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        loop {
            match seq.next_element_seed(self.child()) {
                Ok(Some(item)) => items.push(item),
                Ok(None) => return Ok(Value::Array(items)),
                Err(error) => {
                    self.within(Segment::Index(items.len()));
                    return Err(error);
                }
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // One lookup per key: the vacant entry is filled once its value is read.
            let slot = match object.entry(key) {
                Entry::Occupied(taken) => {
                    return Err(self.refuse(Refusal::DuplicateKey { path: taken.key().clone() }));
                }
                Entry::Vacant(slot) => slot,
            };
            match map.next_value_seed(self.child()) {
                Ok(value) => {
                    slot.insert(value);
                }
                Err(error) => {
                    self.within(Segment::Key(slot.key()));
                    return Err(error);
                }
            }
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::{ParseError, Refusal, parse};

    fn refused(text: &str) -> Option<Refusal> {
        match parse(text.as_bytes()) {
            Err(ParseError::Refused(refusal)) => Some(refusal),
            _ => None,
        }
    }

    #[test]
    fn reads_what_serde_json_reads() {
        for text in [
            r#"{"a": 1, "b": [true, null, "x", -2, 1.5, 18446744073709551615, -9223372036854775808], "c": {"d": {}}}"#,
            r#"[1, 2.0e3, 9007199254740991, "\u0041"]"#,
            r#"  {"n": 0.1, "m": -0.0, "tiny": 1.5e-300, "under": 9007199254740991.0}  "#,
        ] {
            let expected: serde_json::Value = serde_json::from_str(text).expect("JSON");
            assert_eq!(parse(text.as_bytes()), Ok(expected), "{text}");
        }
    }

    #[test]
    fn refuses_a_key_given_twice_naming_it() {
        let refusal = refused(r#"{"amount": "1.00", "amount": "2.00"}"#).expect("refused");
        assert_eq!(refusal, Refusal::DuplicateKey { path: "amount".into() });
        let nested = refused(r#"{"params": {"a": 1, "x": [{"k": 1, "k": 2}]}}"#).expect("refused");
        assert_eq!(nested.path(), "params.x[0].k");
        assert!(refused(r#"{"a": {"k": 1}, "b": {"k": 1}}"#).is_none(), "the same key in two objects");
    }

    #[test]
    fn refuses_numbers_a_float_would_round_naming_them() {
        for (text, path) in [
            (r#"{"params": {"ref": 18446744073709551617}}"#, "params.ref"),
            (r#"{"params": {"neg": -9223372036854775809}}"#, "params.neg"),
            (r#"{"a": [1, 123456789012345678901234567890]}"#, "a[1]"),
            (r#"{"x": 1e19}"#, "x"),
            (r#"[[9007199254740993.0]]"#, "[0][0]"),
        ] {
            let refusal = refused(text).unwrap_or_else(|| panic!("{text} was not refused"));
            assert_eq!(refusal, Refusal::ImpreciseNumber { path: path.into() }, "{text}");
        }
    }

    #[test]
    fn unreadable_json_is_malformed_not_refused() {
        for text in ["", "{", r#"{"a": 1} x"#, r#"{"a" 1}"#, "nul"] {
            assert_eq!(parse(text.as_bytes()), Err(ParseError::Malformed), "{text:?}");
        }
    }
}
