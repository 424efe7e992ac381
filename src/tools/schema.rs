//! Argument schemas: compiled once (draft 2020-12), and validation errors turned into messages the
//! model can act on — which field, what was expected — that never repeat the value given (it may be
//! patient data).

use jsonschema::Validator;
use serde_json::Value;

use super::ToolError;

/// Compile a tool's argument schema. A failure is a programming error in the tool's spec.
pub fn compile(schema: &Value) -> Result<Validator, String> {
    jsonschema::draft202012::new(schema).map_err(|e| e.masked().to_string())
}

/// Validate arguments; the error lists up to three problems, each with its field path.
pub fn check(validator: &Validator, args: &Value) -> Result<(), ToolError> {
    let problems: Vec<String> = validator
        .iter_errors(args)
        .take(3)
        .map(|err| {
            let path = err.instance_path().to_string();
            let field = if path.is_empty() { "arguments".to_string() } else { format!("`{path}`") };
            format!("{field}: {}", err.masked_with("the value"))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(problems.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_name_the_field_but_never_the_value() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 5},
                "age": {"type": "integer", "minimum": 0, "maximum": 120}
            },
            "required": ["age"],
            "additionalProperties": false
        });
        let validator = compile(&schema).unwrap();
        assert!(check(&validator, &json!({"age": 3})).is_ok());
        let err = check(&validator, &json!({"name": "Zebulon Quixote", "age": 300})).unwrap_err();
        let ToolError::InvalidArguments(msg) = err else { panic!("wrong error") };
        assert!(msg.contains("/name"), "{msg}");
        assert!(msg.contains("/age"), "{msg}");
        assert!(!msg.contains("Zebulon"), "{msg}");
        assert!(!msg.contains("300"), "{msg}");
        let err = check(&validator, &json!({"secret_field": 1})).unwrap_err();
        assert!(err.public_message().contains("age"), "{}", err.public_message());
    }
}
