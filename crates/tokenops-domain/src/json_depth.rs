//! How deep a JSON document the service keeps. A stored document is read back inside others
//! (an audit record's detail, a replayed response, an event), each adding a few levels, and a
//! reader refuses what nests past its own limit (serde_json's is 128): so what comes in is bounded
//! well below it, and nothing stored can become unreadable.

use serde_json::Value;

/// The deepest nesting accepted in a request body or a script's value: 32 levels of objects
/// and arrays, far more than any document of the API has (policy content needs six).
pub const MAX_DEPTH: usize = 32;

/// Whether `value` nests objects and arrays deeper than [`MAX_DEPTH`] (a scalar is depth 0).
pub fn too_deep(value: &Value) -> bool {
    // Breadth first with each level's containers, so a deep document costs no stack.
    let mut level: Vec<&Value> = vec![value];
    let mut depth = 0;
    while !level.is_empty() {
        let next: Vec<&Value> = level
            .iter()
            .flat_map(|v| match v {
                Value::Array(items) => items.iter().collect::<Vec<_>>(),
                Value::Object(map) => map.values().collect(),
                _ => Vec::new(),
            })
            .collect();
        if level.iter().any(|v| v.is_array() || v.is_object()) {
            depth += 1;
        }
        if depth > MAX_DEPTH {
            return true;
        }
        level = next;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn up_to_the_bound_is_kept_and_past_it_refused() {
        assert!(!too_deep(&json!(1)));
        assert!(!too_deep(&json!({"a": [1, {"b": []}]})));
        assert!(!too_deep(&nested(MAX_DEPTH)));
        assert!(too_deep(&nested(MAX_DEPTH + 1)));
        assert!(too_deep(&json!([1, nested(MAX_DEPTH)])));
    }
}
