//! Reading a tool's arguments after schema validation: the few accessors every tool needs, so that
//! each reads "a required text", "a bounded count" or "a whole number" the same way and says the
//! same thing when it is missing (the schema already refused most bad input; these keep the call
//! path panic-free, and read `30.0` as the integer the schema accepted it as).

use serde_json::Value;

use super::ToolError;

/// A required string argument, trimmed; empty or missing is `invalid_arguments` naming the field.
pub fn required_text(args: &Value, key: &str) -> Result<String, ToolError> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(String::from)
        .ok_or_else(|| {
            ToolError::InvalidArguments(format!("`/{key}`: a non-empty text is required"))
        })
}

/// An optional count, `default` when absent, clamped to `1..=max`.
pub fn count(args: &Value, key: &str, default: u64, max: u64) -> u64 {
    whole_number(args, key).unwrap_or(default).clamp(1, max)
}

/// An optional non-negative integer argument. The schema's `"type": "integer"` also lets a
/// whole-number float through (`30.0`, `1e1`), which `Value::as_u64` would read as absent and so
/// silently replace by a default; it is the same number here.
pub fn whole_number(args: &Value, key: &str) -> Option<u64> {
    let value = args.get(key)?;
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn accessors_trim_clamp_and_name_the_field() {
        assert_eq!(required_text(&json!({"q": "  x "}), "q").unwrap(), "x");
        let err = required_text(&json!({"q": "  "}), "q").unwrap_err();
        assert_eq!(
            err,
            ToolError::InvalidArguments("`/q`: a non-empty text is required".into())
        );
        assert_eq!(count(&json!({}), "n", 5, 10), 5);
        assert_eq!(count(&json!({"n": 50}), "n", 5, 10), 10);
        assert_eq!(count(&json!({"n": 0}), "n", 5, 10), 1);
    }

    #[test]
    fn whole_number_floats_are_the_integers_the_schema_let_through() {
        // jsonschema's "integer" accepts 7.0 and 1e1; a model may well send them.
        let validator = crate::tools::schema::compile(&json!({"type": "integer"})).unwrap();
        assert!(crate::tools::schema::check(&validator, &json!(7.0)).is_ok());
        assert_eq!(count(&json!({"n": 7.0}), "n", 5, 10), 7);
        assert_eq!(count(&json!({"n": 1e1}), "n", 5, 20), 10);
        assert_eq!(whole_number(&json!({"n": 30.0}), "n"), Some(30));
        assert_eq!(whole_number(&json!({"n": 30}), "n"), Some(30));
        for not_whole in [json!({"n": 2.5}), json!({"n": -1.0}), json!({"n": -1}), json!({"n": 1e300}), json!({"n": "3"}), json!({})] {
            assert_eq!(whole_number(&not_whole, "n"), None, "{not_whole}");
        }
    }
}
