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

/// `Err` names what could not be sent and why.
pub(crate) fn to_json(value: &Dynamic) -> Result<Value, String> {
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
        return array.iter().map(to_json).collect::<Result<Vec<_>, _>>().map(Value::Array);
    }
    if value.is_map() {
        let map = value.read_lock::<Map>().ok_or("a map could not be read")?;
        let mut object = serde_json::Map::new();
        for (key, item) in map.iter() {
            object.insert(key.to_string(), to_json(item)?);
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
