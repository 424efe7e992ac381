//! Tests for `calculate_medical_score`: the tool's spec and schemas, argument validation, and one
//! file per calculator group with published worked examples, band edges, clamps and defaults.

mod atrial_fibrillation;
mod body;
mod grace;
mod meld;
mod wells;

use std::sync::LazyLock;

use serde_json::{Map, Value, json};

use super::{CALCULATORS, CalculateMedicalScore, arguments_schema, compute, model_schema, tool};
use crate::policy::Principal;
use crate::tools::{CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, schema};

static TOOL: LazyLock<CalculateMedicalScore> = LazyLock::new(tool);

/// Run a calculator that must succeed and return the `MedicalScoreResult`.
pub(super) fn run(calculator_name: &str, parameters: Value) -> Value {
    let Value::Object(map) = parameters else { panic!("parameters must be a JSON object") };
    match TOOL.calculate(calculator_name, &map) {
        Ok(result) => result,
        Err(err) => panic!("{calculator_name} failed: {err}"),
    }
}

/// Run a calculator that must fail with `invalid_arguments`; returns the message.
pub(super) fn rejected(calculator_name: &str, parameters: Value) -> String {
    let map: Map<String, Value> = parameters.as_object().cloned().unwrap_or_default();
    match TOOL.calculate(calculator_name, &map) {
        Ok(result) => panic!("{calculator_name} accepted invalid parameters: {result}"),
        Err(err) => {
            assert_eq!(err.code().as_str(), "invalid_arguments", "{err}");
            let ToolError::InvalidArguments(message) = err else { panic!("not invalid_arguments") };
            message
        }
    }
}

/// Score and risk category of a successful run.
pub(super) fn outcome(calculator_name: &str, parameters: Value) -> (Value, String) {
    let result = run(calculator_name, parameters);
    (result["score"].clone(), result["risk_category"].as_str().unwrap_or_default().to_string())
}

/// Assert that a rejection names `field` and does not repeat `value`.
pub(super) fn assert_names_field_not_value(message: &str, field: &str, value: &str) {
    assert!(message.contains(field), "message should name {field}: {message}");
    assert!(!message.contains(value), "message must not contain the value {value}: {message}");
}

#[test]
fn spec_matches_tools_md() {
    let spec = TOOL.spec();
    assert_eq!(spec.name, "calculate_medical_score");
    assert_eq!(spec.category, Category::Calculation);
    assert!(spec.phi);
    assert_eq!(spec.risk, Risk::Medium);
    assert!(!spec.requires_confirmation);
    assert!(!spec.third_party);
    assert_eq!(spec.rate_limit_per_minute, 50);
    assert_eq!(spec.timeout, DEFAULT_TOOL_TIMEOUT);
    for calculator in &CALCULATORS {
        assert!(spec.description.contains(calculator.name), "description lacks {}", calculator.name);
        let own = (calculator.schema)();
        for name in own["properties"].as_object().into_iter().flat_map(|map| map.keys()) {
            assert!(spec.description.contains(name.as_str()), "description lacks parameter {name}");
        }
    }
}

#[test]
fn every_schema_compiles_and_the_model_schema_is_plain_and_bounded() {
    let top = model_schema();
    assert!(schema::compile(&top).is_ok());
    for calculator in &CALCULATORS {
        assert!(
            schema::compile(&arguments_schema(calculator)).is_ok(),
            "{} does not compile",
            calculator.name
        );
        assert!(matches!(TOOL.validators.get(calculator.name), Some(Ok(_))), "{}", calculator.name);
    }
    let text = top.to_string();
    for keyword in ["\"if\"", "\"then\"", "\"else\"", "\"allOf\"", "\"anyOf\"", "\"oneOf\"", "\"$ref\""] {
        assert!(!text.contains(keyword), "model schema uses {keyword}");
    }
    assert_eq!(top["additionalProperties"], json!(false));
    assert_eq!(top["properties"]["parameters"]["additionalProperties"], json!(false));
    assert_eq!(top["properties"]["calculator_name"]["enum"].as_array().map(Vec::len), Some(8));
    let union = top["properties"]["parameters"]["properties"].as_object().cloned().unwrap_or_default();
    for (name, property) in &union {
        match property["type"].as_str() {
            Some("number" | "integer") => {
                assert!(
                    property["minimum"].is_number() && property["maximum"].is_number(),
                    "{name} unbounded"
                );
            }
            Some("string") => assert!(property["enum"].is_array(), "{name} unbounded"),
            Some("boolean") => {}
            other => panic!("{name} has type {other:?}"),
        }
        assert!(property["description"].as_str().is_some_and(|text| text.contains("Used by:")), "{name}");
    }
}

#[test]
fn each_calculator_schema_is_a_subset_of_the_union() {
    let top = model_schema();
    let union = &top["properties"]["parameters"]["properties"];
    for calculator in &CALCULATORS {
        let own = (calculator.schema)();
        assert_eq!(own["additionalProperties"], json!(false), "{}", calculator.name);
        for (name, property) in own["properties"].as_object().into_iter().flatten() {
            let merged = &union[name];
            assert_eq!(merged["type"], property["type"], "{}.{name} type", calculator.name);
            if let (Some(low), Some(merged_low)) = (property["minimum"].as_f64(), merged["minimum"].as_f64())
            {
                assert!(merged_low <= low, "{}.{name} minimum", calculator.name);
            }
            if let (Some(high), Some(merged_high)) =
                (property["maximum"].as_f64(), merged["maximum"].as_f64())
            {
                assert!(merged_high >= high, "{}.{name} maximum", calculator.name);
            }
            for token in property["enum"].as_array().into_iter().flatten() {
                assert!(
                    merged["enum"].as_array().is_some_and(|all| all.contains(token)),
                    "{}.{name}",
                    calculator.name
                );
            }
        }
    }
    // Where calculators differ, the union takes the widest range.
    assert_eq!(union["weight_kg"]["minimum"], json!(1.0));
    assert_eq!(union["weight_kg"]["maximum"], json!(500.0));
    assert_eq!(union["height_cm"]["minimum"], json!(30.0));
    assert_eq!(union["height_cm"]["maximum"], json!(272.0));
}

#[test]
fn the_model_schema_accepts_what_calculators_accept() {
    let validator = match schema::compile(&model_schema()) {
        Ok(validator) => validator,
        Err(reason) => panic!("{reason}"),
    };
    let seed = json!({"calculator_name": "wells_dvt", "parameters": {"active_cancer": true}});
    assert!(schema::check(&validator, &seed).is_ok());
    let bmi = json!({"calculator_name": "bmi", "parameters": {"weight_kg": 64, "height_cm": 160}});
    assert!(schema::check(&validator, &bmi).is_ok());
    let unknown = json!({"calculator_name": "apgar", "parameters": {}});
    assert!(schema::check(&validator, &unknown).is_err());
}

#[test]
fn result_has_the_seed_shape() {
    let result = run("wells_dvt", json!({}));
    let keys: Vec<&str> =
        result.as_object().into_iter().flat_map(|map| map.keys()).map(String::as_str).collect();
    assert_eq!(keys.len(), 6, "{keys:?}");
    for key in
        ["calculator_name", "score", "interpretation", "risk_category", "recommendations", "parameters_used"]
    {
        assert!(keys.contains(&key), "missing {key}");
    }
    assert_eq!(result["calculator_name"], json!("wells_dvt"));
    assert!(result["recommendations"].as_array().is_some_and(|list| !list.is_empty()));
}

#[test]
fn unknown_calculator_is_invalid_arguments_without_echo() {
    let message = rejected("zebulon_score", json!({}));
    assert_names_field_not_value(&message, "calculator_name", "zebulon");
    assert!(message.contains("wells_dvt") && message.contains("bmi"), "{message}");
}

#[test]
fn missing_wrong_type_and_unknown_fields_are_rejected_by_name() {
    let message = rejected("chadsvasc", json!({"sex": "female"}));
    assert!(message.contains("age_years"), "{message}");
    let message = rejected("chadsvasc", json!({"age_years": 137, "sex": "female"}));
    assert_names_field_not_value(&message, "/parameters/age_years", "137");
    let message = rejected("chadsvasc", json!({"age_years": 70, "sex": "Zebulon"}));
    assert_names_field_not_value(&message, "/parameters/sex", "Zebulon");
    let message = rejected("wells_dvt", json!({"active_cancer": "Quixote"}));
    assert_names_field_not_value(&message, "/parameters/active_cancer", "Quixote");
    // A parameter that exists in the union but not for this calculator is still unknown here.
    let message = rejected("bmi", json!({"weight_kg": 70, "height_cm": 170, "age_years": 44}));
    assert_names_field_not_value(&message, "age_years", "44");
}

#[test]
fn top_level_arguments_are_checked() {
    let no_name = TOOL.evaluate(&json!({"parameters": {}}));
    assert!(
        matches!(&no_name, Err(ToolError::InvalidArguments(message)) if message.contains("calculator_name"))
    );
    let no_parameters = TOOL.evaluate(&json!({"calculator_name": "bmi"}));
    assert!(
        matches!(&no_parameters, Err(ToolError::InvalidArguments(message)) if message.contains("parameters"))
    );
    let extra = TOOL.evaluate(&json!({"calculator_name": "wells_dvt", "parameters": {}, "note": "x"}));
    assert!(matches!(extra, Err(ToolError::InvalidArguments(_))));
}

#[test]
fn the_pure_step_fails_softly_without_validation() {
    let empty = Map::new();
    assert!(matches!(compute("bmi", &empty), Err(ToolError::InvalidArguments(m)) if m.contains("weight_kg")));
    assert!(matches!(compute("grace", &empty), Err(ToolError::InvalidArguments(_))));
    assert!(matches!(compute("nope", &empty), Err(ToolError::InvalidArguments(_))));
    let mut wrong_type = Map::new();
    wrong_type.insert("active_cancer".into(), json!("yes"));
    assert!(
        matches!(compute("wells_dvt", &wrong_type), Err(ToolError::InvalidArguments(m)) if !m.contains("yes"))
    );
    assert!(compute("wells_dvt", &Map::new()).is_ok());
}

#[tokio::test]
async fn call_returns_the_result_as_tool_output() {
    let ctx = CallContext {
        session_id: "s".into(),
        call_id: "c".into(),
        principal: Principal::new("tester", Vec::new()),
    };
    let args = json!({"calculator_name": "bmi", "parameters": {"weight_kg": 64, "height_cm": 160}});
    let output = match TOOL.call(args, ctx).await {
        Ok(output) => output,
        Err(err) => panic!("{err}"),
    };
    assert_eq!(output.result["score"], json!(25.0));
    assert!(output.citations.is_empty());
}
