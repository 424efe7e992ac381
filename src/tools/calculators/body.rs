//! Body-size calculators: Cockcroft–Gault creatinine clearance for renal dose adjustment
//! (`renal_dosing`, with the dosing-weight choice) and body-mass index (`bmi`, WHO adult cut-offs).
//! Both are evaluated exactly on the decimal inputs, then rounded half-up to 0.1.

use num::BigRational;
use serde_json::{Map, Value, json};

use super::common::{
    Assessment, Calculator, Params, age_years, choice, creatinine_mg_dl, field_error, lines, number, object,
    sex,
};
use super::decimal::{exact, from_units, integer, ratio, round_half_up};
use crate::tools::ToolError;

pub(super) const RENAL_DOSING: Calculator = Calculator {
    name: "renal_dosing",
    title: "Cockcroft-Gault creatinine clearance for renal dose adjustment",
    schema: renal_dosing_schema,
    compute: renal_dosing,
};

pub(super) const BMI: Calculator = Calculator {
    name: "bmi",
    title: "Body-mass index (WHO adult categories)",
    schema: bmi_schema,
    compute: bmi,
};

fn renal_dosing_schema() -> Value {
    let mut schema = object(
        vec![
            ("age_years", age_years()),
            ("sex", sex()),
            ("weight_kg", number("Actual body weight in kg", 20.0, 400.0)),
            ("creatinine_mg_dl", creatinine_mg_dl()),
            (
                "height_cm",
                number("Height in cm (renal_dosing: needed for ideal or adjusted body weight)", 100.0, 250.0),
            ),
            (
                "weight_basis",
                choice(
                    "Weight for Cockcroft-Gault: auto (default: by BMI), actual, ideal or adjusted",
                    &["auto", "actual", "ideal", "adjusted"],
                ),
            ),
        ],
        &["age_years", "sex", "weight_kg", "creatinine_mg_dl"],
    );
    // Ideal and adjusted weights need a height; the model-facing union cannot say so, this schema can.
    let conditional = json!({
        "if": {
            "properties": { "weight_basis": { "enum": ["ideal", "adjusted"] } },
            "required": ["weight_basis"]
        },
        "then": { "required": ["height_cm"] }
    });
    if let Some(object) = schema.as_object_mut() {
        object.insert("allOf".into(), json!([conditional]));
    }
    schema
}

/// BMI in kg/m² as an exact fraction: kg × 10000 / cm².
fn exact_bmi(weight_kg: f64, height_cm: f64) -> BigRational {
    let height = exact(height_cm);
    exact(weight_kg) * integer(10_000) / (&height * &height)
}

/// Devine 1974 ideal body weight: 50 kg (male) or 45.5 kg (female) + 2.3 kg per inch over 60 in.
/// Below 60 in (152.4 cm) it is extrapolated (CALCULATORS.md §9), and can reach zero near 1 m.
fn ideal_body_weight(female: bool, height_cm: f64) -> BigRational {
    let base = if female { ratio(455, 10) } else { integer(50) };
    let inches = exact(height_cm) * ratio(100, 254);
    base + ratio(23, 10) * (inches - integer(60))
}

/// The weight Cockcroft–Gault uses, and what it was chosen from.
struct DosingWeight {
    /// `actual`, `ideal` or `adjusted`: reported as `weight_used`.
    basis_used: &'static str,
    kg: BigRational,
    /// BMI rounded to 0.1 (in tenths) and Devine IBW, when a height was given.
    bmi_tenths: Option<i64>,
    ideal_kg: Option<BigRational>,
}

/// Choose the dosing weight: `weight_basis` as asked, or for `auto` the BMI rule of CALCULATORS.md §9
/// (Winter 2012 / MDCalc), decided on the BMI rounded to 0.1: <18.5 actual; 18.5–24.9 the lesser of
/// ideal and actual (ideal alone overestimates CrCl in light patients); ≥25 adjusted.
fn dosing_weight(params: &Params<'_>, basis: &str, female: bool) -> Result<DosingWeight, ToolError> {
    let weight_kg = params.number("weight_kg")?;
    let actual = exact(weight_kg);
    let Some(height_cm) = params.optional_number("height_cm")? else {
        return match basis {
            "auto" | "actual" => {
                Ok(DosingWeight { basis_used: "actual", kg: actual, bmi_tenths: None, ideal_kg: None })
            }
            _ => Err(field_error("height_cm", "is required for ideal or adjusted weight")),
        };
    };
    let bmi_tenths = round_half_up(&exact_bmi(weight_kg, height_cm), 1);
    let ideal = ideal_body_weight(female, height_cm);
    // Adjusted body weight: IBW + 0.4 × (actual − IBW).
    let adjusted = &ideal + ratio(2, 5) * (&actual - &ideal);
    // Extrapolated Devine IBW is not positive below about 1.02 m (women): no ideal-based weight there.
    let ideal_is_usable = ideal > integer(0);
    let too_short =
        || field_error("height_cm", "is too short for the Devine ideal body weight; use weight_basis actual");
    let (basis_used, kg) = match basis {
        "actual" => ("actual", actual),
        "ideal" if ideal_is_usable => ("ideal", ideal.clone()),
        "adjusted" if ideal_is_usable => ("adjusted", adjusted),
        "ideal" | "adjusted" => return Err(too_short()),
        "auto" if !ideal_is_usable || bmi_tenths < 185 => ("actual", actual),
        "auto" if bmi_tenths < 250 && ideal < actual => ("ideal", ideal.clone()),
        "auto" if bmi_tenths < 250 => ("actual", actual),
        "auto" => ("adjusted", adjusted),
        _ => return Err(field_error("weight_basis", "must be one of auto, actual, ideal, adjusted")),
    };
    Ok(DosingWeight { basis_used, kg, bmi_tenths: Some(bmi_tenths), ideal_kg: Some(ideal) })
}

fn renal_dosing(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let age = params.number("age_years")?;
    let female = params.is_female()?;
    let creatinine = params.number("creatinine_mg_dl")?;
    let basis = params.token("weight_basis", "auto")?;
    let dosing = dosing_weight(params, basis, female)?;
    let (weight_used, weight) = (dosing.basis_used, &dosing.kg);
    // Cockcroft & Gault 1976: (140 − age) × weight / (72 × SCr), × 0.85 for women.
    let mut clearance = (integer(140) - exact(age)) * weight / (integer(72) * exact(creatinine));
    if female {
        clearance *= ratio(85, 100);
    }
    let tenths = round_half_up(&clearance, 1);
    let weight_kg = from_units(round_half_up(weight, 1), 1);

    let mut used = Map::new();
    used.insert("age_years".into(), params.echo("age_years"));
    used.insert("sex".into(), json!(if female { "female" } else { "male" }));
    used.insert("weight_kg".into(), params.echo("weight_kg"));
    if params.optional_number("height_cm")?.is_some() {
        used.insert("height_cm".into(), params.echo("height_cm"));
    }
    used.insert("creatinine_mg_dl".into(), params.echo("creatinine_mg_dl"));
    used.insert("weight_basis".into(), json!(basis));
    used.insert("weight_used".into(), json!(weight_used));
    used.insert("dosing_weight_kg".into(), json!(weight_kg));
    if let Some(tenths) = dosing.bmi_tenths {
        used.insert("bmi_kg_m2".into(), json!(from_units(tenths, 1)));
    }
    if let Some(ideal) = &dosing.ideal_kg {
        used.insert("ideal_body_weight_kg".into(), json!(from_units(round_half_up(ideal, 1), 1)));
    }

    // FDA renal-impairment guidance (2024) / KDIGO G-stage cut points, on the rounded value.
    let (risk_category, band) = match tenths {
        900.. => ("normal", "normal renal function (90 mL/min or more)"),
        600..=899 => ("mild", "mildly decreased (60-89 mL/min)"),
        300..=599 => ("moderate", "moderately decreased (30-59 mL/min)"),
        150..=299 => ("severe", "severely decreased (15-29 mL/min)"),
        _ => ("kidney_failure", "kidney failure range (under 15 mL/min)"),
    };
    let score = from_units(tenths, 1);
    let mut interpretation = format!(
        "Estimated creatinine clearance {score:.1} mL/min (Cockcroft-Gault, {weight_used} body weight \
         {weight_kg:.1} kg): {band}. The drug label's own CrCl table governs dose adjustment (many use \
         >50 / 30-50 / 10-29 / <10 mL/min). Not valid on dialysis, with unstable renal function or \
         in children."
    );
    // Devine starts at 60 in; below that the ideal weight is an extrapolation (CALCULATORS.md §9).
    let short = params.optional_number("height_cm")?.is_some_and(|height| height < 152.4);
    if short && weight_used != "actual" {
        interpretation.push_str(" The Devine ideal body weight is extrapolated below 152.4 cm (60 in).");
    }
    let mut recommendations = lines(&["Adjust doses using the drug label's CrCl thresholds"]);
    if tenths < 600 {
        recommendations.push(
            "Review renally cleared drugs for dose reduction or avoidance; involve a pharmacist".into(),
        );
    }
    if tenths < 150 {
        recommendations
            .push("Check for drugs contraindicated in kidney failure; seek nephrology advice".into());
    }
    recommendations
        .push("Recheck creatinine if renal function may be changing (C-G assumes steady state)".into());
    Ok(Assessment {
        score: json!(score),
        interpretation,
        risk_category,
        recommendations,
        parameters_used: used,
    })
}

fn bmi_schema() -> Value {
    object(
        vec![
            ("weight_kg", number("Body weight in kg", 1.0, 500.0)),
            ("height_cm", number("Height in cm", 30.0, 272.0)),
        ],
        &["weight_kg", "height_cm"],
    )
}

fn bmi(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let weight = params.number("weight_kg")?;
    let height = params.number("height_cm")?;
    // WHO TRS 894 (2000): kg/m², classified on the value rounded to 0.1 (64 kg / 160 cm is 25.0).
    let tenths = round_half_up(&exact_bmi(weight, height), 1);
    let score = from_units(tenths, 1);
    let (risk_category, band) = match tenths {
        i64::MIN..=159 => ("underweight", "underweight (severe thinness, under 16.0)"),
        160..=169 => ("underweight", "underweight (moderate thinness, 16.0-16.9)"),
        170..=184 => ("underweight", "underweight (mild thinness, 17.0-18.4)"),
        185..=249 => ("normal", "normal weight (18.5-24.9)"),
        250..=299 => ("overweight", "overweight / pre-obese (25.0-29.9)"),
        300..=349 => ("obese_class_1", "obesity class I (30.0-34.9)"),
        350..=399 => ("obese_class_2", "obesity class II (35.0-39.9)"),
        _ => ("obese_class_3", "obesity class III (40.0 or more)"),
    };
    let recommendations = match risk_category {
        "underweight" => lines(&["Assess nutritional status and look for an underlying cause of low weight"]),
        "normal" => lines(&["No weight-related action needed on BMI alone"]),
        "overweight" => lines(&[
            "Offer lifestyle advice on diet and physical activity",
            "Screen for cardiometabolic risk factors",
        ]),
        "obese_class_1" => lines(&[
            "Offer a structured weight-management programme",
            "Screen for cardiometabolic risk factors and obesity-related conditions",
        ]),
        _ => lines(&[
            "Offer specialist weight management; pharmacotherapy or bariatric surgery may be considered",
            "Screen for obesity-related conditions (diabetes, hypertension, sleep apnoea)",
        ]),
    };
    let mut used = Map::new();
    used.insert("weight_kg".into(), params.echo("weight_kg"));
    used.insert("height_cm".into(), params.echo("height_cm"));
    let interpretation = format!(
        "BMI {score:.1} kg/m2: {band} by WHO international adult cut-offs. Lower action points apply to \
         some Asian populations; BMI does not distinguish fat from lean mass."
    );
    Ok(Assessment {
        score: json!(score),
        interpretation,
        risk_category,
        recommendations,
        parameters_used: used,
    })
}
