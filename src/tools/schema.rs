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
            let path = field_path(&err.instance_path().to_string());
            let field = if path.is_empty() { "arguments".to_string() } else { format!("`{path}`") };
            format!("{field}: {}", message(&err))
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ToolError::InvalidArguments(problems.join("; ")))
    }
}

/// What was wrong, without the value given. Fields the tool does not take are named only when
/// the name looks like a field name (`patient`, `start_time`), which tells the model what to drop;
/// any other name is counted, not quoted: jsonschema's own message lists every one, and a model
/// may have made one of patient data ("Zebulon Quixote MRN 123").
fn message(err: &jsonschema::ValidationError<'_>) -> String {
    use jsonschema::error::ValidationErrorKind as Kind;
    match err.kind() {
        Kind::AdditionalProperties { unexpected } | Kind::UnevaluatedProperties { unexpected } => {
            let (named, other): (Vec<&String>, Vec<&String>) = unexpected.iter().partition(|name| plain_field_name(name));
            let mut listed: Vec<String> = named.iter().map(|name| format!("`{name}`")).collect();
            if !other.is_empty() {
                listed.push(format!("{} other(s) not named here", other.len()));
            }
            format!("fields the tool does not take: {}; use only the fields of its schema", listed.join(", "))
        }
        Kind::PropertyNames { .. } => "a field name the tool does not accept".to_string(),
        _ => err.masked_with("the value").to_string(),
    }
}

/// The field's path with every segment that is neither an array index nor shaped like a field
/// name replaced by `…`: a tool whose schema takes a map (`{"type": "object",
/// "additionalProperties": {...}}`) has keys the model chose in its paths.
fn field_path(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.is_empty() || segment.bytes().all(|b| b.is_ascii_digit()) || plain_field_name(segment) {
                segment
            } else {
                "…"
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// Lower-case letters, digits and underscores, starting with a letter, at most 32: the shape of
/// the tools' own field names, which a person's name or a record number does not take.
fn plain_field_name(name: &str) -> bool {
    name.len() <= 32
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
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

    #[test]
    fn fields_the_tool_does_not_take_are_named_only_when_they_look_like_field_names() {
        let validator = compile(&json!({
            "type": "object",
            "properties": {"title": {"type": "string"}, "extra": {"type": "object", "propertyNames": {"maxLength": 3}}},
            "additionalProperties": false
        }))
        .unwrap();
        let err = check(&validator, &json!({"title": "x", "Zebulon Quixote MRN 123": true, "Ward 3": 1, "patient": 1})).unwrap_err();
        let ToolError::InvalidArguments(msg) = err else { panic!("wrong error") };
        assert!(!msg.contains("Zebulon") && !msg.contains("Ward"), "{msg}");
        assert!(msg.contains("fields the tool does not take: `patient`, 2 other(s) not named here"), "{msg}");
        let err = check(&validator, &json!({"extra": {"Zebulon": 1}})).unwrap_err();
        let ToolError::InvalidArguments(msg) = err else { panic!("wrong error") };
        assert!(!msg.contains("Zebulon"), "{msg}");
        // A map's keys are the model's: in a path they are not repeated either.
        let map = compile(&json!({"type": "object", "properties": {"meta": {"type": "object", "additionalProperties": {"type": "string"}}}}))
            .unwrap();
        let err = check(&map, &json!({"meta": {"Zebulon Quixote MRN 123": 5, "ward": 3}})).unwrap_err();
        let ToolError::InvalidArguments(msg) = err else { panic!("wrong error") };
        assert!(!msg.contains("Zebulon") && msg.contains("`/meta/…`") && msg.contains("`/meta/ward`"), "{msg}");
    }
}
