//! Wells' criteria for deep-vein thrombosis (`wells_dvt`) and pulmonary embolism (`wells_pe`):
//! boolean criteria, three-tier risk categories and the two-tier (likely/unlikely) verdict.

use serde_json::{Map, Value, json};

use super::common::{Assessment, Calculator, Params, echo_flags, flag, lines, object};
use crate::tools::ToolError;

pub(super) const WELLS_DVT: Calculator = Calculator {
    name: "wells_dvt",
    title: "Wells' criteria for DVT",
    schema: wells_dvt_schema,
    compute: wells_dvt,
};

pub(super) const WELLS_PE: Calculator = Calculator {
    name: "wells_pe",
    title: "Wells' criteria for pulmonary embolism",
    schema: wells_pe_schema,
    compute: wells_pe,
};

/// Wells DVT items worth +1 each: Wells 1997 (Lancet 350:1795) plus `previous_dvt` from Wells 2003
/// (NEJM 349:1227). `alternative_diagnosis` is −2.
const DVT_ONE_POINT_ITEMS: [(&str, &str); 9] = [
    ("active_cancer", "Active cancer (treatment within 6 months, or palliative)"),
    ("paralysis_recent", "Paralysis, paresis, or recent plaster immobilisation of a lower limb"),
    ("bedridden_3days", "Recently bedridden 3 days or more, or major surgery within 12 weeks"),
    ("localized_tenderness", "Localised tenderness along the deep venous system"),
    ("entire_leg_swollen", "Entire leg swollen"),
    ("calf_swelling_3cm", "Calf swelling over 3 cm compared with the other leg"),
    ("pitting_edema", "Pitting oedema confined to the symptomatic leg"),
    ("collateral_veins", "Collateral (non-varicose) superficial veins"),
    ("previous_dvt", "Previously documented DVT"),
];
const DVT_ALTERNATIVE: (&str, &str) =
    ("alternative_diagnosis", "Alternative diagnosis at least as likely as DVT (-2 points)");

fn wells_dvt_schema() -> Value {
    let mut properties: Vec<(&str, Value)> =
        DVT_ONE_POINT_ITEMS.iter().map(|(name, text)| (*name, flag(text))).collect();
    properties.push((DVT_ALTERNATIVE.0, flag(DVT_ALTERNATIVE.1)));
    object(properties, &[])
}

fn wells_dvt(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let mut score: i64 = 0;
    for (name, _) in DVT_ONE_POINT_ITEMS {
        if params.flag(name)? {
            score += 1;
        }
    }
    if params.flag(DVT_ALTERNATIVE.0)? {
        score -= 2;
    }
    let mut used = Map::new();
    let names: Vec<&str> = DVT_ONE_POINT_ITEMS.iter().map(|(name, _)| *name).collect();
    echo_flags(params, &names, &mut used)?;
    echo_flags(params, &[DVT_ALTERNATIVE.0], &mut used)?;

    // Three tiers (Wells 1997; MDCalc): ≤0 low (~5%), 1–2 moderate (~17%), ≥3 high (17–53%).
    let (risk_category, tier_text) = match score {
        i64::MIN..=0 => ("low", "Low pre-test probability of DVT (prevalence about 5%)"),
        1..=2 => ("moderate", "Moderate pre-test probability of DVT (prevalence about 17%)"),
        _ => ("high", "High pre-test probability of DVT (prevalence 17-53%)"),
    };
    // Two tiers (Wells 2003): ≥2 "DVT likely", ≤1 "DVT unlikely".
    let likely = score >= 2;
    let two_tier = if likely {
        "DVT likely (two-tier Wells 2003: score 2 or more)"
    } else {
        "DVT unlikely (two-tier Wells 2003: score 1 or less)"
    };
    let recommendations = if likely {
        // The seed's advice for high scores; for a likely-but-moderate score only if imaging waits.
        let anticoagulation = if risk_category == "high" {
            "Consider empiric anticoagulation if no contraindications"
        } else {
            "If imaging is delayed, consider interim anticoagulation if no contraindications"
        };
        lines(&[
            "Consider urgent proximal leg vein ultrasound",
            anticoagulation,
            "If the ultrasound is negative, a D-dimer test helps decide on repeat imaging",
        ])
    } else {
        lines(&[
            "Consider a D-dimer test; a negative result makes DVT unlikely",
            "If the D-dimer is positive, arrange proximal leg vein ultrasound",
        ])
    };
    Ok(Assessment {
        score: json!(score),
        interpretation: format!("Wells DVT score {score}: {tier_text}. {two_tier}."),
        risk_category,
        recommendations,
        parameters_used: used,
    })
}

/// Wells PE items in half points (2 = 1 point), Wells 2000 (Thromb Haemost 83:416).
const PE_ITEMS: [(&str, &str, i64); 7] = [
    ("clinical_signs_dvt", "Clinical signs and symptoms of DVT (+3)", 6),
    ("pe_most_likely_diagnosis", "PE is the most likely diagnosis or equally likely (+3)", 6),
    ("heart_rate_over_100", "Heart rate over 100 beats/min, strictly greater (+1.5)", 3),
    (
        "immobilization_or_recent_surgery",
        "Immobilisation 3 days or more, or surgery in the previous 4 weeks (+1.5)",
        3,
    ),
    ("previous_dvt_or_pe", "Previous objectively diagnosed DVT or PE (+1.5)", 3),
    ("hemoptysis", "Haemoptysis (+1)", 2),
    ("active_cancer", "Active cancer (treatment within 6 months, or palliative)", 2),
];

fn wells_pe_schema() -> Value {
    object(PE_ITEMS.iter().map(|(name, text, _)| (*name, flag(text))).collect(), &[])
}

fn wells_pe(params: &Params<'_>) -> Result<Assessment, ToolError> {
    // Half points keep the arithmetic exact; the score is reported with one decimal.
    let mut half_points: i64 = 0;
    for (name, _, halves) in PE_ITEMS {
        if params.flag(name)? {
            half_points += halves;
        }
    }
    let score = half_points as f64 / 2.0;
    let mut used = Map::new();
    let names: Vec<&str> = PE_ITEMS.iter().map(|(name, _, _)| *name).collect();
    echo_flags(params, &names, &mut used)?;

    // Three tiers (Wells 2000): <2 low (1.3%), 2–6 moderate (16.2%), >6 high (37.5%).
    // The original rules are "<2" and ">6", so 1.5 is low and 6.5 is high (MDCalc's "0–1" leaves gaps).
    let (risk_category, tier_text) = match half_points {
        i64::MIN..=3 => ("low", "Low clinical probability of PE (prevalence 1.3%)"),
        4..=12 => ("moderate", "Moderate clinical probability of PE (prevalence 16.2%)"),
        _ => ("high", "High clinical probability of PE (prevalence 37.5%)"),
    };
    // Two tiers (Wells 2001; Christopher study, JAMA 2006): >4 likely, ≤4 unlikely; 4.5 is likely.
    let likely = half_points > 8;
    let two_tier = if likely {
        "PE likely (two-tier: score above 4; PE in 37.1% in the Christopher study)"
    } else {
        "PE unlikely (two-tier: score 4 or less; PE in 12.1% in the Christopher study)"
    };
    let recommendations = if likely {
        lines(&[
            "Consider CT pulmonary angiography (V/Q scan if CTPA is contraindicated)",
            "Consider interim anticoagulation while awaiting imaging if no contraindications",
        ])
    } else {
        lines(&[
            "Consider a D-dimer test; a negative result makes PE unlikely",
            "If the D-dimer is positive, consider CT pulmonary angiography",
        ])
    };
    Ok(Assessment {
        score: json!(score),
        interpretation: format!("Wells PE score {score:.1}: {tier_text}. {two_tier}."),
        risk_category,
        recommendations,
        parameters_used: used,
    })
}
