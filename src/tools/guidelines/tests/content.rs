//! Content checks of the shipped corpus that a parser cannot make: summaries are in the project's
//! own words (no run of words copied from a source sentence), a record agrees with itself, a record
//! whose detail comes from a society guideline says so, and versioned records name their version
//! and are listed in `SOURCES.md` for the yearly re-check. They guard the review of 2026-11 (see
//! `data/guidelines/SOURCES.md`); they check the corpus against itself, not against the sources.

use regex::Regex;

use super::corpus::{self, Guideline};

const SOURCES_MD: &str = include_str!("../../../../data/guidelines/SOURCES.md");

/// A run of this many words shared with a source sentence is copying, not paraphrase.
const COPIED_RUN_WORDS: usize = 6;

/// Task Force sentences a review found repeated nearly word for word in the corpus: the lung one as
/// the review quoted it, the others as the statements are worded (not fetched: no network here).
/// Facts such as ages and thresholds are shorter than the run above, so paraphrase can keep them.
const SOURCE_SENTENCES: &[&str] = &[
    "Screening should be discontinued once a person has not smoked for 15 years or develops a health \
     problem that substantially limits life expectancy or the ability or willingness to have curative \
     lung surgery.",
    "The USPSTF recommends screening for prediabetes and type 2 diabetes in adults aged 35 to 70 years \
     who have overweight or obesity. Clinicians should offer or refer patients with prediabetes to \
     effective preventive interventions.",
    "The USPSTF recommends that clinicians prescribe a statin for the primary prevention of CVD for \
     adults aged 40 to 75 years who have 1 or more CVD risk factors (ie, dyslipidemia, diabetes, \
     hypertension, or smoking) and an estimated 10-year risk of a CVD event of 10% or greater.",
    "The USPSTF recommends that clinicians selectively offer a statin for the primary prevention of CVD \
     for adults aged 40 to 75 years who have 1 or more of these CVD risk factors and an estimated \
     10-year risk of a CVD event of 7.5% to less than 10%.",
    "The USPSTF recommends screening by asking questions about unhealthy drug use in adults age 18 \
     years or older. Screening should be implemented when services for accurate diagnosis, effective \
     treatment, and appropriate care can be offered or referred.",
    "The USPSTF recommends that clinicians screen for intimate partner violence (IPV) in women of \
     reproductive age and provide or refer women who screen positive to ongoing support services.",
    "For men aged 55 to 69 years, the decision to undergo periodic prostate-specific antigen \
     (PSA)-based screening for prostate cancer should be an individual one.",
    "The USPSTF recommends against PSA-based screening for prostate cancer in men 70 years and older.",
];

/// Records whose summary must name the season or version they summarise, because the source is
/// reissued or was revised after it (with the marker the summary must hold).
const VERSIONED: &[(&str, &str)] = &[
    ("cdc-influenza-vaccination", "2024–25"),
    ("cdc-covid19-vaccination", "2024–2025"),
    ("cdc-adult-immunization-schedule", "2025"),
    ("cdc-rsv-vaccination-older-adults", "2024"),
    ("uspstf-syphilis-pregnancy-screening", "2018"),
    ("uspstf-hiv-prep", "2023"),
];

/// Words in a record that name a specialty society's guideline (not public domain) as its source.
const SOCIETY_MARKERS: &[&str] = &["IDSA", "HFSA", "HRS", "consensus report", "Surviving Sepsis"];

fn shipped() -> Vec<Guideline> {
    corpus::shipped().unwrap()
}

fn find<'a>(guidelines: &'a [Guideline], id: &str) -> &'a Guideline {
    guidelines.iter().find(|g| g.id == id).unwrap_or_else(|| panic!("no record {id}"))
}

/// Lower-cased words, punctuation dropped ("(PSA)-based" → "psa", "based").
fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric() && c != '.' && c != '%')
        .filter_map(|w| {
            let w = w.trim_matches('.');
            (!w.is_empty()).then(|| w.to_string())
        })
        .collect()
}

/// Every field a clinician or the model reads, plus the searched body.
fn prose(g: &Guideline) -> Vec<(&'static str, &str)> {
    let mut fields = vec![("summary", g.summary.as_str()), ("text", g.text.as_str())];
    fields.extend(g.recommendations.iter().map(|r| ("recommendations", r.as_str())));
    fields
}

#[test]
fn no_record_repeats_a_run_of_words_from_a_source_sentence() {
    let runs: Vec<Vec<String>> = SOURCE_SENTENCES
        .iter()
        .flat_map(|s| words(s).windows(COPIED_RUN_WORDS).map(<[String]>::to_vec).collect::<Vec<_>>())
        .collect();
    let mut copied = Vec::new();
    for g in shipped() {
        for (field, value) in prose(&g) {
            for window in words(value).windows(COPIED_RUN_WORDS) {
                if runs.iter().any(|run| run.as_slice() == window) {
                    copied.push(format!("{} {field}: \"{}\"", g.id, window.join(" ")));
                }
            }
        }
    }
    assert!(copied.is_empty(), "copied runs of {COPIED_RUN_WORDS} words:\n{}", copied.join("\n"));
}

/// "six topics: a, b, …" lists six things.
#[test]
fn a_counted_list_has_as_many_items_as_it_says() {
    let counted = Regex::new(r"(?i)\b(two|three|four|five|six|seven|eight|nine|ten|eleven|twelve) [a-z-]+:").unwrap();
    let numbers = ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"];
    let mut wrong = Vec::new();
    for g in shipped() {
        for (field, value) in prose(&g) {
            for found in counted.captures_iter(value) {
                let said = numbers.iter().position(|n| found[1].eq_ignore_ascii_case(n)).unwrap() + 2;
                let listed = list_items(&value[found.get(0).unwrap().end()..]);
                if said != listed {
                    wrong.push(format!("{} {field}: \"{}\" lists {listed}", g.id, &found[0]));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// Items of a list running to the end of its sentence, split at commas outside brackets; a last
/// item "a and b" without a serial comma is two.
fn list_items(rest: &str) -> usize {
    let (mut depth, mut items, mut current) = (0usize, Vec::new(), String::new());
    for c in rest.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '.' | ';' if depth == 0 => break,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    let last = items.last().map(|s| s.trim()).unwrap_or_default();
    items.len() + usize::from(!last.starts_with("and ") && last.contains(" and "))
}

#[test]
fn sickle_cell_pain_timing_is_as_the_report_gives_it() {
    let guidelines = shipped();
    let record = find(&guidelines, "nhlbi-sickle-cell-disease");
    let pain = record.recommendations.iter().find(|r| r.contains("aso-occlusive")).unwrap();
    assert!(pain.contains("30 minutes of triage") && pain.contains("60 minutes of registration"), "{pain}");
}

#[test]
fn the_opioid_guideline_is_given_without_a_dose_threshold() {
    let guidelines = shipped();
    let record = find(&guidelines, "cdc-opioid-prescribing-2022");
    let threshold = Regex::new(r"(?i)\d+\s*(morphine milligram|MME)").unwrap();
    for r in &record.recommendations {
        assert!(!threshold.is_match(r), "a fixed dose threshold in a recommendation: {r}");
    }
    assert!(record.recommendations.iter().any(|r| r.contains("no fixed")), "{:?}", record.recommendations);
}

/// Every age range the RSV summary names is one its recommendations give.
#[test]
fn the_rsv_summary_names_only_the_ages_of_its_recommendations() {
    let guidelines = shipped();
    let record = find(&guidelines, "cdc-rsv-vaccination-older-adults");
    let ages = Regex::new(r"\d+ (to \d+|and older)").unwrap();
    let recommendations = record.recommendations.join(" ");
    for age in ages.find_iter(&record.summary) {
        assert!(recommendations.contains(age.as_str()), "summary says {:?}, recommendations do not", age.as_str());
    }
}

/// A record that names a society guideline says in its summary, and in SOURCES.md, that its detail
/// is derived from it and what the linked federal page is.
#[test]
fn a_record_derived_from_a_society_guideline_says_so() {
    let mut missing = Vec::new();
    for g in shipped() {
        let all = prose(&g).iter().map(|(_, v)| *v).collect::<Vec<_>>().join(" ");
        if !SOCIETY_MARKERS.iter().any(|m| all.contains(m)) {
            continue;
        }
        if !g.summary.to_lowercase().contains("derived from") {
            missing.push(format!("{}: summary", g.id));
        }
        let listed = SOURCES_MD.lines().any(|l| l.contains(&format!("`{}`", g.id)) && l.contains("derived from"));
        if !listed {
            missing.push(format!("{}: SOURCES.md", g.id));
        }
    }
    assert!(missing.is_empty(), "no \"derived from\" statement:\n{}", missing.join("\n"));
}

#[test]
fn versioned_records_name_their_version_and_are_due_for_re_check() {
    let guidelines = shipped();
    let recheck = SOURCES_MD.split("## Due for the yearly re-check").nth(1).expect("a re-check section in SOURCES.md");
    let recheck = recheck.split("\n## ").next().unwrap_or_default();
    for (id, marker) in VERSIONED {
        let g = find(&guidelines, id);
        assert!(g.summary.contains(marker), "{id}: {marker} not in the summary");
        assert!(recheck.contains(&format!("`{id}`")), "{id} is not listed for re-check");
    }
    // The PrEP statement predates an option another record reports approved after it.
    let prep = find(&guidelines, "uspstf-hiv-prep");
    assert!(prep.recommendations.iter().any(|r| r.contains("lenacapavir")), "{:?}", prep.recommendations);
}

/// In a versioned record, a year later than the version summarised appears only in a sentence that
/// says it is after it.
#[test]
fn later_events_are_marked_as_after_the_version_summarised() {
    let year = Regex::new(r"\b20\d\d\b").unwrap();
    let guidelines = shipped();
    let mut unmarked = Vec::new();
    for (id, _) in VERSIONED {
        let g = find(&guidelines, id);
        let updated: i32 = g.last_updated[..4].parse().unwrap();
        for (field, value) in prose(g) {
            for sentence in value.split(". ") {
                let later = year.find_iter(sentence).any(|y| y.as_str().parse::<i32>().is_ok_and(|y| y > updated));
                if later && !sentence.contains("after") {
                    unmarked.push(format!("{id} {field}: {sentence}"));
                }
            }
        }
    }
    assert!(unmarked.is_empty(), "{}", unmarked.join("\n"));
}

#[test]
fn sources_md_claims_no_check_that_was_not_made() {
    for claim in ["were checked", "were verified", "were fetched", "have been checked", "have been verified"] {
        assert!(!SOURCES_MD.contains(claim), "SOURCES.md says {claim:?}");
    }
    assert!(SOURCES_MD.contains("journal versions"), "SOURCES.md must say the journal versions are not used");
    for g in shipped() {
        assert!(SOURCES_MD.contains(&format!("`{}`", g.id)), "{} is not in SOURCES.md", g.id);
    }
}
