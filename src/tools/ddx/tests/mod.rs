//! Clinical vignettes over the shipped knowledge base (written before tuning the weights: each
//! names the expected leading diagnosis and the must-not-miss conditions that must be listed);
//! the LLM path against a fake chat-completions server on 127.0.0.1 is in [`llm`].

mod llm;
mod must_not_miss;
mod vocabulary;

use serde_json::{Value, json};

use super::*;
use crate::tools::test_support::ctx;

fn kb_tool() -> DifferentialDiagnosis {
    tool(&DdxBackendConfig::default()).unwrap()
}

fn name_of(id: &str) -> String {
    let kb = KnowledgeBase::embedded().unwrap();
    kb.conditions
        .iter()
        .find(|c| c.id == id)
        .map(|c| c.name.clone())
        .unwrap_or_else(|| panic!("no condition {id}"))
}

async fn run(tool: &DifferentialDiagnosis, args: Value) -> Value {
    tool.call(args, ctx()).await.unwrap().result
}

fn names(result: &Value) -> Vec<String> {
    result["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["diagnosis"].as_str().unwrap().to_string())
        .collect()
}

/// The leading diagnosis is `lead`, and every id in `must_list` is in the list flagged must-not-miss.
async fn vignette(args: Value, lead: &str, must_list: &[&str]) -> Value {
    let result = run(&kb_tool(), args.clone()).await;
    let listed = names(&result);
    assert_eq!(
        listed.first(),
        Some(&name_of(lead)),
        "case {args}\n→ {listed:?}"
    );
    for id in must_list {
        let name = name_of(id);
        let entry = result["diagnoses"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["diagnosis"] == name.as_str());
        let entry = entry.unwrap_or_else(|| panic!("{name} missing for {args}: {listed:?}"));
        assert_eq!(entry["must_not_miss"], true, "{name}");
    }
    result
}

#[tokio::test]
async fn seed_example_chest_pain_ranks_acs_first_with_dissection_and_pe_as_must_not_miss() {
    let result = vignette(
        json!({
            "chief_complaint": "chest pain",
            "symptoms": ["substernal chest pressure", "shortness of breath", "diaphoresis", "pain radiating to left arm"],
            "patient_age": 65,
            "patient_sex": "M",
            "relevant_history": ["hypertension", "diabetes", "smoking history"],
            "max_results": 5
        }),
        "acute_coronary_syndrome",
        &["aortic_dissection", "pulmonary_embolism"],
    )
    .await;
    let lead = &result["diagnoses"][0];
    assert_eq!(lead["probability"], "high");
    assert!(
        lead["key_features"]
            .as_array()
            .unwrap()
            .contains(&json!("pain radiating to left arm"))
    );
    assert!(
        lead["key_features"]
            .as_array()
            .unwrap()
            .contains(&json!("risk factor: hypertension"))
    );
    assert!(lead["next_steps"][0].as_str().unwrap().contains("ECG"));
    assert!(result["diagnoses"].as_array().unwrap().len() <= 5);
    assert_eq!(result["chief_complaint"], "chest pain");
    assert_eq!(
        result["disclaimers"][0],
        "This is not a substitute for clinical judgment"
    );
    assert_eq!(
        result["disclaimers"][1],
        "Consider patient context and physical exam findings"
    );
    let reasoning = result["reasoning"].as_str().unwrap();
    assert!(
        reasoning.contains("Must not miss") && reasoning.contains("Acute aortic dissection"),
        "{reasoning}"
    );
}

#[tokio::test]
async fn chest_and_breathing_vignettes() {
    vignette(
        json!({"chief_complaint": "sudden shortness of breath", "symptoms": ["pleuritic chest pain", "tachycardia",
            "swollen calf", "low oxygen saturation"], "patient_age": 45, "patient_sex": "F",
            "relevant_history": ["oral contraceptives", "long-haul flight"]}),
        "pulmonary_embolism",
        &["pulmonary_embolism"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "chest pain", "symptoms": ["sudden tearing pain radiating to the back",
            "unequal blood pressure in the arms"], "patient_age": 62, "patient_sex": "M", "relevant_history": ["hypertension"]}),
        "aortic_dissection",
        &["acute_coronary_syndrome"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "chest pain", "symptoms": ["sudden onset", "sharp pain worse on inspiration",
            "short of breath"], "patient_age": 22, "patient_sex": "M", "relevant_history": ["tall and thin", "smoker"]}),
        "pneumothorax",
        &["pulmonary_embolism"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "chest pain", "symptoms": ["sharp chest pain better leaning forward",
            "friction rub", "recent viral illness"], "patient_age": 30, "patient_sex": "M"}),
        "pericarditis",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "burning chest pain", "symptoms": ["heartburn after meals", "sour taste",
            "no shortness of breath", "not exertional"], "patient_age": 40, "patient_sex": "F"}),
        "gerd",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "breathlessness", "symptoms": ["orthopnoea", "swollen ankles", "weight gain",
            "waking at night short of breath"], "patient_age": 78, "patient_sex": "F", "relevant_history": ["heart failure"]}),
        "heart_failure",
        &[],
    )
    .await;
}

#[tokio::test]
async fn abdominal_vignettes() {
    vignette(
        json!({"chief_complaint": "abdominal pain", "symptoms": ["pain started around the umbilicus then moved to the right lower quadrant",
            "loss of appetite", "fever", "nausea"], "patient_age": 19, "patient_sex": "M"}),
        "appendicitis",
        &["appendicitis"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "right upper quadrant pain", "symptoms": ["pain after a fatty meal", "fever", "vomiting"],
            "patient_age": 45, "patient_sex": "F", "relevant_history": ["gallstones"]}),
        "cholecystitis",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "epigastric pain", "symptoms": ["radiating to the back", "vomiting"],
            "patient_age": 50, "patient_sex": "M", "relevant_history": ["heavy drinking"]}),
        "pancreatitis",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "lower abdominal pain", "symptoms": ["missed period", "vaginal bleeding", "dizzy"],
            "patient_age": 28, "patient_sex": "F"}),
        "ectopic_pregnancy",
        &["ectopic_pregnancy"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "flank pain", "symptoms": ["colicky pain coming in waves", "blood in urine", "vomiting",
            "no fever"], "patient_age": 35, "patient_sex": "M"}),
        "renal_colic",
        &[],
    )
    .await;
}

#[tokio::test]
async fn headache_and_neurological_vignettes() {
    vignette(
        json!({"chief_complaint": "headache", "symptoms": ["worst headache of my life", "sudden onset", "stiff neck", "vomiting"],
            "patient_age": 50, "patient_sex": "F"}),
        "subarachnoid_hemorrhage",
        &["meningitis"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "headache", "symptoms": ["fever", "stiff neck", "non-blanching rash", "confused"],
            "patient_age": 20, "patient_sex": "M"}),
        "meningitis",
        &["subarachnoid_hemorrhage"],
    )
    .await;
    let migraine = vignette(
        json!({"chief_complaint": "headache", "symptoms": ["throbbing one-sided headache", "sensitive to light",
            "visual aura", "nausea", "no fever", "no neck stiffness"], "patient_age": 25, "patient_sex": "F",
            "relevant_history": ["similar headaches before"]}),
        "migraine",
        &[],
    )
    .await;
    let meningitis = name_of("meningitis");
    if let Some(entry) = migraine["diagnoses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["diagnosis"] == meningitis.as_str())
    {
        assert_eq!(
            entry["probability"], "low",
            "negated fever and stiffness count against meningitis"
        );
        assert!(
            entry["missing_features"]
                .as_array()
                .unwrap()
                .contains(&json!("fever (stated absent)"))
        );
    }
    vignette(
        json!({"chief_complaint": "headache", "symptoms": ["temporal headache", "jaw pain when chewing", "scalp tenderness",
            "blurred vision"], "patient_age": 72, "patient_sex": "F"}),
        "giant_cell_arteritis",
        &["giant_cell_arteritis"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "facial droop", "symptoms": ["sudden arm weakness", "slurred speech"],
            "patient_age": 70, "patient_sex": "M", "relevant_history": ["atrial fibrillation", "hypertension"]}),
        "stroke",
        &["stroke"],
    )
    .await;
}

#[tokio::test]
async fn syncope_vignettes() {
    vignette(
        json!({"chief_complaint": "fainted", "symptoms": ["after prolonged standing", "felt warm before", "nausea", "pale"],
            "patient_age": 20, "patient_sex": "F"}),
        "vasovagal_syncope",
        &["cardiac_arrhythmia"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "collapsed during exercise", "symptoms": ["systolic murmur", "breathless on exertion"],
            "patient_age": 78, "patient_sex": "M"}),
        "aortic_stenosis",
        &["aortic_stenosis"],
    )
    .await;
    vignette(
        json!({"chief_complaint": "collapse", "symptoms": ["jerking of all limbs", "bitten tongue", "confused afterwards"],
            "patient_age": 30, "patient_sex": "M"}),
        "seizure",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "confusion", "symptoms": ["sweating", "shaky", "passed out"],
            "patient_age": 60, "patient_sex": "M", "relevant_history": ["type 2 diabetes on insulin"]}),
        "hypoglycemia",
        &["hypoglycemia"],
    )
    .await;
}

#[tokio::test]
async fn fever_vignettes() {
    vignette(
        json!({"chief_complaint": "fever", "symptoms": ["muscle aches", "cough", "sudden onset", "chills"],
            "patient_age": 35, "patient_sex": "F", "relevant_history": ["not vaccinated", "flu season"]}),
        "influenza",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "sore throat", "symptoms": ["white patches on tonsils", "swollen glands", "fever", "no cough"],
            "patient_age": 10, "patient_sex": "M"}),
        "strep_pharyngitis",
        &[],
    )
    .await;
    vignette(
        json!({"chief_complaint": "fever", "symptoms": ["productive cough", "pleuritic chest pain", "chills"],
            "patient_age": 55, "patient_sex": "M"}),
        "pneumonia",
        &["pulmonary_embolism"],
    )
    .await;
}

#[tokio::test]
async fn age_and_sex_rule_conditions_out() {
    let args = json!({"chief_complaint": "lower abdominal pain", "symptoms": ["missed period", "vaginal bleeding"],
        "patient_age": 28, "patient_sex": "M"});
    let listed = names(&run(&kb_tool(), args).await);
    assert!(
        !listed.contains(&name_of("ectopic_pregnancy")),
        "{listed:?}"
    );
    let args = json!({"chief_complaint": "headache", "symptoms": ["jaw claudication", "scalp tenderness"], "patient_age": 30});
    assert!(!names(&run(&kb_tool(), args).await).contains(&name_of("giant_cell_arteritis")));
    // The schema's "integer" lets 30.0 through: it is the same age, not "no age given".
    let args = json!({"chief_complaint": "headache", "symptoms": ["jaw claudication", "scalp tenderness"], "patient_age": 30.0});
    let validator = crate::tools::schema::compile(&parameters()).unwrap();
    crate::tools::schema::check(&validator, &args).unwrap();
    assert!(!names(&run(&kb_tool(), args).await).contains(&name_of("giant_cell_arteritis")));
}

#[tokio::test]
async fn nothing_recognised_says_so_and_max_results_bounds_the_list() {
    let result = run(
        &kb_tool(),
        json!({"chief_complaint": "zzz", "symptoms": ["qqq"]}),
    )
    .await;
    assert_eq!(result["diagnoses"], json!([]));
    assert!(
        result["reasoning"]
            .as_str()
            .unwrap()
            .contains("None of the")
    );
    let result = run(&kb_tool(), json!({"chief_complaint": "chest pain", "symptoms": ["shortness of breath"], "max_results": 3})).await;
    assert_eq!(result["diagnoses"].as_array().unwrap().len(), 3);
}

#[test]
fn the_schema_bounds_every_field() {
    let validator = crate::tools::schema::compile(&parameters()).unwrap();
    let ok = json!({"chief_complaint": "x", "symptoms": ["y"]});
    assert!(crate::tools::schema::check(&validator, &ok).is_ok());
    for bad in [
        json!({"chief_complaint": "x", "symptoms": []}),
        json!({"chief_complaint": "x", "symptoms": ["y"], "patient_sex": "male"}),
        json!({"chief_complaint": "x", "symptoms": ["y"], "patient_age": 300}),
        json!({"chief_complaint": "x", "symptoms": ["y"], "extra": 1}),
        json!({"chief_complaint": "x".repeat(500), "symptoms": ["y"]}),
    ] {
        assert!(
            crate::tools::schema::check(&validator, &bad).is_err(),
            "{bad}"
        );
    }
}

/// The schema's largest case: 30 symptoms and 30 history items of 200 characters, each naming a
/// different finding or risk factor that many conditions share, so that every candidate quotes
/// them whole in its `key_features` (and the reasoning repeats the leader's).
fn verbose_case(filler: &str) -> Value {
    let kb = KnowledgeBase::embedded().unwrap();
    let shared = |keys: &mut dyn Iterator<Item = &String>| {
        let mut count: std::collections::BTreeMap<String, usize> = Default::default();
        keys.for_each(|key| *count.entry(key.clone()).or_default() += 1);
        let mut keys: Vec<(String, usize)> = count.into_iter().collect();
        keys.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        keys.into_iter().map(|(key, _)| key).collect::<Vec<_>>()
    };
    let statement = |key: &String| {
        let term = kb.vocabulary[key].iter().find(|t| !t.starts_with('!')).unwrap().trim();
        format!("{term} {}", filler.repeat(200)).chars().take(200).collect::<String>()
    };
    let findings = shared(&mut kb.conditions.iter().flat_map(|c| c.findings.keys()));
    let symptoms: Vec<String> = findings.iter().take(MAX_SYMPTOMS as usize).map(statement).collect();
    let risks = shared(&mut kb.conditions.iter().flat_map(|c| c.risk_factors.keys()));
    let history: Vec<String> = risks
        .iter()
        .filter(|key| !findings[..MAX_SYMPTOMS as usize].contains(key))
        .take(MAX_HISTORY as usize)
        .map(statement)
        .collect();
    json!({"chief_complaint": "x".repeat(200), "symptoms": symptoms, "relevant_history": history, "max_results": MAX_RESULTS})
}

#[tokio::test]
async fn a_verbose_case_is_cut_to_fit_one_function_call_output() {
    for filler in ["zq ", "\u{1}"] {
        let args = verbose_case(filler);
        let validator = crate::tools::schema::compile(&parameters()).unwrap();
        crate::tools::schema::check(&validator, &args).unwrap();
        let result = run(&kb_tool(), args).await;
        let size = result.to_string().len();
        assert!(size <= crate::tools::text::MAX_RESULT_BYTES, "{filler:?}: {size} bytes");
        assert_eq!(result["truncated"], true);
        assert!(names(&result).len() > 1, "{filler:?}: candidates are kept, their lists cut");
    }
    // 30 symptoms it does not recognise, escaped as `\u0001` (six bytes a character): the reasoning
    // alone, which lists them, is over 30 KiB, so it is cut like the LLM's.
    let unrecognised = format!("qq{}", "\u{1}".repeat(198));
    let args = json!({"chief_complaint": "chest pain", "symptoms": vec![unrecognised; 30]});
    let result = run(&kb_tool(), args).await;
    let size = result.to_string().len();
    assert!(size <= crate::tools::text::MAX_RESULT_BYTES, "{size} bytes");
    let reasoning = result["reasoning"].as_str().unwrap();
    assert!(reasoning.starts_with("Ranked by") && reasoning.chars().count() <= 1501, "{}", reasoning.len());
    assert!(!names(&result).is_empty());
}
