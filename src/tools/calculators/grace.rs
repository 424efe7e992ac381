//! GRACE acute-coronary-syndrome score (`grace`): the Granger 2003 in-hospital mortality nomogram
//! (Arch Intern Med 163:2345), with the GRACE coordinating centre's NSTE-ACS and STEMI risk strata.

use serde_json::{Map, Value, json};

use super::common::{
    Assessment, Calculator, Params, age_years, choice, creatinine_mg_dl, echo_flags, field_error, flag,
    lines, number, object, whole_number,
};
use crate::tools::ToolError;

pub(super) const GRACE: Calculator = Calculator {
    name: "grace",
    title: "GRACE in-hospital mortality risk in acute coronary syndrome",
    schema: grace_schema,
    compute: grace,
};

/// Half-open bands `[lower, next lower)`: each entry is (lower bound, points). The printed table's
/// overlapping edges ("≤30 / 30–39") are read with the edge in the upper band (CALCULATORS.md §7).
type Bands = [(f64, i64)];

const AGE_POINTS: [(f64, i64); 8] = [
    (f64::NEG_INFINITY, 0),
    (30.0, 8),
    (40.0, 25),
    (50.0, 41),
    (60.0, 58),
    (70.0, 75),
    (80.0, 91),
    (90.0, 100),
];
const HEART_RATE_POINTS: [(f64, i64); 7] =
    [(f64::NEG_INFINITY, 0), (50.0, 3), (70.0, 9), (90.0, 15), (110.0, 24), (150.0, 38), (200.0, 46)];
const SYSTOLIC_POINTS: [(f64, i64); 7] =
    [(f64::NEG_INFINITY, 58), (80.0, 53), (100.0, 43), (120.0, 34), (140.0, 24), (160.0, 10), (200.0, 0)];
const CREATININE_POINTS: [(f64, i64); 7] =
    [(f64::NEG_INFINITY, 1), (0.4, 4), (0.8, 7), (1.2, 10), (1.6, 13), (2.0, 21), (4.0, 28)];
/// Killip class I–IV.
const KILLIP_POINTS: [i64; 4] = [0, 20, 39, 59];
const FLAG_ITEMS: [(&str, &str, i64); 3] = [
    ("cardiac_arrest_at_admission", "Cardiac arrest at admission (+39)", 39),
    ("st_segment_deviation", "ST-segment deviation on the ECG (+28)", 28),
    ("elevated_cardiac_enzymes", "Elevated cardiac enzymes or troponin (+14)", 14),
];

/// Granger nomogram: probability of in-hospital death (%) at each total from 60 to 250.
const MORTALITY_BY_SCORE: [(i64, &str); 20] = [
    (60, "0.2"),
    (70, "0.3"),
    (80, "0.4"),
    (90, "0.6"),
    (100, "0.8"),
    (110, "1.1"),
    (120, "1.6"),
    (130, "2.1"),
    (140, "2.9"),
    (150, "3.9"),
    (160, "5.4"),
    (170, "7.3"),
    (180, "9.8"),
    (190, "13"),
    (200, "18"),
    (210, "23"),
    (220, "29"),
    (230, "36"),
    (240, "44"),
    (250, "52"),
];

fn grace_schema() -> Value {
    let mut properties: Vec<(&str, Value)> = vec![
        ("age_years", age_years()),
        ("heart_rate_bpm", number("Heart rate at admission in beats/min", 20.0, 300.0)),
        ("systolic_bp_mmhg", number("Systolic blood pressure at admission in mmHg", 30.0, 300.0)),
        ("creatinine_mg_dl", creatinine_mg_dl()),
        ("killip_class", whole_number("Killip class 1-4 (1 no heart failure ... 4 cardiogenic shock)", 1, 4)),
        (
            "acs_type",
            choice("ACS type for the GRACE risk strata: nste_acs (default) or stemi", &["nste_acs", "stemi"]),
        ),
    ];
    properties.extend(FLAG_ITEMS.iter().map(|(name, text, _)| (*name, flag(text))));
    object(
        properties,
        &["age_years", "heart_rate_bpm", "systolic_bp_mmhg", "creatinine_mg_dl", "killip_class"],
    )
}

/// Points of the band holding `value` (the last band whose lower bound is ≤ value).
fn band_points(bands: &Bands, value: f64) -> i64 {
    bands.iter().rev().find(|(lower, _)| value >= *lower).map_or(0, |(_, points)| *points)
}

fn grace(params: &Params<'_>) -> Result<Assessment, ToolError> {
    let age = params.number("age_years")?;
    let heart_rate = params.number("heart_rate_bpm")?;
    let systolic = params.number("systolic_bp_mmhg")?;
    let creatinine = params.number("creatinine_mg_dl")?;
    let killip = params.number("killip_class")?;
    let acs_type = params.token("acs_type", "nste_acs")?;
    let killip_points = (killip.fract() == 0.0)
        .then(|| KILLIP_POINTS.get((killip as usize).wrapping_sub(1)))
        .flatten()
        .copied()
        .ok_or_else(|| field_error("killip_class", "must be an integer from 1 to 4"))?;
    let mut score = band_points(&AGE_POINTS, age)
        + band_points(&HEART_RATE_POINTS, heart_rate)
        + band_points(&SYSTOLIC_POINTS, systolic)
        + band_points(&CREATININE_POINTS, creatinine)
        + killip_points;
    for (name, _, points) in FLAG_ITEMS {
        if params.flag(name)? {
            score += points;
        }
    }
    let mut used = Map::new();
    used.insert("age_years".into(), params.echo("age_years"));
    used.insert("heart_rate_bpm".into(), params.echo("heart_rate_bpm"));
    used.insert("systolic_bp_mmhg".into(), params.echo("systolic_bp_mmhg"));
    used.insert("creatinine_mg_dl".into(), params.echo("creatinine_mg_dl"));
    used.insert("killip_class".into(), json!(killip as i64));
    used.insert("acs_type".into(), json!(acs_type));
    let names: Vec<&str> = FLAG_ITEMS.iter().map(|(name, _, _)| *name).collect();
    echo_flags(params, &names, &mut used)?;

    // GRACE coordinating centre strata (outcomes-umassmed.org grace_risk_table); lower edges belong to
    // the upper band: NSTE-ACS 109 and 141, STEMI 126 and 155.
    let stemi = acs_type == "stemi";
    let (intermediate_from, high_from) = if stemi { (126, 155) } else { (109, 141) };
    let (risk_category, stratum) = match (score >= intermediate_from, score >= high_from, stemi) {
        (_, true, false) => ("high", "high risk for NSTE-ACS (in-hospital death over 3%)"),
        (_, true, true) => ("high", "high risk for STEMI (in-hospital death over 5%)"),
        (true, false, false) => ("intermediate", "intermediate risk for NSTE-ACS (in-hospital death 1-3%)"),
        (true, false, true) => ("intermediate", "intermediate risk for STEMI (in-hospital death 2-5%)"),
        (false, _, false) => ("low", "low risk for NSTE-ACS (in-hospital death under 1%)"),
        (false, _, true) => ("low", "low risk for STEMI (in-hospital death under 2%)"),
    };
    let mut recommendations = Vec::new();
    if stemi {
        recommendations.push("Manage as STEMI: immediate reperfusion pathway per local protocol".to_string());
    } else if risk_category == "high" {
        // CALCULATORS.md: ESC NSTE-ACS guidelines use >140 as the trigger for an early (<24 h)
        // invasive strategy. ESC 2020 made it a recommendation (class I); ESC 2023 (ACS) has it as
        // one that should be considered (class IIa): the advice says the current strength.
        recommendations.push(
            "GRACE over 140: an early invasive strategy (within 24 h) should be considered (ESC 2023, class IIa)".into(),
        );
    } else {
        recommendations
            .push("Choose invasive timing by the full clinical picture and local ACS pathway".into());
    }
    recommendations.extend(lines(&["Reassess risk if the clinical condition changes"]));
    let interpretation = format!(
        "GRACE (Granger 2003 in-hospital nomogram) {score}: {stratum}. {}. Not comparable with MDCalc's \
         GRACE, which uses the Fox 2006 six-month nomogram.",
        mortality_text(score)
    );
    Ok(Assessment {
        score: json!(score),
        interpretation,
        risk_category,
        recommendations,
        parameters_used: used,
    })
}

/// The nomogram's in-hospital mortality for a total, as the bracketing tabulated points.
fn mortality_text(score: i64) -> String {
    let Some(&(first_score, first_rate)) = MORTALITY_BY_SCORE.first() else { return String::new() };
    let Some(&(last_score, last_rate)) = MORTALITY_BY_SCORE.last() else { return String::new() };
    if score <= first_score {
        return format!("Estimated in-hospital mortality {first_rate}% or less");
    }
    if score >= last_score {
        return format!("Estimated in-hospital mortality {last_rate}% or more");
    }
    let below = MORTALITY_BY_SCORE.iter().rev().find(|(tabulated, _)| *tabulated <= score);
    let above = MORTALITY_BY_SCORE.iter().find(|(tabulated, _)| *tabulated >= score);
    match (below, above) {
        (Some((low_score, low_rate)), Some((high_score, _))) if low_score == high_score => {
            format!("Estimated in-hospital mortality about {low_rate}% (nomogram value at {low_score})")
        }
        (Some((low_score, low_rate)), Some((high_score, high_rate))) => format!(
            "Estimated in-hospital mortality between {low_rate}% (score {low_score}) and \
             {high_rate}% (score {high_score})"
        ),
        _ => String::new(),
    }
}
