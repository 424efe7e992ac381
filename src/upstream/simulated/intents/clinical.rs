//! Calculator requests for `calculate_medical_score`: BMI ("BMI for 70 kg and 175 cm"), Wells DVT
//! (criteria named in the text, or "the Wells DVT example" from the seed), Wells PE and CHA₂DS₂-VASc
//! (age and sex required). Parameter names follow CALCULATORS.md; criteria are booleans that are
//! true when mentioned without a negation ("no cancer" stays false).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::{Pattern, Understood, affirmed, captures, group, is_match};

const TOOL: &str = "calculate_medical_score";

static WEIGHT_KG: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)(\d{1,3}(?:\.\d+)?)\s*(?:kg|kgs|kilos?|kilograms?)\b").ok());
static HEIGHT_CM: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)(\d{2,3}(?:\.\d+)?)\s*(?:cm|cms|centimet(?:er|re)s?)\b").ok());
static HEIGHT_M: Pattern = LazyLock::new(|| Regex::new(r"(?i)\b([12](?:\.\d+)?)\s*(?:m|meters?|metres?)\b").ok());
static WELLS: Pattern = LazyLock::new(|| Regex::new(r"(?i)\bwells'?s?\b").ok());
static DVT: Pattern = LazyLock::new(|| Regex::new(r"(?i)\bdvt\b|deep[ -]vein").ok());
static PE: Pattern = LazyLock::new(|| Regex::new(r"(?i)\bpe\b|pulmonary embol").ok());
static CHADS: Pattern = LazyLock::new(|| Regex::new(r"(?i)cha2?ds2?|cha₂ds₂|chads").ok());
static AGE: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(\d{2,3})\s*(?:-|\s)?\s*(?:years?|yrs?|y/?o)\b|\baged?\s*(?:is\s*)?(\d{2,3})\b").ok()
});
static FEMALE: Pattern = LazyLock::new(|| Regex::new(r"(?i)\b(?:female|woman|women|lady|she|her)\b").ok());
static MALE: Pattern = LazyLock::new(|| Regex::new(r"(?i)\b(?:male|man|men|gentleman|he|his|him)\b").ok());

/// Wells DVT criteria and the phrases that mention them (CALCULATORS.md §3 names).
const WELLS_DVT_CRITERIA: [(&str, &[&str]); 10] = [
    ("active_cancer", &["cancer", "malignan"]),
    ("paralysis_recent", &["paralysis", "paresis", "plaster", "immobilised leg", "immobilized leg"]),
    ("bedridden_3days", &["bedridden", "bed rest", "major surgery"]),
    ("localized_tenderness", &["tenderness", "tender"]),
    ("entire_leg_swollen", &["entire leg", "whole leg"]),
    ("calf_swelling_3cm", &["calf swelling", "calf swollen", "swollen calf"]),
    ("pitting_edema", &["pitting", "edema", "oedema"]),
    ("collateral_veins", &["collateral"]),
    ("previous_dvt", &["previous dvt", "prior dvt", "history of dvt", "previously documented dvt"]),
    ("alternative_diagnosis", &["alternative diagnosis", "other diagnosis", "more likely diagnosis"]),
];

const WELLS_PE_CRITERIA: [(&str, &[&str]); 7] = [
    ("clinical_signs_dvt", &["signs of dvt", "dvt signs", "clinical signs", "leg swelling"]),
    ("pe_most_likely_diagnosis", &["most likely", "pe likely", "likely diagnosis"]),
    ("heart_rate_over_100", &["tachycard", "heart rate over 100", "heart rate above 100", "hr over 100"]),
    ("immobilization_or_recent_surgery", &["immobili", "surgery", "bedridden"]),
    (
        "previous_dvt_or_pe",
        &["previous dvt", "previous pe", "prior dvt", "prior pe", "history of dvt", "history of pe"],
    ),
    ("hemoptysis", &["hemoptysis", "haemoptysis", "coughing blood", "coughing up blood"]),
    ("active_cancer", &["cancer", "malignan"]),
];

const CHADSVASC_CRITERIA: [(&str, &[&str]); 5] = [
    ("congestive_heart_failure", &["heart failure", "chf", "lv dysfunction"]),
    ("hypertension", &["hypertension", "high blood pressure", "hypertensive"]),
    ("diabetes", &["diabet"]),
    ("stroke_tia_thromboembolism", &["stroke", " tia", "transient ischemic", "thromboembol"]),
    (
        "vascular_disease",
        &["vascular disease", "myocardial infarction", "prior mi", "peripheral artery", "aortic plaque"],
    ),
];

pub(super) fn understand(text: &str, lower: &str) -> Option<Understood> {
    if lower.contains("bmi") || lower.contains("body mass index") {
        return Some(bmi(text));
    }
    if is_match(&WELLS, lower) && is_match(&DVT, lower) && !lower.contains("wells pe") {
        return Some(call("wells_dvt", wells_dvt(lower)));
    }
    if is_match(&WELLS, lower) && is_match(&PE, lower) {
        return Some(call("wells_pe", criteria(lower, &WELLS_PE_CRITERIA)));
    }
    if is_match(&CHADS, lower) {
        return Some(chadsvasc(lower));
    }
    None
}

/// The seed's Wells DVT example (TOOLS.md / CALCULATORS.md §2): five criteria, score 5.
pub(crate) fn wells_dvt_seed() -> Value {
    json!({
        "active_cancer": true, "paralysis_recent": false, "bedridden_3days": true,
        "localized_tenderness": true, "entire_leg_swollen": false, "calf_swelling_3cm": true,
        "pitting_edema": true, "collateral_veins": false, "alternative_diagnosis": false,
    })
}

fn call(calculator: &str, parameters: Value) -> Understood {
    Understood::Call { tool: TOOL, arguments: json!({ "calculator_name": calculator, "parameters": parameters }) }
}

fn need(ask: &str) -> Understood {
    Understood::NeedMore { tool: TOOL, ask: ask.into() }
}

fn bmi(text: &str) -> Understood {
    let number = |pattern: &Pattern| {
        captures(pattern, text).and_then(|caps| group(&caps, 1).and_then(|n| n.parse::<f64>().ok()))
    };
    let weight = number(&WEIGHT_KG);
    let height = number(&HEIGHT_CM).or_else(|| number(&HEIGHT_M).map(|m| (m * 100.0).round()));
    match (weight, height) {
        (Some(weight), Some(height)) => {
            call("bmi", json!({ "weight_kg": plain_number(weight), "height_cm": plain_number(height) }))
        }
        _ => need("To calculate the BMI I need the weight in kilograms and the height in centimetres."),
    }
}

/// `70` rather than `70.0` when the value is whole, as a person (or a model) would write it.
fn plain_number(value: f64) -> Value {
    if value.fract() == 0.0 && value.abs() < 1e9 { json!(value as i64) } else { json!(value) }
}

fn wells_dvt(lower: &str) -> Value {
    if lower.contains("example") {
        return wells_dvt_seed();
    }
    // "previous DVT" also contains "dvt": only the explicit phrases in the table count.
    criteria(lower, &WELLS_DVT_CRITERIA)
}

fn criteria(lower: &str, table: &[(&str, &[&str])]) -> Value {
    let parameters: Map<String, Value> =
        table.iter().map(|(name, phrases)| ((*name).to_string(), json!(affirmed(lower, phrases)))).collect();
    Value::Object(parameters)
}

fn chadsvasc(lower: &str) -> Understood {
    let age = captures(&AGE, lower)
        .and_then(|caps| group(&caps, 1).or_else(|| group(&caps, 2)).and_then(|n| n.parse::<u32>().ok()));
    let sex = if is_match(&FEMALE, lower) {
        Some("female")
    } else if is_match(&MALE, lower) {
        Some("male")
    } else {
        None
    };
    let (Some(age), Some(sex)) = (age, sex) else {
        return need("To calculate CHA2DS2-VASc I need the patient's age and sex.");
    };
    let Value::Object(mut parameters) = criteria(lower, &CHADSVASC_CRITERIA) else {
        return need("To calculate CHA2DS2-VASc I need the patient's age and sex.");
    };
    parameters.insert("age_years".into(), json!(age));
    parameters.insert("sex".into(), json!(sex));
    call("chadsvasc", Value::Object(parameters))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parameters(text: &str, calculator: &str) -> Value {
        match understand(text, &text.to_lowercase()) {
            Some(Understood::Call { tool, arguments }) => {
                assert_eq!(tool, TOOL);
                assert_eq!(arguments["calculator_name"], calculator, "{arguments}");
                arguments["parameters"].clone()
            }
            other => panic!("not a calculator call: {other:?}"),
        }
    }

    fn score_dvt(parameters: &Value) -> i64 {
        let mut score = 0;
        for (name, _) in WELLS_DVT_CRITERIA {
            if parameters[name] == json!(true) {
                score += if name == "alternative_diagnosis" { -2 } else { 1 };
            }
        }
        score
    }

    #[test]
    fn all_patterns_compile() {
        for pattern in [&WEIGHT_KG, &HEIGHT_CM, &HEIGHT_M, &WELLS, &DVT, &PE, &CHADS, &AGE, &FEMALE, &MALE] {
            assert!(pattern.is_some());
        }
    }

    #[test]
    fn bmi_from_kg_and_cm_or_metres() {
        let found = parameters("Calculate the BMI for a patient who weighs 70 kg and is 175 cm tall", "bmi");
        assert_eq!(found, json!({"weight_kg": 70, "height_cm": 175}));
        let found = parameters("body mass index, 82.5 kilograms, 1.80 m", "bmi");
        assert_eq!(found, json!({"weight_kg": 82.5, "height_cm": 180}));
        let missing = understand("what is my BMI", "what is my bmi");
        assert!(matches!(missing, Some(Understood::NeedMore { .. })), "{missing:?}");
    }

    #[test]
    fn wells_dvt_seed_example_scores_five() {
        let found = parameters("Run the Wells DVT example", "wells_dvt");
        assert_eq!(found, wells_dvt_seed());
        assert_eq!(score_dvt(&found), 5);
    }

    #[test]
    fn wells_dvt_criteria_from_text_with_negation() {
        let found = parameters(
            "Wells score for DVT: active cancer, calf swelling and pitting edema, no previous DVT, \
             without localized tenderness",
            "wells_dvt",
        );
        assert_eq!(found["active_cancer"], true);
        assert_eq!(found["calf_swelling_3cm"], true);
        assert_eq!(found["pitting_edema"], true);
        assert_eq!(found["previous_dvt"], false);
        assert_eq!(found["localized_tenderness"], false);
        assert_eq!(found["alternative_diagnosis"], false);
        assert_eq!(score_dvt(&found), 3);
        assert_eq!(found.as_object().map(Map::len), Some(10));
    }

    #[test]
    fn wells_pe_criteria() {
        let found = parameters("wells PE: tachycardic, haemoptysis, no cancer", "wells_pe");
        assert_eq!(found["heart_rate_over_100"], true);
        assert_eq!(found["hemoptysis"], true);
        assert_eq!(found["active_cancer"], false);
    }

    #[test]
    fn chadsvasc_needs_age_and_sex() {
        let found = parameters("CHA2DS2-VASc for a 72 year old woman with hypertension and diabetes", "chadsvasc");
        assert_eq!(found["age_years"], 72);
        assert_eq!(found["sex"], "female");
        assert_eq!(found["hypertension"], true);
        assert_eq!(found["diabetes"], true);
        assert_eq!(found["stroke_tia_thromboembolism"], false);
        let found = parameters("chads vasc score, male aged 80, prior stroke", "chadsvasc");
        assert_eq!(found["age_years"], 80);
        assert_eq!(found["sex"], "male");
        assert_eq!(found["stroke_tia_thromboembolism"], true);
        let missing = understand("What is the CHADS-VASc score?", "what is the chads-vasc score?");
        assert!(matches!(missing, Some(Understood::NeedMore { .. })), "{missing:?}");
    }
}
