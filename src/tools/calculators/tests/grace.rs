//! `grace`: the UMass worked patient (209), every item's band edges (lower edge in the upper band),
//! Killip points, NSTE-ACS and STEMI strata edges, extremes and defaults.

use serde_json::{Value, json};

use super::{assert_names_field_not_value, rejected, run};

/// The UMass "Methods and formulas" worked patient: age 57, pulse 70, SBP 110, Cr 1.2, Killip III,
/// cardiac arrest, ST deviation, no enzymes: 41 + 9 + 43 + 10 + 39 + 39 + 28 = 209.
fn umass_patient() -> Value {
    json!({
        "age_years": 57, "heart_rate_bpm": 70, "systolic_bp_mmhg": 110, "creatinine_mg_dl": 1.2,
        "killip_class": 3, "cardiac_arrest_at_admission": true, "st_segment_deviation": true
    })
}

fn score_with(field: &str, value: Value) -> i64 {
    let mut parameters = umass_patient();
    parameters[field] = value;
    run("grace", parameters)["score"].as_i64().unwrap_or(i64::MIN)
}

#[test]
fn umass_worked_patient_scores_209() {
    let result = run("grace", umass_patient());
    assert_eq!(result["score"], json!(209));
    assert_eq!(result["risk_category"], json!("high"));
    let text = result["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("18%") && text.contains("23%"), "{text}");
    // The guideline's current strength (ESC 2023: class IIa), not the 2020 "recommended".
    let advice = result["recommendations"].to_string();
    assert!(advice.contains("should be considered") && !advice.contains("is recommended"), "{advice}");
    let used = &result["parameters_used"];
    assert_eq!(used["acs_type"], json!("nste_acs"));
    assert_eq!(used["elevated_cardiac_enzymes"], json!(false));
    assert_eq!(used["killip_class"], json!(3));
    assert_eq!(used.as_object().map(|map| map.len()), Some(9));
}

#[test]
fn age_bands_put_the_edge_in_the_upper_band() {
    // Base 209 contains 41 age points (50–59).
    let expected = [
        (29.0, 0),
        (30.0, 8),
        (39.0, 8),
        (40.0, 25),
        (49.9, 25),
        (50.0, 41),
        (59.0, 41),
        (60.0, 58),
        (69.0, 58),
        (70.0, 75),
        (79.0, 75),
        (80.0, 91),
        (89.0, 91),
        (90.0, 100),
        (120.0, 100),
    ];
    for (age, points) in expected {
        assert_eq!(score_with("age_years", json!(age)), 209 - 41 + points, "age {age}");
    }
}

#[test]
fn heart_rate_bands() {
    let expected = [
        (20.0, 0),
        (49.0, 0),
        (49.5, 0),
        (50.0, 3),
        (69.0, 3),
        (69.5, 3),
        (70.0, 9),
        (89.0, 9),
        (90.0, 15),
        (109.0, 15),
        (110.0, 24),
        (149.0, 24),
        (150.0, 38),
        (199.0, 38),
        (200.0, 46),
        (300.0, 46),
    ];
    for (rate, points) in expected {
        assert_eq!(score_with("heart_rate_bpm", json!(rate)), 209 - 9 + points, "heart rate {rate}");
    }
}

#[test]
fn systolic_bands() {
    let expected = [
        (30.0, 58),
        (79.0, 58),
        (80.0, 53),
        (99.0, 53),
        (100.0, 43),
        (119.0, 43),
        (120.0, 34),
        (139.0, 34),
        (140.0, 24),
        (159.0, 24),
        (160.0, 10),
        (199.0, 10),
        (200.0, 0),
        (300.0, 0),
    ];
    for (pressure, points) in expected {
        assert_eq!(score_with("systolic_bp_mmhg", json!(pressure)), 209 - 43 + points, "SBP {pressure}");
    }
}

#[test]
fn creatinine_bands() {
    let expected = [
        (0.1, 1),
        (0.39, 1),
        (0.4, 4),
        (0.79, 4),
        (0.8, 7),
        (1.19, 7),
        (1.2, 10),
        (1.59, 10),
        (1.6, 13),
        (1.99, 13),
        (2.0, 21),
        (3.99, 21),
        (4.0, 28),
        (20.0, 28),
    ];
    for (creatinine, points) in expected {
        assert_eq!(score_with("creatinine_mg_dl", json!(creatinine)), 209 - 10 + points, "Cr {creatinine}");
    }
}

#[test]
fn killip_and_flag_points() {
    for (class, points) in [(1, 0), (2, 20), (3, 39), (4, 59)] {
        assert_eq!(score_with("killip_class", json!(class)), 209 - 39 + points, "Killip {class}");
    }
    assert_eq!(score_with("elevated_cardiac_enzymes", json!(true)), 223);
    assert_eq!(score_with("cardiac_arrest_at_admission", json!(false)), 170);
    assert_eq!(score_with("st_segment_deviation", json!(false)), 181);
}

/// (age, HR, SBP, Cr, Killip, arrest, ST, enzymes) → a chosen total.
fn total(items: (f64, f64, f64, f64, i64, bool, bool, bool), acs_type: &str) -> (Value, Value) {
    let (age, rate, pressure, creatinine, killip, arrest, st, enzymes) = items;
    let result = run(
        "grace",
        json!({
            "age_years": age, "heart_rate_bpm": rate, "systolic_bp_mmhg": pressure,
            "creatinine_mg_dl": creatinine,
            "killip_class": killip, "cardiac_arrest_at_admission": arrest, "st_segment_deviation": st,
            "elevated_cardiac_enzymes": enzymes, "acs_type": acs_type
        }),
    );
    (result["score"].clone(), result["risk_category"].clone())
}

#[test]
fn nste_acs_strata_edges() {
    // 0 + 0 + 53 + 7 + 20 + 28 = 108; 0 + 0 + 53 + 28 + 0 + 28 = 109.
    assert_eq!(total((25.0, 45.0, 90.0, 1.0, 2, false, true, false), "nste_acs"), (json!(108), json!("low")));
    assert_eq!(
        total((25.0, 45.0, 90.0, 5.0, 1, false, true, false), "nste_acs"),
        (json!(109), json!("intermediate"))
    );
    // 58 + 1 + 39 + 28 + 14 = 140; 58 + 10 + 20 + 39 + 14 = 141.
    assert_eq!(
        total((25.0, 45.0, 70.0, 0.3, 1, true, true, true), "nste_acs"),
        (json!(140), json!("intermediate"))
    );
    assert_eq!(total((25.0, 45.0, 70.0, 1.4, 2, true, false, true), "nste_acs"), (json!(141), json!("high")));
}

#[test]
fn stemi_strata_edges_and_extremes() {
    assert_eq!(total((25.0, 45.0, 70.0, 5.0, 1, true, false, false), "stemi"), (json!(125), json!("low")));
    assert_eq!(
        total((25.0, 45.0, 70.0, 0.3, 1, true, true, false), "stemi"),
        (json!(126), json!("intermediate"))
    );
    assert_eq!(
        total((25.0, 45.0, 70.0, 0.6, 3, true, false, true), "stemi"),
        (json!(154), json!("intermediate"))
    );
    assert_eq!(total((25.0, 45.0, 70.0, 1.4, 2, true, true, false), "stemi"), (json!(155), json!("high")));
    // The strata differ: 125 is low for STEMI but intermediate for NSTE-ACS.
    assert_eq!(
        total((25.0, 45.0, 70.0, 5.0, 1, true, false, false), "nste_acs"),
        (json!(125), json!("intermediate"))
    );
    assert_eq!(total((25.0, 45.0, 210.0, 0.3, 1, false, false, false), "stemi"), (json!(1), json!("low")));
    assert_eq!(total((95.0, 210.0, 70.0, 5.0, 4, true, true, true), "stemi"), (json!(372), json!("high")));
    let minimum = run(
        "grace",
        json!({"age_years": 25, "heart_rate_bpm": 45, "systolic_bp_mmhg": 210,
        "creatinine_mg_dl": 0.3, "killip_class": 1}),
    );
    assert!(minimum["interpretation"].as_str().unwrap_or_default().contains("0.2% or less"));
}

#[test]
fn grace_validation() {
    let mut missing = umass_patient();
    if let Some(map) = missing.as_object_mut() {
        map.remove("killip_class");
    }
    assert!(rejected("grace", missing).contains("killip_class"));
    let message = rejected("grace", {
        let mut p = umass_patient();
        p["killip_class"] = json!(5);
        p
    });
    assert_names_field_not_value(&message, "/parameters/killip_class", "5 ");
    let message = rejected("grace", {
        let mut p = umass_patient();
        p["killip_class"] = json!(2.5);
        p
    });
    assert_names_field_not_value(&message, "/parameters/killip_class", "2.5");
    let message = rejected("grace", {
        let mut p = umass_patient();
        p["creatinine_mg_dl"] = json!(97.3);
        p
    });
    assert_names_field_not_value(&message, "/parameters/creatinine_mg_dl", "97.3");
    let message = rejected("grace", {
        let mut p = umass_patient();
        p["acs_type"] = json!("nstemi-zebulon");
        p
    });
    assert_names_field_not_value(&message, "/parameters/acs_type", "zebulon");
}
