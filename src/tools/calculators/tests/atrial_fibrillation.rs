//! `chadsvasc` and `hasbled`: age edges, sex-adjusted bands, every band edge, maxima and defaults.

use serde_json::{Value, json};

use super::{assert_names_field_not_value, outcome, rejected, run};

fn chadsvasc(age: f64, sex: &str, extra: Value) -> (Value, String) {
    let mut parameters = json!({"age_years": age, "sex": sex});
    if let (Some(map), Value::Object(extra)) = (parameters.as_object_mut(), extra) {
        map.extend(extra);
    }
    outcome("chadsvasc", parameters)
}

#[test]
fn chadsvasc_age_edges() {
    assert_eq!(chadsvasc(64.0, "male", json!({})), (json!(0), "low".into()));
    assert_eq!(chadsvasc(64.9, "male", json!({})), (json!(0), "low".into()));
    assert_eq!(chadsvasc(65.0, "male", json!({})), (json!(1), "moderate".into()));
    assert_eq!(chadsvasc(74.0, "male", json!({})), (json!(1), "moderate".into()));
    assert_eq!(chadsvasc(75.0, "male", json!({})), (json!(2), "high".into()));
}

#[test]
fn chadsvasc_bands_are_sex_adjusted() {
    // Male 0 / female 1: low; male 1 / female 2: moderate; male ≥2 / female ≥3: high.
    assert_eq!(chadsvasc(50.0, "female", json!({})), (json!(1), "low".into()));
    assert_eq!(chadsvasc(50.0, "male", json!({"hypertension": true})), (json!(1), "moderate".into()));
    assert_eq!(chadsvasc(50.0, "female", json!({"hypertension": true})), (json!(2), "moderate".into()));
    assert_eq!(
        chadsvasc(50.0, "male", json!({"hypertension": true, "diabetes": true})),
        (json!(2), "high".into())
    );
    assert_eq!(
        chadsvasc(50.0, "female", json!({"hypertension": true, "diabetes": true})),
        (json!(3), "high".into())
    );
    // A prior stroke alone is two points: high for either sex.
    assert_eq!(
        chadsvasc(50.0, "male", json!({"stroke_tia_thromboembolism": true})),
        (json!(2), "high".into())
    );
}

#[test]
fn chadsvasc_maximum_rate_and_defaults() {
    let all = json!({
        "congestive_heart_failure": true, "hypertension": true, "diabetes": true,
        "stroke_tia_thromboembolism": true, "vascular_disease": true
    });
    assert_eq!(chadsvasc(80.0, "female", all), (json!(9), "high".into()));
    let result = run("chadsvasc", json!({"age_years": 70, "sex": "female", "diabetes": true}));
    assert_eq!(result["score"], json!(3));
    let text = result["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("3.2%") && text.contains("CHA2DS2-VA"), "{text}");
    let used = &result["parameters_used"];
    assert_eq!(used["congestive_heart_failure"], json!(false));
    assert_eq!(used["sex"], json!("female"));
    assert_eq!(used.as_object().map(|map| map.len()), Some(7));
}

#[test]
fn chadsvasc_requires_sex_and_age() {
    let message = rejected("chadsvasc", json!({"age_years": 70}));
    assert!(message.contains("sex"), "{message}");
    let message = rejected("chadsvasc", json!({"age_years": 17, "sex": "male"}));
    assert_names_field_not_value(&message, "/parameters/age_years", "17");
}

fn hasbled(age: f64, extra: Value) -> (Value, String) {
    let mut parameters = json!({"age_years": age});
    if let (Some(map), Value::Object(extra)) = (parameters.as_object_mut(), extra) {
        map.extend(extra);
    }
    outcome("hasbled", parameters)
}

#[test]
fn hasbled_elderly_is_strictly_over_65() {
    assert_eq!(hasbled(65.0, json!({})), (json!(0), "low".into()));
    assert_eq!(hasbled(65.5, json!({})), (json!(1), "low".into()));
    assert_eq!(hasbled(66.0, json!({})), (json!(1), "low".into()));
}

#[test]
fn hasbled_band_edges() {
    assert_eq!(hasbled(66.0, json!({"labile_inr": true})), (json!(2), "moderate".into()));
    assert_eq!(
        hasbled(40.0, json!({"labile_inr": true, "stroke_history": true})),
        (json!(2), "moderate".into())
    );
    assert_eq!(hasbled(66.0, json!({"labile_inr": true, "stroke_history": true})), (json!(3), "high".into()));
}

#[test]
fn hasbled_maximum_rates_and_defaults() {
    let all = json!({
        "hypertension_uncontrolled": true, "abnormal_renal_function": true, "abnormal_liver_function": true,
        "stroke_history": true, "bleeding_history": true, "labile_inr": true,
        "antiplatelet_or_nsaid": true, "alcohol_excess": true
    });
    assert_eq!(hasbled(80.0, all), (json!(9), "high".into()));
    let result = run("hasbled", json!({"age_years": 70, "labile_inr": true, "alcohol_excess": true}));
    assert_eq!(result["score"], json!(3));
    let text = result["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("3.74"), "{text}");
    assert!(result["recommendations"].to_string().contains("not a reason to withhold"));
    let six = run(
        "hasbled",
        json!({"age_years": 70, "labile_inr": true, "alcohol_excess": true,
        "stroke_history": true, "bleeding_history": true, "antiplatelet_or_nsaid": true}),
    );
    assert_eq!(six["score"], json!(6));
    assert!(six["interpretation"].as_str().unwrap_or_default().contains("insufficient"));
    assert_eq!(result["parameters_used"]["hypertension_uncontrolled"], json!(false));
    assert_eq!(result["parameters_used"].as_object().map(|map| map.len()), Some(9));
}

#[test]
fn hasbled_rejects_chadsvasc_only_fields() {
    let message = rejected("hasbled", json!({"age_years": 70, "sex": "male"}));
    assert!(message.contains("sex"), "{message}");
    let message = rejected("hasbled", json!({}));
    assert!(message.contains("age_years"), "{message}");
}
