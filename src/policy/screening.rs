//! Outbound PHI screening for tools that send text to a third party (TOOLS.md, "PHI never leaves
//! for a third party"; the rules with examples are in docs/phi.md).
//!
//! Two checks run before a third-party call leaves, on every string in its arguments (values and
//! keys, at any depth: a date limit reaches PubMed as `mindate` just as the query does) and on
//! any text the tool builds from them ([`Tool::outbound_text`]), each string on its own. A tool
//! is screened because its spec says `third_party`, so a new third-party tool is covered without
//! writing anything:
//!
//! 1. **Identifier patterns**: record numbers, SSNs, phone numbers, e-mail addresses, full dates
//!    and birth-date phrases, street addresses, names after a title ("Mr.", "Dr") or after
//!    "patient". Each pattern is written against clinical queries too: "type 2 diabetes",
//!    "covid-19 2020-2022 trials", "HbA1c 6.5-7.0", "mRNA-1273", "ACE inhibitors 10 mg" pass.
//! 2. **The session's [`TaintSet`]**: the words of every string a PHI tool has returned in this
//!    session. A query is blocked when it shares a run of two consecutive words with one of those
//!    strings (case-insensitive; pairs made only of function words such as "of the" do not count),
//!    or a single word that is neither common English nor common medical vocabulary — so
//!    "Zebulon heart failure" is blocked after a calendar event "Follow-up Zebulon Quixote", while
//!    "beta blockers in heart failure" is not. Numbers of five or more digits count as rare words
//!    (a record number seen in a PHI result may not leave either).
//!
//! Vocabulary: `common_words.txt` (the 20,000 most frequent English words, from wordfreq) and
//! `medical_words.txt` (drug classes, drugs, diseases, anatomy, tests, research terms).

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::tools::{Tool, ToolError};

/// Words too common to identify anyone on their own (English and medical vocabulary).
static COMMON_WORDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| word_list(include_str!("common_words.txt")).chain(MEDICAL_WORDS.iter().copied()).collect());

/// Medical vocabulary alone: the words allowed after "patient" (see [`named_patient`]).
static MEDICAL_WORDS: LazyLock<HashSet<&'static str>> =
    LazyLock::new(|| word_list(include_str!("medical_words.txt")).collect());

/// Function words: a pair made only of these ("of the", "in a") is not a leak.
const STOP_WORDS: &[&str] = &[
    "a", "an", "the", "of", "in", "on", "at", "to", "for", "with", "without", "and", "or", "by", "from", "is", "are",
    "was", "were", "be", "as", "this", "that", "it", "its", "not", "no", "vs", "versus", "after", "before", "during",
    "into", "than", "then", "per", "via", "about", "between", "under", "over",
];

fn word_list(text: &'static str) -> impl Iterator<Item = &'static str> {
    text.lines().map(str::trim).filter(|w| !w.is_empty() && !w.starts_with('#'))
}

/// Day and month of a numeric date, and its year (two or four digits).
const DAY: &str = r"(?:0?[1-9]|[12][0-9]|3[01])";
const MONTH: &str = r"(?:0?[1-9]|1[0-2])";
const YEAR: &str = r"(?:[0-9]{4}|[0-9]{2})";
const MONTH_NAME: &str = r"(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.?";

/// Identifier patterns. Broad where a false block only costs the user a rephrase, narrow where a
/// common clinical query would otherwise be blocked (numeric ranges, drug doses, trial years).
static IDENTIFIER_PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
    identifier_sources()
        .iter()
        .filter_map(|source| match Regex::new(source) {
            Ok(regex) => Some(regex),
            Err(err) => {
                // Caught by `every_pattern_compiles`; logged so it can never go unnoticed.
                tracing::error!(error = %err, "PHI identifier pattern does not compile");
                None
            }
        })
        .collect()
});

fn identifier_sources() -> Vec<String> {
    let numeric_dates = ["/", r"\.", "-"].map(|sep| {
        // d/m/y, m/d/y (either order: the first two parts are both ≤ 31) and ISO y-m-d, one
        // separator per date, so "6.5-7.0" or "2020-2022" is not a date.
        format!(r"\b{DAY}{sep}{DAY}{sep}{YEAR}\b|\b(?:19|20)[0-9]{{2}}{sep}{MONTH}{sep}{DAY}\b")
    });
    let mut patterns: Vec<String> = vec![
        // Record numbers: "MRN 123456", "MRN: A-1234", "record number 98765", "patient ID 4711".
        // The value must hold digits, so "medical record review" is not one; `mrn\b` keeps
        // "mRNA-1273" out.
        r"(?i)\b(?:mrn\b|mr\s?no\b\.?|(?:medical\s+)?record\s+(?:number\b|no\b\.?|\#)|patient\s+(?:id\b|number\b|no\b\.?|\#)|(?:chart|case)\s+(?:number\b|no\b\.?|\#)|fallnummer\b|patientennummer\b)[\s:\#.-]{0,3}[a-z]{0,3}-?[0-9]{3,}".into(),
        // US social security numbers, with or without the word.
        r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b|(?i)\bssn\b".into(),
        // Phone numbers: North American 3-3-4, international "+49 30 1234567", national trunk
        // prefix "0171 1234567", and any bare run of 9+ digits (PMIDs have at most 8).
        r"(?:\+?1[\s.-]?)?(?:\([0-9]{3}\)|\b[0-9]{3})[\s.-]?[0-9]{3}[\s.-][0-9]{4}\b".into(),
        r"\+[0-9]{1,3}[\s.-]?\(?[0-9]{1,4}\)?(?:[\s.-]?[0-9]{2,4}){2,4}\b".into(),
        r"\b0[0-9]{2,4}[\s/-]?[0-9]{5,8}\b".into(),
        r"\b[0-9]{9,}\b".into(),
        // E-mail addresses.
        r"(?i)\b[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}\b".into(),
        // Dates with a month name: "12 March 1961", "March 12, 1961", "12th of March 1961".
        format!(r"(?i)\b{DAY}(?:st|nd|rd|th)?\s+(?:of\s+)?{MONTH_NAME},?\s+[0-9]{{4}}\b"),
        format!(r"(?i)\b{MONTH_NAME}\s+{DAY}(?:st|nd|rd|th)?,?\s+[0-9]{{4}}\b"),
        // Birth-date phrases ("infants born to mothers with diabetes" is fine: a day must follow).
        format!(r"(?i)\b(?:dob|d\.o\.b|date\s+of\s+birth|birth\s?date|geburtsdatum|geb\.)|\bborn\s+(?:on\s+)?(?:[0-9]{{1,2}}\b|{MONTH_NAME}\s+[0-9])"),
        // Street addresses: a house number, a street name and a street word. Unambiguous street
        // words in any case; short or ambiguous ones ("Way", "Dr", "Place") only after a
        // capitalised name, so "2 stents in place" is not an address.
        r"(?i)\b[0-9]{1,5}[a-z]?\s+(?:[a-z]+\s+){1,3}(?:street|avenue|boulevard|road|lane)\b".into(),
        r"\b[0-9]{1,5}[A-Za-z]?\s+(?:[A-Z][a-z]+\s+){1,3}(?:St|Ave|Rd|Ln|Dr|Drive|Blvd|Way|Court|Ct|Place|Pl|Terrace|Close|Crescent)\b".into(),
        r"(?i)\b[a-zäöüß]+(?:straße|strasse|str\.|weg|gasse|allee|platz)\s+[0-9]{1,4}[a-z]?\b".into(),
        // Names after a title: "Mr. Smith", "Dr Quixote", "Frau Müller".
        r"\b(?:Mr|Mrs|Ms|Mx|Miss|Dr|Prof|Herr|Frau)\.?\s+\p{Lu}\p{Ll}+".into(),
    ];
    patterns.extend(numeric_dates);
    patterns
}

/// "patient"/"pt" followed by a capitalised word: a name unless the word is medical vocabulary or
/// a function word ("Patient Safety Outcomes", "Patient With Diabetes" pass).
static AFTER_PATIENT: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"\b(?i:patient|pt)\b[:,.]?\s+(\p{Lu}[\p{Ll}'-]+)").ok());

/// Every word a PHI tool returned in this session, and the consecutive pairs among them.
#[derive(Debug, Default, Clone)]
pub struct TaintSet {
    /// Words that identify on their own (not common English or medical vocabulary).
    rare_words: HashSet<String>,
    /// Consecutive word pairs, `"a b"`, from each PHI string.
    pairs: HashSet<String>,
}

impl TaintSet {
    /// Taint every string inside a PHI tool's result.
    pub fn add_result(&mut self, result: &Value) {
        let mut strings = Vec::new();
        collect_strings(result, &mut strings);
        for text in strings {
            self.add_text(text);
        }
    }

    pub fn add_text(&mut self, text: &str) {
        let words = words(text);
        for word in &words {
            if is_rare(word) {
                self.rare_words.insert(word.clone());
            }
        }
        for pair in words.windows(2) {
            if counts_as_pair(&pair[0], &pair[1]) {
                self.pairs.insert(format!("{} {}", pair[0], pair[1]));
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.rare_words.is_empty() && self.pairs.is_empty()
    }

    /// Does `text` share a rare word or a run of two words with anything tainted?
    pub fn matches(&self, text: &str) -> bool {
        if self.is_empty() {
            return false;
        }
        let words = words(text);
        words.iter().any(|w| self.rare_words.contains(w))
            || words.windows(2).any(|pair| self.pairs.contains(&format!("{} {}", pair[0], pair[1])))
    }
}

/// Does `text` carry an identifier pattern?
pub fn has_identifier(text: &str) -> bool {
    IDENTIFIER_PATTERNS.iter().any(|pattern| pattern.is_match(text)) || named_patient(text)
}

/// "patient Quixote", "pt: Smith": a capitalised non-medical word right after "patient".
fn named_patient(text: &str) -> bool {
    let Some(pattern) = AFTER_PATIENT.as_ref() else { return true };
    pattern.captures_iter(text).any(|caps| {
        caps.get(1).is_some_and(|name| {
            let word = normalise(name.as_str());
            !(known(&MEDICAL_WORDS, &word) || STOP_WORDS.contains(&word.as_str()))
        })
    })
}

/// Screen what a third-party call would send. `Err(PhiBlocked)` means the call must not leave.
pub fn screen_call(tool: &dyn Tool, args: &Value, taint: &TaintSet) -> Result<(), ToolError> {
    let mut strings = Vec::new();
    argument_strings(args, &mut strings);
    let built = tool.outbound_text(args);
    strings.into_iter().chain(built.as_deref()).try_for_each(|text| screen_text(text, taint))
}

/// Every string in a call's arguments: values and object keys, at any depth.
fn argument_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| argument_strings(v, out)),
        Value::Object(map) => map.iter().for_each(|(key, v)| {
            out.push(key);
            argument_strings(v, out);
        }),
        _ => {}
    }
}

pub fn screen_text(text: &str, taint: &TaintSet) -> Result<(), ToolError> {
    if has_identifier(text) || taint.matches(text) { Err(ToolError::PhiBlocked) } else { Ok(()) }
}

pub(crate) fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// Lower-cased words in order; punctuation splits words ("follow-up" is two), numbers are words
/// too so that runs stay consecutive ("Room 12 Smith" has no run "room smith").
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'').map(normalise).filter(|w| !w.is_empty()).collect()
}

/// Lower case, no surrounding apostrophes, no possessive "'s" ("Zebulon's" is "zebulon").
fn normalise(word: &str) -> String {
    let lower = word.trim_matches('\'').to_lowercase();
    match lower.strip_suffix("'s") {
        Some(stem) if !stem.is_empty() => stem.trim_matches('\'').to_string(),
        _ => lower,
    }
}

/// A pair counts unless both words are function words.
fn counts_as_pair(a: &str, b: &str) -> bool {
    !(STOP_WORDS.contains(&a) && STOP_WORDS.contains(&b))
}

fn is_rare(word: &str) -> bool {
    if word.chars().all(|c| c.is_ascii_digit()) {
        // Years, doses and times are not identifying; record and phone numbers are.
        return word.len() >= 5;
    }
    word.chars().count() >= 3 && !known(&COMMON_WORDS, word)
}

/// In `list` as written or as the singular of a regular plural: "statins", "fractures", "crises"
/// (the Greek "-es" → "-is" of "stenoses", "diagnoses").
fn known(list: &HashSet<&'static str>, word: &str) -> bool {
    list.contains(word)
        || word.strip_suffix('s').is_some_and(|w| list.contains(w))
        || word.strip_suffix("es").is_some_and(|w| list.contains(w) || list.contains(format!("{w}is").as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert!(AFTER_PATIENT.is_some());
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
        ] {
            assert!(!has_identifier(clean), "{clean}");
            assert_eq!(screen_text(clean, &TaintSet::default()), Ok(()), "{clean}");
        }
    }

    #[test]
    fn screen_text_combines_patterns_and_taint() {
        let taint = tainted(&["Quixote, Zebulon", "Knee pain follow-up"]);
        assert_eq!(screen_text("zebulon knee", &taint), Err(ToolError::PhiBlocked));
        assert_eq!(screen_text("knee pain management", &taint), Err(ToolError::PhiBlocked));
        assert_eq!(screen_text("knee osteoarthritis management", &taint), Ok(()));
        assert_eq!(screen_text("osteoarthritis 01/02/2003", &taint), Err(ToolError::PhiBlocked));
    }
}
