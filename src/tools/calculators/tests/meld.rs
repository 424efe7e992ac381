//! `meld`: OPTN worked values (hand-computed with Python `Decimal`, half-up) for MELD, MELD-Na and
//! MELD 3.0, the rounding traps of CALCULATORS.md §8, the dialysis override, bounds, caps and bands.

use serde_json::{Value, json};

use super::super::meld::{meld_initial, meld_na};
use super::{assert_names_field_not_value, outcome, rejected, run};

fn labs(creatinine: f64, bilirubin: f64, inr: f64, sodium: f64) -> Value {
    json!({"creatinine_mg_dl": creatinine, "bilirubin_mg_dl": bilirubin, "inr": inr, "sodium_mmol_l": sodium})
}

fn with(mut parameters: Value, extra: Value) -> Value {
    if let (Some(map), Value::Object(extra)) = (parameters.as_object_mut(), extra) {
        map.extend(extra);
    }
    parameters
}

#[test]
fn classic_example_cr_1_9_bili_4_2_inr_1_2_na_132() {
    // 0.957 ln 1.9 + 0.378 ln 4.2 + 1.12 ln 1.2 + 0.643 = 2.0039 -> 2.0 -> MELD(i) 20;
    // 20 + 1.32·5 − 0.033·20·5 = 23.3 -> 23.
    let result = run("meld", labs(1.9, 4.2, 1.2, 132.0));
    assert_eq!(result["score"], json!(23));
    assert!(result["score"].is_i64());
    assert_eq!(result["risk_category"], json!("high"));
    let text = result["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("MELD(i) 20") && text.contains("19.6%"), "{text}");
    assert_eq!(outcome("meld", with(labs(1.9, 4.2, 1.2, 132.0), json!({"version": "meld"}))).0, json!(20));
}

#[test]
fn tenth_rounding_before_times_ten_17_472_gives_17() {
    // raw 1.74716: OPTN rounds to 1.7 then ×10 = 17 (multiplying first gives 17.5 -> 18).
    assert_eq!(meld_initial(1.5, 2.0, 1.5), 17);
    assert_eq!(outcome("meld", with(labs(1.5, 2.0, 1.5, 130.0), json!({"version": "meld"}))).0, json!(17));
    // MELD-Na from the rounded 17: 17 + 9.24 − 3.927 = 22.313 -> 22 (23 with the 17.5 path).
    assert_eq!(outcome("meld", labs(1.5, 2.0, 1.5, 130.0)).0, json!(22));
}

#[test]
fn tenth_rounding_12_5_path_gives_13_and_23() {
    // raw 1.25039 -> 1.3 -> 13 (one-decimal-after-×10 keeps 12.5); 13 + 14.52 − 4.719 = 22.801 -> 23.
    assert_eq!(meld_initial(1.0, 1.5, 1.5), 13);
    assert_eq!(outcome("meld", labs(1.0, 1.5, 1.5, 126.0)).0, json!(23));
}

#[test]
fn sodium_term_only_when_meld_i_above_11() {
    // raw 1.10921 -> MELD(i) 11: no sodium term even at Na 125 (11.1 > 11 would wrongly give 23).
    assert_eq!(meld_initial(1.0, 2.0, 1.2), 11);
    assert_eq!(outcome("meld", labs(1.0, 2.0, 1.2, 125.0)), (json!(11), "moderate".into()));
    // MELD(i) 12 at Na 125: 12 + 15.84 − 4.752 = 23.088 -> 23.
    assert_eq!(meld_initial(1.0, 3.9, 1.0), 12);
    assert_eq!(outcome("meld", labs(1.0, 3.9, 1.0, 125.0)), (json!(23), "high".into()));
    assert_eq!(meld_na(11, 125.0), (11, false));
    assert_eq!(meld_na(12, 125.0), (23, true));
}

#[test]
fn meld_na_is_evaluated_exactly_and_rounded_half_up() {
    // 20 + 0.66·5.5 = 23.63 -> 24; 30 + 0.33·1.5 = 30.495 -> 30; 20 + 0.66·2.25 = 21.485 -> 21;
    // 14 + 0.858·1.75 = 15.5015 -> 16 (decimal Na values are read exactly).
    assert_eq!(meld_na(20, 131.5), (24, true));
    assert_eq!(meld_na(30, 135.5), (30, true));
    assert_eq!(meld_na(20, 134.75), (21, true));
    assert_eq!(meld_na(14, 135.25), (16, true));
    // At Na 137 the term vanishes; above MELD(i) 40 it lowers the value but the cap still holds.
    assert_eq!(meld_na(25, 137.0), (25, true));
    assert_eq!(meld_na(70, 125.0), (40, true));
}

#[test]
fn dialysis_overrides_the_floor() {
    // Cr 0.7 with dialysis is 4.0 (not the 1.0 floor): MELD(i) 28 at bili 1.0, INR 1.9; Na 135.
    let result = run("meld", with(labs(0.7, 1.0, 1.9, 135.0), json!({"dialysis_twice_past_week": true})));
    assert_eq!(result["score"], json!(28));
    assert_eq!(result["parameters_used"]["creatinine_mg_dl"], json!(4.0));
    assert_eq!(result["parameters_used"]["dialysis_twice_past_week"], json!(true));
    assert!(result["parameters_used"]["clamped"].to_string().contains("creatinine_mg_dl"));
    // Without dialysis the floor applies: 16.
    assert_eq!(outcome("meld", labs(0.7, 1.0, 1.9, 135.0)).0, json!(16));
}

#[test]
fn floors_caps_and_echoed_values() {
    let result = run("meld", labs(0.5, 0.5, 0.9, 140.0));
    assert_eq!(result["score"], json!(6));
    assert_eq!(result["risk_category"], json!("low"));
    let used = &result["parameters_used"];
    assert_eq!(used["version"], json!("meld_na"));
    assert_eq!(used["creatinine_mg_dl"], json!(1.0));
    assert_eq!(used["bilirubin_mg_dl"], json!(1.0));
    assert_eq!(used["inr"], json!(1.0));
    assert_eq!(used["sodium_mmol_l"], json!(137.0));
    assert_eq!(used["dialysis_twice_past_week"], json!(false));
    assert_eq!(used["clamped"], json!(["creatinine_mg_dl", "bilirubin_mg_dl", "inr", "sodium_mmol_l"]));
    // Creatinine above 4.0 is capped; the total is capped at 40 (MELD(i) here is 70).
    assert_eq!(meld_initial(4.0, 80.0, 20.0), 70);
    let capped = run("meld", labs(8.0, 80.0, 20.0, 120.0));
    assert_eq!(capped["score"], json!(40));
    assert_eq!(capped["risk_category"], json!("critical"));
    assert_eq!(capped["parameters_used"]["creatinine_mg_dl"], json!(4.0));
    assert_eq!(capped["parameters_used"]["sodium_mmol_l"], json!(125.0));
    assert_eq!(outcome("meld", with(labs(8.0, 80.0, 20.0, 120.0), json!({"version": "meld"}))).0, json!(40));
    // Sodium below 125 counts as 125.
    assert_eq!(outcome("meld", labs(1.5, 2.0, 1.5, 120.0)).0, outcome("meld", labs(1.5, 2.0, 1.5, 125.0)).0);
}

#[test]
fn risk_band_edges() {
    // Classic MELD, MELD(i) hand-computed: raw 0.905 -> 9, 1.0005 -> 10, 1.8734 -> 19, 2.0267 -> 20,
    // 2.8729 -> 29, 2.9817 -> 30, 3.9121 -> 39, 3.9781 -> 40, 4.0979 -> 41 capped to 40.
    let cases = [
        (1.0, 2.0, 1.0, 9, "low"),
        (1.0, 1.5, 1.2, 10, "moderate"),
        (1.0, 1.0, 3.0, 19, "moderate"),
        (1.0, 1.5, 3.0, 20, "high"),
        (1.0, 6.0, 4.0, 29, "high"),
        (1.0, 8.0, 4.0, 30, "very_high"),
        (1.4, 40.0, 4.0, 39, "very_high"),
        (1.5, 40.0, 4.0, 40, "critical"),
        (1.7, 40.0, 4.0, 40, "critical"),
    ];
    for (creatinine, bilirubin, inr, expected, category) in cases {
        let parameters = json!({"version": "meld", "creatinine_mg_dl": creatinine,
            "bilirubin_mg_dl": bilirubin, "inr": inr});
        assert_eq!(outcome("meld", parameters), (json!(expected), category.to_string()), "MELD {expected}");
    }
    assert_eq!(meld_initial(1.7, 40.0, 4.0), 41);
    // Transplant referral is suggested from 15.
    let referral =
        |score_inputs: Value| run("meld", score_inputs)["recommendations"].to_string().contains("transplant");
    assert!(!referral(
        json!({"version": "meld", "creatinine_mg_dl": 1.0, "bilirubin_mg_dl": 2.0, "inr": 1.0})
    ));
    assert!(referral(
        json!({"version": "meld", "creatinine_mg_dl": 1.0, "bilirubin_mg_dl": 1.5, "inr": 3.0})
    ));
}

#[test]
fn meld_3_0_examples_caps_and_bounds() {
    let base = json!({"version": "meld_3_0", "creatinine_mg_dl": 1.5, "bilirubin_mg_dl": 3.0, "inr": 1.8,
        "sodium_mmol_l": 130, "albumin_g_dl": 2.8});
    // Hand-computed: female 26.869 -> 27; male 25.539 -> 26.
    assert_eq!(outcome("meld", with(base.clone(), json!({"sex": "female"}))), (json!(27), "high".into()));
    assert_eq!(outcome("meld", with(base, json!({"sex": "male"}))).0, json!(26));
    // Creatinine cap 3.0 (not 4.0), and dialysis sets 3.0 even from a low value: 26.312 -> 26 each.
    let labs_3 = |creatinine: f64, dialysis: bool| {
        json!({"version": "meld_3_0", "creatinine_mg_dl": creatinine,
        "bilirubin_mg_dl": 2.0, "inr": 1.5, "sodium_mmol_l": 135, "albumin_g_dl": 3.0, "sex": "male",
        "dialysis_twice_past_week": dialysis})
    };
    assert_eq!(outcome("meld", labs_3(3.0, false)).0, json!(26));
    let capped = run("meld", labs_3(3.5, false));
    assert_eq!(capped["score"], json!(26));
    assert_eq!(capped["parameters_used"]["creatinine_mg_dl"], json!(3.0));
    let dialysis = run("meld", labs_3(0.5, true));
    assert_eq!(dialysis["score"], json!(26));
    assert_eq!(dialysis["parameters_used"]["creatinine_mg_dl"], json!(3.0));
    // Normal labs and albumin 4.0 (bounded to 3.5) give the floor 6; extreme labs the cap 40.
    let floor = run(
        "meld",
        json!({"version": "meld_3_0", "creatinine_mg_dl": 0.8, "bilirubin_mg_dl": 1.0,
        "inr": 1.0, "sodium_mmol_l": 140, "albumin_g_dl": 4.0, "sex": "male"}),
    );
    assert_eq!(floor["score"], json!(6));
    assert_eq!(floor["parameters_used"]["albumin_g_dl"], json!(3.5));
    assert_eq!(floor["parameters_used"]["sodium_mmol_l"], json!(137.0));
    let top = run(
        "meld",
        json!({"version": "meld_3_0", "creatinine_mg_dl": 4.0, "bilirubin_mg_dl": 30.0,
        "inr": 5.0, "sodium_mmol_l": 120, "albumin_g_dl": 1.0, "sex": "female"}),
    );
    assert_eq!(top["score"], json!(40));
    assert_eq!(top["parameters_used"]["albumin_g_dl"], json!(1.5));
}

/// With normal labs (bilirubin, INR and creatinine clamped to 1.0) every logarithm is 0 and the
/// score is an exact decimal: a half-way total rounds up, as MELD-Na's does. In floating point
/// 9.5 came out as 9.4999… and rounded to 9 (a band lower).
#[test]
fn meld_3_0_rounds_exact_half_way_totals_up() {
    let normal = |sex: &str, sodium: f64, albumin: f64| {
        json!({"version": "meld_3_0", "creatinine_mg_dl": 0.8, "bilirubin_mg_dl": 0.6, "inr": 1.0,
        "sodium_mmol_l": sodium, "albumin_g_dl": albumin, "sex": sex})
    };
    // 0.82·1.2 + 1.85·1.36 + 6 = 9.5 exactly.
    assert_eq!(outcome("meld", normal("male", 135.8, 2.14)), (json!(10), "moderate".into()));
    // 1.33 + 0.82·10.6 + 1.85·1.88 + 6 = 19.5 exactly.
    assert_eq!(outcome("meld", normal("female", 126.4, 1.62)).0, json!(20));
    // 0.82·8.2 + 1.85·0.96 + 6 = 14.5 exactly.
    assert_eq!(outcome("meld", normal("male", 128.8, 2.54)).0, json!(15));
}

#[test]
fn version_dependent_requirements() {
    let no_sodium = json!({"creatinine_mg_dl": 1.0, "bilirubin_mg_dl": 1.0, "inr": 1.0});
    assert!(rejected("meld", no_sodium.clone()).contains("sodium_mmol_l"));
    assert_eq!(outcome("meld", with(no_sodium.clone(), json!({"version": "meld"}))).0, json!(6));
    let message = rejected("meld", with(no_sodium, json!({"version": "meld_3_0", "sodium_mmol_l": 130})));
    assert!(message.contains("albumin_g_dl") && message.contains("sex"), "{message}");
    let message = rejected("meld", labs(1.0, 1.0, 1.0, 1370.0));
    assert_names_field_not_value(&message, "/parameters/sodium_mmol_l", "1370");
    let message = rejected("meld", with(labs(1.0, 1.0, 1.0, 137.0), json!({"version": "meld_4"})));
    assert_names_field_not_value(&message, "/parameters/version", "meld_4");
}
