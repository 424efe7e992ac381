//! Reading a tool's arguments after schema validation: the few accessors every tool needs, so that
//! each reads "a required text" or "a bounded count" the same way and says the same thing when it
//! is missing (the schema already refused most bad input; these keep the call path panic-free).

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
    args.get(key)
        .and_then(Value::as_u64)
        .unwrap_or(default)
        .clamp(1, max)
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
}
