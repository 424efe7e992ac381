//! Relevance of the shipped corpus: clinician-style queries and the guideline a clinician would
//! expect first. The pairs were written before the index's boosts and the corpus text were tuned;
//! tuning may change the corpus and the ranking, never these expectations.

use super::shipped_index;

/// Query → acceptable guideline ids; the first id is the one expected at rank 1.
const PAIRS: &[(&str, &[&str])] = &[
    ("blood pressure screening in adults", &["uspstf-hypertension-screening-adults"]),
    ("when to start colorectal cancer screening at age 45 colonoscopy", &["uspstf-colorectal-cancer-screening"]),
    ("mammogram every two years starting at 40", &["uspstf-breast-cancer-screening"]),
    ("pap smear and HPV co-testing interval", &["uspstf-cervical-cancer-screening"]),
    ("low-dose CT for heavy smokers pack-years", &["uspstf-lung-cancer-screening"]),
    ("ultrasound for aortic aneurysm in men who smoked", &["uspstf-abdominal-aortic-aneurysm-screening"]),
    ("bone density DXA in postmenopausal women", &["uspstf-osteoporosis-screening"]),
    ("statin for primary prevention 10-year cardiovascular risk", &["uspstf-statin-primary-prevention"]),
    ("injectable cabotegravir PrEP", &["cdc-hiv-prep-guideline", "uspstf-hiv-prep"]),
    ("gonorrhea ceftriaxone dose", &["cdc-sti-treatment-2021"]),
    ("opioid prescribing for chronic pain morphine milligram equivalents", &["cdc-opioid-prescribing-2022"]),
    ("shingles vaccine Shingrix", &["cdc-zoster-vaccination"]),
    ("pneumococcal vaccine PCV20 adults 50 and older", &["cdc-pneumococcal-vaccination"]),
    ("low dose aspirin to prevent preeclampsia", &["uspstf-preeclampsia-aspirin"]),
    ("glucose challenge test at 24 weeks of pregnancy", &["uspstf-gestational-diabetes-screening"]),
    ("asthma SMART therapy ICS formoterol", &["nhlbi-asthma-2020-focused-update"]),
    ("COPD inhaler LAMA LABA exacerbations", &["vadod-copd"]),
    ("anticoagulation in atrial fibrillation DOAC stroke prevention", &["nhlbi-atrial-fibrillation-treatment"]),
    ("heart failure reduced ejection fraction SGLT2 inhibitor", &["nhlbi-heart-failure-treatment"]),
    ("prevent blood clots in hospitalized patients heparin prophylaxis", &["ahrq-vte-prevention"]),
    ("diabetic ketoacidosis insulin infusion potassium", &["cdc-diabetic-ketoacidosis"]),
    ("uncomplicated urinary tract infection nitrofurantoin", &["cdc-urinary-tract-infection-outpatient"]),
    ("community acquired pneumonia outpatient amoxicillin", &["cdc-community-acquired-pneumonia-outpatient"]),
    ("sepsis lactate blood cultures antibiotics within an hour", &["cdc-hospital-sepsis-program"]),
    ("alcohol misuse screening AUDIT-C", &["uspstf-unhealthy-alcohol-use"]),
    ("quit smoking varenicline nicotine replacement", &["uspstf-tobacco-cessation-adults"]),
    ("tick bite doxycycline prophylaxis Lyme", &["cdc-lyme-disease"]),
    ("alcohol hand rub versus soap and water C. difficile", &["cdc-hand-hygiene"]),
    ("metformin kidney function eGFR warning", &["fda-metformin-renal-impairment"]),
    ("fluoroquinolone tendon rupture warning", &["fda-fluoroquinolone-warnings"]),
    ("hepatitis C screening all adults", &["uspstf-hepatitis-c-screening", "cdc-hepatitis-c-screening"]),
    ("latent TB treatment rifampin IGRA", &["cdc-latent-tb-treatment", "uspstf-latent-tb-screening"]),
    ("depression screening PHQ-9 adults", &["uspstf-depression-suicide-risk-adults"]),
    ("domestic violence screening women", &["uspstf-intimate-partner-violence-screening"]),
    ("sunscreen counseling children fair skin", &["uspstf-skin-cancer-counseling"]),
    ("blood lead levels in toddlers", &["uspstf-lead-screening"]),
    ("amblyopia vision check preschool children", &["uspstf-vision-screening-children"]),
    ("illicit drug use screening adults", &["uspstf-unhealthy-drug-use"]),
    ("exercise to prevent falls in older adults", &["uspstf-falls-prevention-older-adults"]),
    ("chronic kidney disease albuminuria ACE inhibitor", &["niddk-chronic-kidney-disease"]),
    (
        "prediabetes lifestyle program",
        &["niddk-diabetes-prevention-program", "uspstf-prediabetes-type2-diabetes-screening"],
    ),
    ("high-dose flu vaccine for people 65 and older", &["cdc-influenza-vaccination"]),
    ("Tdap during pregnancy", &["cdc-tdap-td-vaccination"]),
    ("syphilis screening in pregnant women", &["uspstf-syphilis-pregnancy-screening"]),
    ("aspirin for primary prevention of heart attack", &["uspstf-aspirin-cvd-prevention"]),
    ("doxycycline after sex to prevent STIs", &["cdc-doxy-pep"]),
];

/// Every query finds an acceptable guideline in its top three.
#[test]
fn every_query_finds_its_guideline_in_the_top_three() {
    let index = shipped_index();
    let mut misses = Vec::new();
    for (query, expected) in PAIRS {
        let top: Vec<String> = index.top_ids(query, 3);
        if !top.iter().any(|id| expected.contains(&id.as_str())) {
            misses.push(format!("{query:?}: expected {expected:?}, got {top:?}"));
        }
    }
    assert!(misses.is_empty(), "{} of {} queries missed:\n{}", misses.len(), PAIRS.len(), misses.join("\n"));
}

/// At least nine in ten queries rank the expected guideline first.
#[test]
fn most_queries_rank_the_expected_guideline_first() {
    let index = shipped_index();
    let mut wrong = Vec::new();
    for (query, expected) in PAIRS {
        let top = index.top_ids(query, 1);
        if top.first().map(String::as_str) != Some(expected[0]) {
            wrong.push(format!("{query:?}: expected {}, got {top:?}", expected[0]));
        }
    }
    eprintln!("relevance: {} of {} queries rank the expected guideline first", PAIRS.len() - wrong.len(), PAIRS.len());
    assert!(PAIRS.len() >= 20);
    assert!(wrong.len() * 10 <= PAIRS.len(), "{} of {} not first:\n{}", wrong.len(), PAIRS.len(), wrong.join("\n"));
}
