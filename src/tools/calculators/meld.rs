//! MELD liver-disease severity (`meld`): classic MELD, MELD-Na (OPTN policy 2016, the default) and
//! MELD 3.0 (Kim 2021), with OPTN bounds, dialysis rule and rounding order.

use num::ToPrimitive;
use serde_json::{Map, Value, json};

use super::common::{
    Assessment, Calculator, Params, choice, creatinine_mg_dl, field_error, flag, lines, number, object, sex,
};
use super::decimal::{exact, integer, ratio, round_half_up, round_repr_half_up};
use crate::tools::ToolError;

pub(super) const MELD: Calculator = Calculator {
    name: "meld",
    title: "MELD / MELD-Na / MELD 3.0 liver disease severity",
    schema: meld_schema,
    compute: meld,
};

/// OPTN caps the allocation score at 40.
const MELD_CAP: i64 = 40;
/// MELD 3.0 is bounded below at 6 (Kim 2021).
const MELD_3_FLOOR: i64 = 6;

fn meld_schema() -> Value {
    let mut schema = object(
        vec![
            (
                "version",
                choice(
                    "meld, meld_na (default, OPTN 2016) or meld_3_0 (OPTN since 2023)",
                    &["meld", "meld_na", "meld_3_0"],
                ),
            ),
            ("creatinine_mg_dl", creatinine_mg_dl()),
            // The range (CALCULATORS.md) also holds most µmol/L values, which read 17.1 times too high:
            // only the description can keep them out.
            ("bilirubin_mg_dl", number("Total bilirubin in mg/dL (not µmol/L; divide µmol/L by 17.1)", 0.1, 80.0)),
            ("inr", number("INR (unitless)", 0.5, 20.0)),
            (
                "sodium_mmol_l",
                number("Serum sodium in mmol/L (required for meld_na and meld_3_0)", 100.0, 180.0),
            ),
            ("albumin_g_dl", number("Serum albumin in g/dL (required for meld_3_0)", 0.5, 7.0)),
            ("sex", sex()),
            (
                "dialysis_twice_past_week",
                flag("Dialysis at least twice, or 24 h of CVVHD, in the week before the creatinine test"),
            ),
        ],
        &["creatinine_mg_dl", "bilirubin_mg_dl", "inr"],
    );
    // Version-dependent requirements; this schema is internal (the model sees the plain union).
    let conditional = json!([
        { "if": { "properties": { "version": { "const": "meld" } }, "required": ["version"] },
          "else": { "required": ["sodium_mmol_l"] } },
        { "if": { "properties": { "version": { "const": "meld_3_0" } }, "required": ["version"] },
          "then": { "required": ["albumin_g_dl", "sex"] } }
    ]);
    if let Some(object) = schema.as_object_mut() {
        object.insert("allOf".into(), conditional);
    }
    schema
}

/// Clamp a lab value and remember whether it moved (reported in `parameters_used.clamped`).
fn clamp(value: f64, low: f64, high: f64, name: &str, clamped: &mut Vec<String>) -> f64 {
    let used = value.clamp(low, high);
    if used != value {
        clamped.push(name.to_string());
    }
    used
}

fn meld(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let version = params.token("version", "meld_na")?;
    let dialysis = params.flag("dialysis_twice_past_week")?;
    let is_meld_3 = version == "meld_3_0";
    let mut clamped = Vec::new();
    // OPTN: creatinine 1.0–4.0 (MELD 3.0: 1.0–3.0); dialysis sets the cap value, overriding the floor.
    let creatinine_cap = if is_meld_3 { 3.0 } else { 4.0 };
    let creatinine_given = params.number("creatinine_mg_dl")?;
    let creatinine = if dialysis {
        if creatinine_given != creatinine_cap {
            clamped.push("creatinine_mg_dl".to_string());
        }
        creatinine_cap
    } else {
        clamp(creatinine_given, 1.0, creatinine_cap, "creatinine_mg_dl", &mut clamped)
    };
    let bilirubin = clamp(params.number("bilirubin_mg_dl")?, 1.0, f64::MAX, "bilirubin_mg_dl", &mut clamped);
    let inr = clamp(params.number("inr")?, 1.0, f64::MAX, "inr", &mut clamped);

    let mut used = Map::new();
    used.insert("version".into(), json!(version));
    used.insert("creatinine_mg_dl".into(), json!(creatinine));
    used.insert("bilirubin_mg_dl".into(), json!(bilirubin));
    used.insert("inr".into(), json!(inr));
    used.insert("dialysis_twice_past_week".into(), json!(dialysis));

    let (score, detail) = match version {
        "meld" => {
            let meld_i = meld_initial(creatinine, bilirubin, inr);
            (meld_i.min(MELD_CAP), format!("MELD(i) {meld_i}"))
        }
        "meld_na" => {
            let sodium = clamp(params.number("sodium_mmol_l")?, 125.0, 137.0, "sodium_mmol_l", &mut clamped);
            used.insert("sodium_mmol_l".into(), json!(sodium));
            let meld_i = meld_initial(creatinine, bilirubin, inr);
            let (score, sodium_applied) = meld_na(meld_i, sodium);
            let note = if sodium_applied {
                "sodium correction applied"
            } else {
                "sodium correction applies only above 11"
            };
            (score, format!("MELD(i) {meld_i}, {note}"))
        }
        "meld_3_0" => {
            let sodium = clamp(params.number("sodium_mmol_l")?, 125.0, 137.0, "sodium_mmol_l", &mut clamped);
            let albumin = clamp(params.number("albumin_g_dl")?, 1.5, 3.5, "albumin_g_dl", &mut clamped);
            let female = params.is_female()?;
            used.insert("sodium_mmol_l".into(), json!(sodium));
            used.insert("albumin_g_dl".into(), json!(albumin));
            used.insert("sex".into(), json!(if female { "female" } else { "male" }));
            (
                meld_3(female, bilirubin, sodium, inr, creatinine, albumin),
                "MELD 3.0 (adult formula)".to_string(),
            )
        }
        _ => return Err(field_error("version", "must be one of meld, meld_na, meld_3_0")),
    };
    used.insert("clamped".into(), json!(clamped));

    // 3-month mortality bands (Wiesner 2003, as on MDCalc); used for MELD 3.0 too, for consistency.
    let (risk_category, mortality) = match score {
        i64::MIN..=9 => ("low", "1.9%"),
        10..=19 => ("moderate", "6.0%"),
        20..=29 => ("high", "19.6%"),
        30..=39 => ("very_high", "52.6%"),
        _ => ("critical", "71.3%"),
    };
    let mut recommendations = Vec::new();
    if score >= 15 {
        // AASLD 2013 evaluation-for-transplant guideline: refer at MELD ≥15.
        recommendations
            .push("MELD 15 or more: consider referral for liver transplant evaluation".to_string());
    }
    recommendations.extend(lines(&[
        "Recalculate with each new set of laboratory values",
        "MELD is validated for chronic liver disease; interpret with caution in acute illness",
    ]));
    let interpretation =
        format!("{detail}; score {score}. Estimated 3-month mortality about {mortality} (Wiesner 2003).");
    Ok(Assessment {
        score: json!(score),
        interpretation,
        risk_category,
        recommendations,
        parameters_used: used,
    })
}

/// MELD(i) per OPTN: 0.957·ln(Cr) + 0.378·ln(bili) + 1.120·ln(INR) + 0.643, rounded to the tenth
/// (half-up on the decimal value) and then ×10, so 1.7472 gives 17, not 18 (CALCULATORS.md §8).
pub(super) fn meld_initial(creatinine: f64, bilirubin: f64, inr: f64) -> i64 {
    let raw = 0.957 * creatinine.ln() + 0.378 * bilirubin.ln() + 1.120 * inr.ln() + 0.643;
    round_repr_half_up(raw, 1)
}

/// MELD-Na (Kim 2008, OPTN 2016): only when MELD(i) > 11,
/// `MELD(i) + 1.32·(137 − Na) − 0.033·MELD(i)·(137 − Na)`, rounded to an integer, capped at 40.
/// Evaluated exactly (all inputs are decimals) so half-way results round up. Returns whether the
/// sodium term applied.
pub(super) fn meld_na(meld_i: i64, sodium: f64) -> (i64, bool) {
    if meld_i <= 11 {
        return (meld_i.min(MELD_CAP), false);
    }
    let meld_i_exact = integer(meld_i);
    let sodium_gap = integer(137) - exact(sodium);
    let value = &meld_i_exact + ratio(132, 100) * &sodium_gap - ratio(33, 1000) * &meld_i_exact * &sodium_gap;
    (round_half_up(&value, 0).min(MELD_CAP), true)
}

/// MELD 3.0 (Kim 2021, adult candidates), rounded to an integer and bounded 6–40.
pub(super) fn meld_3(
    female: bool,
    bilirubin: f64,
    sodium: f64,
    inr: f64,
    creatinine: f64,
    albumin: f64,
) -> i64 {
    let sodium_gap = 137.0 - sodium;
    let albumin_gap = 3.5 - albumin;
    let logarithmic = 4.56 * bilirubin.ln() - 0.24 * sodium_gap * bilirubin.ln()
        + 9.09 * inr.ln()
        + 11.14 * creatinine.ln()
        - 1.83 * albumin_gap * creatinine.ln();
    // The terms without a logarithm, exactly (all inputs are decimals). With normal labs every
    // logarithm is 0 (the values are clamped to 1.0) and these are the whole score: in floating
    // point a total of exactly 9.5 came out as 9.4999… and was rounded down, a band lower.
    let linear = ratio(133, 100) * integer(i64::from(female))
        + ratio(82, 100) * (integer(137) - exact(sodium))
        + ratio(185, 100) * (ratio(35, 10) - exact(albumin))
        + integer(6);
    let score = if logarithmic == 0.0 {
        round_half_up(&linear, 0)
    } else {
        round_repr_half_up(linear.to_f64().unwrap_or(f64::NAN) + logarithmic, 0)
    };
    score.clamp(MELD_3_FLOOR, MELD_CAP)
}
