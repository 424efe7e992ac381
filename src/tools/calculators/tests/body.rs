//! `renal_dosing` and `bmi`: Cockcroft–Gault with each weight basis (hand-computed with Python
//! `Decimal`), band edges on the rounded value, half-up traps, and the WHO BMI cut-offs.

use serde_json::{Value, json};

use super::{assert_names_field_not_value, outcome, rejected, run};

fn renal(age: f64, sex: &str, weight: f64, creatinine: f64, extra: Value) -> Value {
    let mut parameters =
        json!({"age_years": age, "sex": sex, "weight_kg": weight, "creatinine_mg_dl": creatinine});
    if let (Some(map), Value::Object(extra)) = (parameters.as_object_mut(), extra) {
        map.extend(extra);
    }
    run("renal_dosing", parameters)
}

#[test]
fn actual_weight_without_height() {
    // (140 − 60) × 72 / (72 × 1.0) = 80.0; × 0.85 = 68.0.
    let male = renal(60.0, "male", 72.0, 1.0, json!({}));
    assert_eq!(male["score"], json!(80.0));
    assert!(male["score"].is_f64());
    assert_eq!(male["risk_category"], json!("mild"));
    let used = &male["parameters_used"];
    assert_eq!(used["weight_basis"], json!("auto"));
    assert_eq!(used["weight_used"], json!("actual"));
    assert_eq!(used["dosing_weight_kg"], json!(72.0));
    assert!(used.get("height_cm").is_none() && used.get("bmi_kg_m2").is_none());
    let female = renal(60.0, "female", 72.0, 1.0, json!({}));
    assert_eq!(female["score"], json!(68.0));
    let text = female["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("drug label") && text.contains("dialysis"), "{text}");
}

#[test]
fn auto_normal_bmi_uses_the_lesser_of_ideal_and_actual() {
    // 180 cm male: IBW 74.992 kg < 75 kg actual, BMI 23.1 -> ideal; 90 × 74.992 / 86.4 = 78.1.
    let ideal = renal(50.0, "male", 75.0, 1.2, json!({"height_cm": 180}));
    assert_eq!(ideal["score"], json!(78.1));
    assert_eq!(ideal["parameters_used"]["weight_used"], json!("ideal"));
    assert_eq!(ideal["parameters_used"]["dosing_weight_kg"], json!(75.0));
    assert_eq!(ideal["parameters_used"]["ideal_body_weight_kg"], json!(75.0));
    assert_eq!(ideal["parameters_used"]["bmi_kg_m2"], json!(23.1));
    // 175 cm male, 70 kg: IBW 70.46 kg > actual -> actual; 100 × 70 / 72 = 97.2.
    let actual = renal(40.0, "male", 70.0, 1.0, json!({"height_cm": 175}));
    assert_eq!(actual["score"], json!(97.2));
    assert_eq!(actual["risk_category"], json!("normal"));
    assert_eq!(actual["parameters_used"]["weight_used"], json!("actual"));
}

#[test]
fn auto_overweight_uses_adjusted_and_underweight_actual() {
    // 165 cm female, 95 kg: BMI 34.9, IBW 56.909, adjusted 72.146; 75 × 72.146 / 79.2 × 0.85 = 58.1.
    let adjusted = renal(65.0, "female", 95.0, 1.1, json!({"height_cm": 165}));
    assert_eq!(adjusted["score"], json!(58.1));
    assert_eq!(adjusted["risk_category"], json!("moderate"));
    assert_eq!(adjusted["parameters_used"]["weight_used"], json!("adjusted"));
    assert_eq!(adjusted["parameters_used"]["dosing_weight_kg"], json!(72.1));
    // 64 kg / 160 cm is BMI 25.0 exactly: adjusted (IBW 52.382 -> 57.03 kg); 90 × 57.03 / 72 × 0.85 = 60.6.
    let edge = renal(50.0, "female", 64.0, 1.0, json!({"height_cm": 160}));
    assert_eq!(edge["parameters_used"]["bmi_kg_m2"], json!(25.0));
    assert_eq!(edge["parameters_used"]["weight_used"], json!("adjusted"));
    assert_eq!(edge["score"], json!(60.6));
    // 165 cm female, 45 kg: BMI 16.5 -> actual; 70 × 45 / 64.8 × 0.85 = 41.3.
    let thin = renal(70.0, "female", 45.0, 0.9, json!({"height_cm": 165}));
    assert_eq!(thin["score"], json!(41.3));
    assert_eq!(thin["parameters_used"]["weight_used"], json!("actual"));
}

#[test]
fn explicit_weight_bases() {
    let obese =
        |basis: &str| renal(65.0, "female", 95.0, 1.1, json!({"height_cm": 165, "weight_basis": basis}));
    assert_eq!(obese("ideal")["score"], json!(45.8));
    assert_eq!(obese("ideal")["parameters_used"]["weight_used"], json!("ideal"));
    assert_eq!(obese("adjusted")["score"], json!(58.1));
    assert_eq!(obese("actual")["score"], json!(76.5));
    assert_eq!(obese("actual")["parameters_used"]["weight_basis"], json!("actual"));
    let lean = renal(50.0, "male", 75.0, 1.2, json!({"height_cm": 180, "weight_basis": "adjusted"}));
    assert_eq!(lean["score"], json!(78.1));
    assert_eq!(lean["parameters_used"]["weight_used"], json!("adjusted"));
}

#[test]
fn band_edges_on_the_rounded_value() {
    // Male, no height: (140 − age) × w / (72 × Cr).
    let cases = [
        (50.0, 72.0, 1.0, 90.0, "normal"),
        (50.0, 71.9, 1.0, 89.9, "mild"),
        (80.0, 72.0, 1.0, 60.0, "mild"),
        (80.0, 71.9, 1.0, 59.9, "moderate"),
        // 29.958 rounds to 30.0: moderate, decided on the reported value.
        (110.0, 71.9, 1.0, 30.0, "moderate"),
        (110.0, 71.8, 1.0, 29.9, "severe"),
        (110.0, 72.0, 2.0, 15.0, "severe"),
        (110.0, 71.7, 2.0, 14.9, "kidney_failure"),
        // (140 − 50) × 71.96 / 72 = 89.95 exactly (89.94999… in doubles): half-up gives 90.0.
        (50.0, 71.96, 1.0, 90.0, "normal"),
    ];
    for (age, weight, creatinine, score, category) in cases {
        let result = renal(age, "male", weight, creatinine, json!({}));
        assert_eq!(result["score"], json!(score), "age {age} weight {weight}");
        assert_eq!(result["risk_category"], json!(category), "age {age} weight {weight}");
    }
    let failure = renal(110.0, "male", 71.7, 2.0, json!({}));
    assert!(failure["recommendations"].to_string().contains("nephrology"));
}

#[test]
fn very_short_stature_falls_back_to_actual_weight() {
    // Devine IBW at 101 cm female is negative: auto uses actual (20 kg): 110 × 20 / 72 × 0.85 = 26.0.
    let result = renal(30.0, "female", 20.0, 1.0, json!({"height_cm": 101}));
    assert_eq!(result["score"], json!(26.0));
    assert_eq!(result["parameters_used"]["weight_used"], json!("actual"));
    let message = rejected(
        "renal_dosing",
        json!({"age_years": 30, "sex": "female", "weight_kg": 20,
        "creatinine_mg_dl": 1.0, "height_cm": 101, "weight_basis": "ideal"}),
    );
    assert_names_field_not_value(&message, "height_cm", "101");
}

#[test]
fn renal_validation() {
    let base = json!({"age_years": 50, "sex": "male", "weight_kg": 70, "creatinine_mg_dl": 1.0});
    for basis in ["ideal", "adjusted"] {
        let mut parameters = base.clone();
        parameters["weight_basis"] = json!(basis);
        assert!(rejected("renal_dosing", parameters).contains("height_cm"), "{basis}");
    }
    let mut micromolar = base.clone();
    micromolar["creatinine_mg_dl"] = json!(88.4);
    assert_names_field_not_value(
        &rejected("renal_dosing", micromolar),
        "/parameters/creatinine_mg_dl",
        "88.4",
    );
    let mut heavy = base.clone();
    heavy["weight_kg"] = json!(450.5);
    assert_names_field_not_value(&rejected("renal_dosing", heavy), "/parameters/weight_kg", "450.5");
    let mut missing = base;
    if let Some(map) = missing.as_object_mut() {
        map.remove("sex");
    }
    assert!(rejected("renal_dosing", missing).contains("sex"));
}

fn bmi(weight: f64, height: f64) -> (Value, String) {
    outcome("bmi", json!({"weight_kg": weight, "height_cm": height}))
}

#[test]
fn bmi_64_kg_160_cm_is_25_overweight() {
    let result = run("bmi", json!({"weight_kg": 64, "height_cm": 160}));
    assert_eq!(result["score"], json!(25.0));
    assert_eq!(result["score"].to_string(), "25.0");
    assert_eq!(result["risk_category"], json!("overweight"));
    // Inputs are echoed exactly as given.
    assert_eq!(result["parameters_used"], json!({"weight_kg": 64, "height_cm": 160}));
    assert!(result["interpretation"].as_str().unwrap_or_default().contains("WHO"));
}

#[test]
fn bmi_who_edges_on_the_rounded_value() {
    // 200 cm: BMI = kg / 4. 73.8 kg is 18.45 -> 18.5 (half-up); 99.8 kg is 24.95 -> 25.0.
    let cases = [
        (63.7, 15.9, "underweight"),
        (64.0, 16.0, "underweight"),
        (73.7, 18.4, "underweight"),
        (73.8, 18.5, "normal"),
        (74.0, 18.5, "normal"),
        (99.7, 24.9, "normal"),
        (99.8, 25.0, "overweight"),
        (119.7, 29.9, "overweight"),
        (120.0, 30.0, "obese_class_1"),
        (139.7, 34.9, "obese_class_1"),
        (140.0, 35.0, "obese_class_2"),
        (159.7, 39.9, "obese_class_2"),
        (160.0, 40.0, "obese_class_3"),
    ];
    for (weight, score, category) in cases {
        assert_eq!(bmi(weight, 200.0), (json!(score), category.to_string()), "{weight} kg");
    }
    let severe = run("bmi", json!({"weight_kg": 63.7, "height_cm": 200}));
    assert!(severe["interpretation"].as_str().unwrap_or_default().contains("severe thinness"));
    let mild = run("bmi", json!({"weight_kg": 68.0, "height_cm": 200}));
    assert!(mild["interpretation"].as_str().unwrap_or_default().contains("mild thinness"));
}

#[test]
fn bmi_validation() {
    let message = rejected("bmi", json!({"weight_kg": 70, "height_cm": 1.75}));
    assert_names_field_not_value(&message, "/parameters/height_cm", "1.75");
    assert!(rejected("bmi", json!({"height_cm": 170})).contains("weight_kg"));
    let message = rejected("bmi", json!({"weight_kg": 70, "height_cm": 175, "weight_basis": "auto"}));
    assert!(message.contains("weight_basis"), "{message}");
}
