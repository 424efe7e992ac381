//! Screening rules against the queries they must block and the clinical queries they must pass.

use super::*;
use serde_json::json;

mod reviews;

fn tainted(texts: &[&str]) -> TaintSet {
    let mut taint = TaintSet::default();
    texts.iter().for_each(|t| taint.add_text(t));
    taint
}

#[test]
fn every_pattern_compiles() {
    for source in identifier_sources() {
        assert!(Regex::new(&source).is_ok(), "{source}");
    }
    assert_eq!(IDENTIFIER_PATTERNS.len(), identifier_sources().len());
    assert!(names::AFTER_PATIENT.is_some());
    assert!(names::AFTER_TITLE.is_some());
    assert!(numbers::NORTH_AMERICAN_PHONE.is_some());
    assert!(numbers::SPACED_SSN.is_some());
    assert!(numbers::UNIT_AFTER.is_some());
    assert!(numbers::NUMBER_WORD_BEFORE.is_some());
}

#[test]
fn the_tools_md_example() {
    let mut taint = TaintSet::default();
    taint.add_result(&json!({"events": [{"title": "Follow-up Zebulon Quixote"}]}));
    assert!(taint.matches("Zebulon heart failure"));
    assert!(taint.matches("QUIXOTE"));
    assert!(!taint.matches("beta blockers in heart failure"));
    assert!(taint.matches("outcomes after follow-up zebulon"));
}

#[test]
fn two_word_runs_match_even_when_common() {
    let taint = tainted(&["Heart failure clinic review"]);
    assert!(taint.matches("clinic review outcomes"));
    // TOOLS.md: any run of two words, common or not.
    assert!(taint.matches("SGLT2 in HEART FAILURE"));
    assert!(!taint.matches("heart rate variability"));
    assert!(!taint.matches("failure heart"));
}

#[test]
fn medical_vocabulary_is_not_rare() {
    let taint = tainted(&[
        "Metformin SGLT2 anticoagulation apixaban",
        "Started empagliflozin; echocardiography booked",
        "Alzheimer's dementia, Parkinson's, hyperkalaemia",
    ]);
    for query in [
        "metformin",
        "sglt2 inhibitors",
        "anticoagulation",
        "apixaban dosing",
        "empagliflozin",
        "echocardiography",
        "alzheimer disease",
        "hyperkalaemia treatment",
        "statins",
    ] {
        assert!(!taint.matches(query), "{query}");
    }
}

#[test]
fn unusual_names_stay_rare() {
    for name in ["zebulon", "quixote", "oyarvide", "ngozi", "o'shaughnessy", "müller"] {
        assert!(is_rare(name), "{name}");
    }
    for word in ["metformin", "sglt2", "anticoagulation", "heart", "inhibitors", "stenoses", "b12"] {
        assert!(!is_rare(word), "{word}");
    }
    let taint = tainted(&["Zebulon's MRI", "Call O'Shaughnessy about Müller"]);
    assert!(taint.matches("zebulon"));
    assert!(taint.matches("o'shaughnessy asthma"));
    assert!(taint.matches("Müller sepsis"));
    assert!(!taint.matches("MRI of the knee"));
}

#[test]
fn long_numbers_from_phi_results_are_rare_years_are_not() {
    let taint = tainted(&["Case 4711882, seen 2024", "Room 12 Smith"]);
    assert!(taint.matches("4711882 sepsis"));
    assert!(!taint.matches("sepsis 2024 guideline"));
    // Numbers keep runs consecutive: "room" and "smith" were not next to each other.
    assert!(!taint.matches("room smith"));
    assert!(taint.matches("room 12"));
}

#[test]
fn function_word_pairs_are_not_leaks() {
    let taint = tainted(&["Review of the results in the clinic"]);
    assert!(!taint.matches("effect of the intervention in the elderly"));
    assert!(taint.matches("results in children"));
}

#[test]
fn empty_taint_matches_nothing() {
    let taint = TaintSet::default();
    assert!(taint.is_empty());
    assert!(!taint.matches("Zebulon Quixote"));
    let mut taint = TaintSet::default();
    taint.add_result(&json!({"count": 3, "ok": true, "items": []}));
    assert!(taint.is_empty());
}

#[test]
fn identifiers_are_blocked() {
    for leak in [
        "MRN 12345678 sepsis",
        "mrn: A-1234 pneumonia",
        "record number 98765",
        "patient ID 4711 outcomes",
        "Fallnummer 20231234",
        "123-45-6789",
        "SSN of patient",
        "call 555-123-4567",
        "(555) 123-4567 asthma",
        "+49 30 12345678",
        "0171 1234567 diabetes",
        "555123456789",
        "jane.doe@example.org asthma",
        "born 03/04/1961",
        "born on 3 March",
        "DOB 1961 asthma",
        "date of birth and sepsis",
        "03/04/1961 asthma",
        "3.4.61 asthma",
        "1961-03-04 admission",
        "12 March 1961 asthma",
        "12th of March 1961",
        "March 12, 1961 asthma",
        "lives at 42 Elm Street",
        "17 Oak Tree Lane",
        "221B Baker St",
        "Hauptstraße 5 Berlin",
        "Mr. Smith chest pain",
        "Dr Quixote asthma",
        "Frau Müller sepsis",
        "patient John Smith",
        "patient Zebulon heart failure",
        "pt: Quixote pneumonia",
        // Titled names as records and transcripts write them: initials, apostrophes, upper-case
        // surnames, titles in any case when a period, an initial or a capital marks them.
        "Mr. J. Smith chest pain",
        "Mrs J Doe asthma",
        "Dr. O'Brien sepsis",
        "Mr. SMITH pneumonia",
        "Frau MÜLLER sepsis",
        "MR. SMITH pneumonia",
        "mr. smith asthma",
        "mr Smith asthma",
        "dr J. Quixote",
        // Dates with a month name written as records write them, and two-digit years.
        "03-Mar-1961 asthma",
        "12MAR1961",
        "03-MAR-61 sepsis",
        "3/Mar/61",
        "3 March 61 asthma",
        "12th of March '61",
        "12. März 1961 Sepsis",
        // An SSN with spaces, where it is called one; national numbers in groups (UK and German
        // style), with the area code in brackets or before a slash, in groups of two too.
        "social security number 123 45 6789",
        "123 45 6789",
        "Mr. Teer follow-up",
        "Mrs Teer echo",
        "Social Security: 123 45 6789 asthma",
        "call 020 7946 0958",
        "030 1234 5678 asthma",
        "(020) 7946 0958",
        "(030) 1234 5678 asthma",
        "030/1234 5678",
        "0171 123 45 67 diabetes",
        // Only a lower-case "ms" after a number is milliseconds.
        "Bed 3 Ms Lee",
        "aged 67 Ms Brown",
        "follow-up at 14:30 Ms Smith",
        "Bed 3 MS. LEE",
        // An abbreviation does not hide the title right after it.
        "severe MR Mr. Smith",
        "MS Mrs Jones relapse",
        // Titles the fixes below leave as names.
        "Mx. Smith asthma",
        "Mx J. Smith asthma",
        "MR. J. Smith",
    ] {
        assert!(has_identifier(leak), "{leak}");
        assert_eq!(screen_text(leak, &TaintSet::default()), Err(ToolError::PhiBlocked), "{leak}");
    }
}

#[test]
fn clinical_queries_pass() {
    for clean in [
        "beta blockers in heart failure",
        "type 2 diabetes metformin dose",
        "covid-19 2020-2022 trials",
        "ACE inhibitors 10 mg",
        "SGLT2 inhibitors 2023 meta-analysis",
        "CHA2DS2-VASc score in atrial fibrillation",
        "HbA1c target 6.5-7.0 in older adults",
        "pH 7.35-7.45 metabolic acidosis",
        "mRNA-1273 vaccine efficacy",
        "medical record review quality",
        "electronic medical record adoption",
        "infants born to mothers with diabetes",
        "children born in 2010 vaccination",
        "patient with heart failure",
        "Patient Reported Outcomes in COPD",
        "Patient Safety Outcomes",
        "patients undergoing PCI",
        "2 stents in place",
        "MS treatment natalizumab",
        "PMID 27797938",
        "10.1136/gutjnl-2016-312510",
        "apixaban 5 mg twice daily 2019",
        "ICD-10 I48.0 coding",
        "1-2-3 rule",
        "vitamin B12 deficiency",
        "troponin 14 ng/L cut-off",
        "follow up after myocardial infarction",
        "Wells score for DVT",
        // Clinical abbreviations that are also titles: MR imaging, mitral regurgitation, MS,
        // diabetic retinopathy, MR spectroscopy, Mx (management), milliseconds.
        "MR imaging of the knee",
        "mr imaging of the knee",
        "MR Angiography of the Circle of Willis",
        "MR elastography liver fibrosis",
        "severe MR after TAVI",
        "MRS glutamate in schizophrenia",
        "MS relapse treatment",
        "MS Relapse Rates",
        "ms patients fatigue",
        "DR screening with AI",
        "DR. Screening programmes",
        "Mx of COPD exacerbation",
        "Mx COPD exacerbation",
        "Miss rate of adenoma in colonoscopy",
        "QTc over 500 ms in women",
        "QRS 120 ms. Prolonged QRS and CRT",
        "MS A systematic review",
        "dose 3 mg twice daily",
        "ACE inhibitors in CKD",
        "HbA1c 7.5 target",
        "NYHA III heart failure",
        "SEPT9 methylation colorectal screening",
        "MARCH1 ubiquitin ligase",
        "retinal thickness on OCT at week 12",
        "12 OCT 24 weeks",
        "BP 120 80 target",
        "IL-6 10-20 pg/mL",
        "MR-guided focused ultrasound",
        "MR enterography Crohn disease",
        "mr. imaging of the liver",
        "MS, DR and MR in diabetes",
        "gene SEPT9 and MARCH6",
        "10 octreotide 20",
        // Mx (management) is read like an upper-case title: a name only with a period or initials.
        "Mx croup",
        "Mx haemoptysis",
        "Mx neutropenic sepsis",
        "Mx CAP",
        "Mx PPH",
        "Mx GBS",
        "Mx HHS",
        "Mx SAH",
        "Mx AF",
        "Mx GORD",
        "Mx ELIQUIS dosing",
        "Mx HFpEF",
        // After an upper-case title a bare capital is a word, not an initial, and a period then a
        // capitalised word is the end of a sentence.
        "MS B cell depletion ocrelizumab",
        "MS T cell",
        "MR T staging rectal cancer",
        "Pregnancy in MS. Ocrelizumab safety",
        "in MS. Natalizumab PML risk",
        "severe MR. TEER outcomes",
        // Three numbers are an SSN only where it is called one.
        "BP 140 90 2017 guideline",
        "BP target 130 80 2017 guideline",
        "LDL 100 70 2019 ESC",
        // Clinical numbers beside the grouped phone numbers.
        "BP 120/80 in the elderly",
        "target BP 130/80 2017",
        "amlodipine 5 10 mg 2019",
        "NYHA III 2021 ESC",
        "GCS 15 E4 V5 M6",
        "APGAR 8 9 10 at 1 5 10 min",
        "CURB-65 score 0 1 2",
        "ferritin 30 100 300 ng/mL",
        "0.5 1 2 mg/kg",
        "INR 2.0 3.0 target",
    ] {
        assert!(!has_identifier(clean), "{clean}");
        assert_eq!(screen_text(clean, &TaintSet::default()), Ok(()), "{clean}");
    }
}

/// A stand-in third-party tool that builds no text of its own.
struct Plain(crate::tools::ToolSpec);

#[async_trait::async_trait]
impl Tool for Plain {
    fn spec(&self) -> &crate::tools::ToolSpec {
        &self.0
    }
    async fn call(
        &self,
        _args: Value,
        _ctx: crate::tools::CallContext,
    ) -> Result<crate::tools::ToolOutput, ToolError> {
        Err(ToolError::Internal)
    }
}

fn plain() -> Plain {
    Plain(crate::tools::ToolSpec {
        name: "plain",
        description: String::new(),
        parameters: json!({"type": "object"}),
        category: crate::tools::Category::Mcp,
        phi: false,
        risk: crate::tools::Risk::Low,
        requires_confirmation: false,
        third_party: true,
        rate_limit_per_minute: 10,
        timeout: std::time::Duration::from_secs(1),
    })
}

#[test]
fn numbers_are_screened_as_their_decimal_text() {
    let empty = TaintSet::default();
    let leaks = [json!({"n": 5558675309u64}), json!({"phone": [5558675309.0]}), json!({"deep": {"x": -5558675309i64}})];
    for leak in leaks {
        assert_eq!(screen_call(&plain(), &leak, &empty), Err(ToolError::PhiBlocked), "{leak}");
    }
    let taint = tainted(&["Case 48213377"]);
    assert_eq!(screen_call(&plain(), &json!({"case": 48213377}), &taint), Err(ToolError::PhiBlocked));
    // With its key: a record number, where 48213377 alone reads as a PubMed id.
    assert_eq!(screen_call(&plain(), &json!({"mrn": 48213377}), &empty), Err(ToolError::PhiBlocked));
    assert_eq!(screen_call(&plain(), &json!({"pmid": 48213377}), &empty), Ok(()));
    // A fraction is no identifier, however many digits it prints with.
    assert_eq!(screen_call(&plain(), &json!({"ratio": 0.30000000000000004, "dose_mg": 2.5}), &empty), Ok(()));
    assert_eq!(screen_call(&plain(), &json!({"max_results": 20, "query": "asthma", "ok": true}), &taint), Ok(()));
}

#[test]
fn keys_and_numbers_of_phi_results_taint() {
    let mut taint = TaintSet::default();
    taint.add_result(&json!({"structured": {"Zebulon Quixote": 48213377}}));
    assert!(taint.matches("Zebulon"));
    assert!(taint.matches("48213377"));
    let mut taint = TaintSet::default();
    taint.add_result(&json!({"John Smith": {"mrn_4471123": true}}));
    assert!(taint.matches("john smith asthma"), "a key that reads as text taints as text");
    assert!(taint.matches("4471123"));
    // Schema-like keys of a PHI result ("heart_rate") are not patient data: their common
    // words do not taint as a pair, so the literature search that follows still works.
    let mut taint = TaintSet::default();
    taint.add_result(&json!({"heart_rate": 72, "start_time": "09:00", "date_of_birth": "x"}));
    assert!(!taint.matches("heart rate variability"));
    assert!(!taint.matches("date of onset"));
}

#[test]
fn screen_text_combines_patterns_and_taint() {
    let taint = tainted(&["Quixote, Zebulon", "Knee pain follow-up"]);
    assert_eq!(screen_text("zebulon knee", &taint), Err(ToolError::PhiBlocked));
    assert_eq!(screen_text("knee pain management", &taint), Err(ToolError::PhiBlocked));
    assert_eq!(screen_text("knee osteoarthritis management", &taint), Ok(()));
    assert_eq!(screen_text("osteoarthritis 01/02/2003", &taint), Err(ToolError::PhiBlocked));
}

#[test]
fn the_taint_is_capped_and_fails_closed_past_the_cap() {
    let mut taint = TaintSet::default();
    // 10,000 file results of 30 distinct names each: 590,000 words and pairs, past the cap.
    for i in 0..10_000 {
        let text: Vec<String> = (0..30).map(|j| format!("zebulon{i}q{j}")).collect();
        taint.add_result(&json!({"text": text.join(" ")}));
    }
    assert!(taint.len() <= MAX_TAINT_ENTRIES, "{} entries", taint.len());
    // Nothing is forgotten silently: past the cap every text matches, so no third-party call leaves.
    assert!(!taint.is_empty());
    assert!(taint.matches("beta blockers in heart failure"));
    // The refusal says so: asking again without names would not help.
    assert_eq!(screen_text("beta blockers in heart failure", &taint), Err(ToolError::TaintFull));
    assert_eq!(screen_call(&plain(), &json!({"query": "asthma"}), &taint), Err(ToolError::TaintFull));
    assert_eq!(screen_call(&plain(), &json!({"ratio": 0.5}), &taint), Err(ToolError::TaintFull));
    assert_eq!(ToolError::TaintFull.code(), crate::tools::ErrorCode::PhiBlocked);
    let message = ToolError::TaintFull.model_message();
    assert!(message.contains("new session"), "{message}");
    assert!(!message.contains("without names"), "{message}");
}
