//! `wells_dvt` and `wells_pe`: the seed example, every tier edge, two-tier verdicts and defaults.

use serde_json::json;

use super::{outcome, rejected, run};

#[test]
fn seed_example_scores_5_high_not_6() {
    let result = run(
        "wells_dvt",
        json!({
            "active_cancer": true, "paralysis_recent": false, "bedridden_3days": true,
            "localized_tenderness": true, "entire_leg_swollen": false, "calf_swelling_3cm": true,
            "pitting_edema": true, "collateral_veins": false, "alternative_diagnosis": false
        }),
    );
    assert_eq!(result["score"], json!(5));
    assert!(result["score"].is_i64());
    assert_eq!(result["risk_category"], json!("high"));
    let text = result["interpretation"].as_str().unwrap_or_default();
    assert!(text.contains("High") && text.contains("DVT likely"), "{text}");
    let recommendations = result["recommendations"].to_string();
    assert!(recommendations.contains("ultrasound") && recommendations.contains("anticoagulation"));
    // The 2003 criterion absent from the seed call is filled in and echoed.
    assert_eq!(result["parameters_used"]["previous_dvt"], json!(false));
    assert_eq!(result["parameters_used"].as_object().map(|map| map.len()), Some(10));
}

#[test]
fn dvt_tiers_and_two_tier_edges() {
    let cases = [
        (json!({"active_cancer": true, "alternative_diagnosis": true}), -1, "low", "unlikely"),
        (json!({}), 0, "low", "unlikely"),
        (json!({"previous_dvt": true}), 1, "moderate", "unlikely"),
        (json!({"previous_dvt": true, "entire_leg_swollen": true}), 2, "moderate", "likely"),
        (
            json!({"previous_dvt": true, "entire_leg_swollen": true, "collateral_veins": true}),
            3,
            "high",
            "likely",
        ),
        (json!({"alternative_diagnosis": true}), -2, "low", "unlikely"),
    ];
    for (parameters, score, category, verdict) in cases {
        let result = run("wells_dvt", parameters);
        assert_eq!(result["score"], json!(score));
        assert_eq!(result["risk_category"], json!(category), "score {score}");
        let text = result["interpretation"].as_str().unwrap_or_default();
        assert!(text.contains(&format!("DVT {verdict}")), "score {score}: {text}");
    }
}

#[test]
fn dvt_maximum_is_9() {
    let all = json!({
        "active_cancer": true, "paralysis_recent": true, "bedridden_3days": true,
        "localized_tenderness": true, "entire_leg_swollen": true, "calf_swelling_3cm": true,
        "pitting_edema": true, "collateral_veins": true, "previous_dvt": true
    });
    assert_eq!(outcome("wells_dvt", all), (json!(9), "high".to_string()));
}

#[test]
fn pe_half_point_tiers() {
    let cases = [
        (json!({}), 0.0, "low", false),
        (json!({"heart_rate_over_100": true}), 1.5, "low", false),
        (json!({"hemoptysis": true, "active_cancer": true}), 2.0, "moderate", false),
        (json!({"clinical_signs_dvt": true, "active_cancer": true}), 4.0, "moderate", false),
        (json!({"clinical_signs_dvt": true, "previous_dvt_or_pe": true}), 4.5, "moderate", true),
        (json!({"clinical_signs_dvt": true, "pe_most_likely_diagnosis": true}), 6.0, "moderate", true),
        (
            json!({"clinical_signs_dvt": true, "heart_rate_over_100": true, "hemoptysis": true,
                "active_cancer": true}),
            6.5,
            "high",
            true,
        ),
    ];
    for (parameters, score, category, likely) in cases {
        let result = run("wells_pe", parameters);
        assert_eq!(result["score"], json!(score));
        assert!(result["score"].is_f64(), "one-decimal number");
        assert_eq!(result["risk_category"], json!(category), "score {score}");
        let text = result["interpretation"].as_str().unwrap_or_default();
        let expected = if likely { "PE likely" } else { "PE unlikely" };
        assert!(text.contains(expected), "score {score}: {text}");
        assert!(text.contains(&format!("{score:.1}")), "{text}");
    }
}

#[test]
fn pe_maximum_and_defaults() {
    let all = json!({
        "clinical_signs_dvt": true, "pe_most_likely_diagnosis": true, "heart_rate_over_100": true,
        "immobilization_or_recent_surgery": true, "previous_dvt_or_pe": true, "hemoptysis": true,
        "active_cancer": true
    });
    assert_eq!(outcome("wells_pe", all), (json!(12.5), "high".to_string()));
    let result = run("wells_pe", json!({"hemoptysis": true}));
    assert_eq!(result["parameters_used"].as_object().map(|map| map.len()), Some(7));
    assert_eq!(result["parameters_used"]["heart_rate_over_100"], json!(false));
    assert_eq!(result["score"].to_string(), "1.0");
}

#[test]
fn wells_rejects_numbers_and_foreign_fields() {
    let message = rejected("wells_pe", json!({"heart_rate_bpm": 120}));
    assert!(message.contains("heart_rate_bpm"), "{message}");
    let message = rejected("wells_dvt", json!({"previous_dvt_or_pe": true}));
    assert!(message.contains("previous_dvt_or_pe"), "{message}");
}
