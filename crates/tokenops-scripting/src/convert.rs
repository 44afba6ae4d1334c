//! The one conversion between the host's JSON and the script's values. Amounts are strings on
//! both sides: a JSON number with a fraction reaches the script as its text, and a script's
//! floating-point number is refused on its way to the host rather than rounded.

use rhai::{Array, Dynamic, Map};
use serde_json::Value;

pub(crate) fn to_dynamic(value: &Value) -> Dynamic {
    match value {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from(i),
            None => Dynamic::from(n.to_string()),
        },
        Value::String(s) => Dynamic::from(s.clone()),
        Value::Array(items) => Dynamic::from_array(items.iter().map(to_dynamic).collect()),
        Value::Object(fields) => {
            let map: Map = fields.iter().map(|(k, v)| (k.as_str().into(), to_dynamic(v))).collect();
            Dynamic::from_map(map)
        }
    }
}

/// The deepest nesting of arrays and maps a script may send to the host: the bound the API puts
/// on request bodies (`tokenops_domain::json_depth::MAX_DEPTH`), so what a script hands over
/// (a result, a submission, a log) stays readable wherever it is stored.
pub const MAX_VALUE_DEPTH: usize = 32;

/// `Err` names what could not be sent and why.
pub(crate) fn to_json(value: &Dynamic) -> Result<Value, String> {
    to_json_within(value, MAX_VALUE_DEPTH)
}

fn to_json_within(value: &Dynamic, levels_left: usize) -> Result<Value, String> {
    let nests = value.is_array() || value.is_map();
    if nests && levels_left == 0 {
        return Err(format!("a value nested deeper than {MAX_VALUE_DEPTH} levels cannot be sent to the host"));
    }
    let inner = |item: &Dynamic| to_json_within(item, levels_left - 1);
    if value.is_unit() {
        return Ok(Value::Null);
    }
    if let Ok(b) = value.as_bool() {
        return Ok(Value::Bool(b));
    }
    if let Ok(i) = value.as_int() {
        return Ok(Value::from(i));
    }
    if value.is_float() {
        return Err(
            "a floating-point number cannot be sent to the host: write amounts as decimal strings such as \"12.50\""
                .into(),
        );
    }
    if value.is_string() {
        return Ok(Value::String(value.to_string()));
    }
    if let Ok(c) = value.as_char() {
        return Ok(Value::String(c.to_string()));
    }
    if value.is_array() {
        let array = value.read_lock::<Array>().ok_or("an array could not be read")?;
        return array.iter().map(inner).collect::<Result<Vec<_>, _>>().map(Value::Array);
    }
    if value.is_map() {
        let map = value.read_lock::<Map>().ok_or("a map could not be read")?;
        let mut object = serde_json::Map::new();
        for (key, item) in map.iter() {
            object.insert(key.to_string(), inner(item)?);
        }
        return Ok(Value::Object(object));
    }
    Err(format!("a value of type {} cannot be sent to the host", value.type_name()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_nested_past_the_bound_is_not_sent() {
        let nested = |levels: usize| (0..levels).fold(json!(1), |inner, _| json!({ "a": [inner] }));
        // Each level of `nested` is a map and an array.
        assert!(to_json(&to_dynamic(&nested(MAX_VALUE_DEPTH / 2))).is_ok());
        let refused = to_json(&to_dynamic(&nested(MAX_VALUE_DEPTH / 2 + 1))).expect_err("too deep");
        assert!(refused.contains("deeper than 32"), "{refused}");
    }

    #[test]
    fn json_round_trips_with_amounts_as_strings() {
        let value = json!({"amount": "12.50", "count": 3, "ok": true, "none": null, "items": [1, "a"]});
        assert_eq!(to_json(&to_dynamic(&value)).expect("a value"), value);
        assert_eq!(to_dynamic(&json!(1.25)).to_string(), "1.25", "a JSON fraction becomes its text");
    }

    #[test]
    fn a_float_is_refused() {
        let err = to_json(&Dynamic::from(1.5_f64)).expect_err("an error");
        assert!(err.contains("decimal strings"), "{err}");
    }
}
