//! Atrial-fibrillation scores: CHA₂DS₂-VASc stroke risk (`chadsvasc`, sex-adjusted bands) and
//! HAS-BLED bleeding risk (`hasbled`).

use serde_json::{Map, Value, json};

use super::common::{Assessment, Calculator, Params, age_years, echo_flags, flag, lines, object, sex};
use crate::tools::ToolError;

pub(super) const CHADSVASC: Calculator = Calculator {
    name: "chadsvasc",
    title: "CHA2DS2-VASc stroke risk in atrial fibrillation",
    schema: chadsvasc_schema,
    compute: chadsvasc,
};

pub(super) const HASBLED: Calculator = Calculator {
    name: "hasbled",
    title: "HAS-BLED bleeding risk on anticoagulation",
    schema: hasbled_schema,
    compute: hasbled,
};

/// CHA₂DS₂-VASc criteria besides age and sex, with points (Lip 2010, Chest 137:263).
const CHADSVASC_ITEMS: [(&str, &str, i64); 5] = [
    ("congestive_heart_failure", "Congestive heart failure or LV dysfunction (+1)", 1),
    ("hypertension", "Hypertension (+1)", 1),
    ("diabetes", "Diabetes mellitus (+1)", 1),
    ("stroke_tia_thromboembolism", "Prior stroke, TIA or thromboembolism (+2)", 2),
    ("vascular_disease", "Vascular disease: prior MI, peripheral artery disease or aortic plaque (+1)", 1),
];

/// Adjusted annual stroke rate (%) by score 0–9 (Lip 2010, as reproduced in J Am Board Fam Med).
const CHADSVASC_STROKE_RATE: [&str; 10] =
    ["0", "1.3", "2.2", "3.2", "4.0", "6.7", "9.8", "9.6", "6.7", "15.2"];

fn chadsvasc_schema() -> Value {
    let mut properties: Vec<(&str, Value)> = vec![("age_years", age_years()), ("sex", sex())];
    properties.extend(CHADSVASC_ITEMS.iter().map(|(name, text, _)| (*name, flag(text))));
    object(properties, &["age_years", "sex"])
}

fn chadsvasc(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let age = params.number("age_years")?;
    let female = params.is_female()?;
    // A₂ ≥75 → 2, A 65–74 → 1 (edges: 64 → 0, 65 → 1, 74 → 1, 75 → 2).
    let age_points: i64 = if age >= 75.0 {
        2
    } else if age >= 65.0 {
        1
    } else {
        0
    };
    let mut risk_factor_points = age_points;
    for (name, _, points) in CHADSVASC_ITEMS {
        if params.flag(name)? {
            risk_factor_points += points;
        }
    }
    let score = risk_factor_points + i64::from(female);
    let mut used = Map::new();
    used.insert("age_years".into(), params.echo("age_years"));
    used.insert("sex".into(), json!(if female { "female" } else { "male" }));
    let names: Vec<&str> = CHADSVASC_ITEMS.iter().map(|(name, _, _)| *name).collect();
    echo_flags(params, &names, &mut used)?;

    // Sex-adjusted bands (ESC 2020, AHA/ACC/HRS 2019): the female point only modifies risk, so the
    // category counts the non-sex points: 0 low, 1 moderate, ≥2 high.
    let (risk_category, band_text, recommendations) = match risk_factor_points {
        0 => (
            "low",
            "low stroke risk (no risk factor besides sex)",
            lines(&[
                "Oral anticoagulation is not recommended for stroke prevention at this score",
                "Reassess stroke risk periodically, as risk factors change with age and comorbidity",
            ]),
        ),
        1 => (
            "moderate",
            "moderate stroke risk (one non-sex risk factor)",
            lines(&[
                "Oral anticoagulation should be considered, weighing bleeding risk and patient preference",
                "Assess bleeding risk (e.g. HAS-BLED) and address modifiable bleeding risk factors",
            ]),
        ),
        _ => (
            "high",
            "high stroke risk (two or more non-sex risk factors)",
            lines(&[
                "Oral anticoagulation is recommended unless contraindicated",
                "Assess bleeding risk (e.g. HAS-BLED) and address modifiable bleeding risk factors",
            ]),
        ),
    };
    let rate =
        usize::try_from(score).ok().and_then(|index| CHADSVASC_STROKE_RATE.get(index)).unwrap_or(&"n/a");
    let interpretation = format!(
        "CHA2DS2-VASc {score}: {band_text}. Adjusted stroke rate about {rate}% per year (Lip 2010). \
         Categories are sex-adjusted (ESC 2020 / AHA 2019); the 2024 ESC guideline uses CHA2DS2-VA, \
         which drops the sex point."
    );
    Ok(Assessment {
        score: json!(score),
        interpretation,
        risk_category,
        recommendations,
        parameters_used: used,
    })
}

/// HAS-BLED criteria besides age, one point each (Pisters 2010, Chest 138:1093).
const HASBLED_ITEMS: [(&str, &str); 8] = [
    ("hypertension_uncontrolled", "Uncontrolled hypertension, systolic over 160 mmHg"),
    ("abnormal_renal_function", "Dialysis, renal transplant, or creatinine 2.26 mg/dL (200 µmol/L) or more"),
    ("abnormal_liver_function", "Cirrhosis, or bilirubin over 2x ULN with AST/ALT/ALP over 3x ULN"),
    ("stroke_history", "Prior stroke"),
    ("bleeding_history", "Prior major bleeding or predisposition to bleeding (e.g. anaemia)"),
    ("labile_inr", "Labile INR: unstable/high INRs or time in therapeutic range under 60%"),
    ("antiplatelet_or_nsaid", "Concomitant antiplatelet agents or NSAIDs"),
    ("alcohol_excess", "Alcohol excess, 8 or more drinks per week"),
];

/// Bleeds per 100 patient-years by score 0–5 (Pisters 2010); above 5 the data are insufficient.
const HASBLED_BLEED_RATE: [&str; 6] = ["1.13", "1.02", "1.88", "3.74", "8.70", "12.50"];

fn hasbled_schema() -> Value {
    let mut properties: Vec<(&str, Value)> = vec![("age_years", age_years())];
    properties.extend(HASBLED_ITEMS.iter().map(|(name, text)| (*name, flag(text))));
    object(properties, &["age_years"])
}

fn hasbled(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let age = params.number("age_years")?;
    // E: elderly is age strictly over 65 (65 scores 0), unlike CHA₂DS₂-VASc's ≥65.
    let mut score = i64::from(age > 65.0);
    for (name, _) in HASBLED_ITEMS {
        if params.flag(name)? {
            score += 1;
        }
    }
    let mut used = Map::new();
    used.insert("age_years".into(), params.echo("age_years"));
    let names: Vec<&str> = HASBLED_ITEMS.iter().map(|(name, _)| *name).collect();
    echo_flags(params, &names, &mut used)?;

    // Bands 0–1 / 2 / ≥3 (Lip 2011, MDCalc); Pisters defines ≥3 as high risk.
    let (risk_category, band_text) = match score {
        i64::MIN..=1 => ("low", "relatively low bleeding risk"),
        2 => ("moderate", "moderate bleeding risk"),
        _ => ("high", "high bleeding risk"),
    };
    let rate = usize::try_from(score).ok().and_then(|index| HASBLED_BLEED_RATE.get(index));
    let rate_text = match rate {
        Some(rate) => format!("about {rate} major bleeds per 100 patient-years (Pisters 2010)"),
        None => "very high risk; above 5 the derivation data are insufficient for a rate".to_string(),
    };
    let mut recommendations = lines(&[
        "Address modifiable bleeding risk factors: blood pressure, labile INR, antiplatelets/NSAIDs, alcohol",
    ]);
    if score >= 3 {
        recommendations.push("Arrange closer review and follow-up of anticoagulation".into());
        recommendations.push("A high score alone is not a reason to withhold anticoagulation".into());
    }
    Ok(Assessment {
        score: json!(score),
        interpretation: format!("HAS-BLED {score}: {band_text}; {rate_text}."),
        risk_category,
        recommendations,
        parameters_used: used,
    })
}
