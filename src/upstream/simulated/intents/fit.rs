//! Shaping canonical arguments to the tool definition the session really declared. The rules
//! produce arguments in voxgate's own shapes (TOOLS.md, CALCULATORS.md); a client may declare a
//! tool of the same name with a narrower or flatter schema. Like a real model, the simulated one
//! only sends properties the schema has: unknown ones are dropped, and a nested object whose
//! property the schema lacks (`parameters`) is flattened into its parent.

use serde_json::{Map, Value};

/// `arguments` trimmed to `schema` (the tool's `parameters`). Without `properties` in the schema,
/// the arguments pass unchanged.
pub fn fit(arguments: Value, schema: &Value) -> Value {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return arguments;
    };
    let Value::Object(arguments) = arguments else { return arguments };
    let mut flat = Map::new();
    for (name, value) in arguments {
        match value {
            Value::Object(inner) if !properties.contains_key(&name) => flat.extend(inner),
            other => {
                flat.insert(name, other);
            }
        }
    }
    // A schema that names the calculator `calculator` rather than `calculator_name`.
    if !properties.contains_key("calculator_name")
        && properties.contains_key("calculator")
        && let Some(name) = flat.remove("calculator_name")
    {
        flat.insert("calculator".into(), name);
    }
    let fitted = flat
        .into_iter()
        .filter(|(name, _)| properties.contains_key(name))
        .map(|(name, value)| {
            let value = match properties.get(&name) {
                Some(sub) if value.is_object() => fit(value, sub),
                _ => value,
            };
            (name, value)
        })
        .collect();
    Value::Object(fitted)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn unknown_properties_are_dropped() {
        let schema = json!({"type": "object", "properties": {"title": {}, "start_datetime": {}, "end_datetime": {}}});
        let arguments = json!({"title": "T", "start_datetime": "a", "end_datetime": "b", "location": "room 1"});
        assert_eq!(fit(arguments, &schema), json!({"title": "T", "start_datetime": "a", "end_datetime": "b"}));
    }

    #[test]
    fn nested_parameters_are_kept_for_voxgate_schema_and_filtered_inside() {
        let schema = json!({"properties": {
            "calculator_name": {"type": "string"},
            "parameters": {"type": "object", "properties": {"weight_kg": {}, "height_cm": {}}},
        }});
        let arguments = json!({"calculator_name": "bmi", "parameters": {"weight_kg": 70, "height_cm": 175, "x": 1}});
        assert_eq!(
            fit(arguments, &schema),
            json!({"calculator_name": "bmi", "parameters": {"weight_kg": 70, "height_cm": 175}})
        );
    }

    #[test]
    fn flat_calculator_schemas_get_flat_arguments() {
        let schema = json!({"properties": {"calculator": {}, "weight_kg": {}, "height_cm": {}}});
        let arguments = json!({"calculator_name": "bmi", "parameters": {"weight_kg": 70, "height_cm": 175}});
        assert_eq!(fit(arguments, &schema), json!({"calculator": "bmi", "weight_kg": 70, "height_cm": 175}));
    }

    #[test]
    fn schemas_without_properties_take_everything() {
        let arguments = json!({"query": "x", "max_results": 5});
        assert_eq!(fit(arguments.clone(), &json!({"type": "object"})), arguments);
    }
}
