//! Outbound PHI screening for tools that send text to a third party (TOOLS.md, "PHI never leaves
//! for a third party"; the rules with examples are in docs/phi.md).
//!
//! Two checks run before a third-party call leaves, on every text in its arguments (string values,
//! keys, and numbers — whole ones with their key, "mrn 48213377"; fractions against the taint only
//! — at any depth: a date limit reaches PubMed as `mindate` just as the query does, a phone number
//! may come as a JSON number) and on any text the tool builds from them ([`Tool::outbound_text`]).
//! The same screen decides whether a non-PHI tool's arguments may be audited
//! (session/calls/audit_record.rs). A tool
//! is screened because its spec says `third_party`, so a new third-party tool is covered without
//! writing anything:
//!
//! 1. **Identifier patterns**: record numbers, SSNs, NHS and phone numbers (with spaces only, told
//!    from dose ladders in `numbers`), e-mail addresses, full dates and birth-date phrases, street
//!    addresses, names after a title ("Mr.", "Dr"; `titled_name`) or after "patient". Each pattern
//!    is written against clinical queries too: "type 2 diabetes", "covid-19 2020-2022 trials",
//!    "HbA1c 6.5-7.0", "mRNA-1273", "ACE inhibitors 10 mg", "MR imaging of the knee" pass.
//! 2. **The session's [`TaintSet`]**: the words of every string, number and key a PHI tool has
//!    returned in this session. A query is blocked when it shares a run of two consecutive words with one of those
//!    strings (case-insensitive; pairs made only of function words such as "of the" do not count),
//!    or a single word that is neither common English nor common medical vocabulary — so
//!    "Zebulon heart failure" is blocked after a calendar event "Follow-up Zebulon Quixote", while
//!    "beta blockers in heart failure" is not. Numbers of five or more digits count as rare words
//!    (a record number seen in a PHI result may not leave either). The set is capped
//!    (`MAX_TAINT_ENTRIES`); past the cap every text matches, so the session fails closed (refused
//!    as [`ToolError::TaintFull`], which tells the model to start a new session).
//!
//! Vocabulary: `common_words.txt` (the 20,000 most frequent English words, from wordfreq) and
//! `medical_words.txt` (drug classes, drugs, diseases, anatomy, tests, research terms).

use std::borrow::Cow;
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
/// A month's name exactly, in full or abbreviated, English or German: a looser name would read
/// into words, into dates without spaces ("03-Mar-1961", "12MAR1961") and into a number, a word
/// and a year ("SOFA 2 sepsis 2016", "CKD 4 decompensated 2019").
const MONTH_WORD: &str = r"(?:jan(?:uary|uar)?|feb(?:ruary|ruar)?|mar(?:ch)?|märz|apr(?:il)?|may|mai|jun[ei]?|jul[yi]?|aug(?:ust)?|sep(?:t(?:ember)?)?|o[ck]t(?:ober)?|nov(?:ember)?|de[cz](?:ember)?)";
/// Months written in full, for a two-digit year after spaces ("3 March 61"). Not "may"/"mai",
/// a verb too, nor abbreviations ("OCT", "MAR" are also a scan and a drug chart).
const MONTH_FULL: &str = r"(?:january|januar|february|februar|march|märz|april|june|juni|july|juli|august|september|october|oktober|november|december|dezember)";

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
    // A date with spaces only with two-digit day and month and a four-digit year ("04 03 1961",
    // "1961 03 04"): "APGAR 8 9 10" and "phase 2 3 2020" are not dates. In this century one of
    // day and month must start with 0 ("04 10 2021"): "AUDIT-C 10 12 2019" and "ASCVD 10 20 2018"
    // are cut-offs and a guideline's year.
    let spaced_date = {
        let (day, month) = ("(?:0[1-9]|[12][0-9]|3[01])", "(?:0[1-9]|1[0-2])");
        format!(
            r"\b(?:{day} {month}|{month} {day}) 19[0-9]{{2}}\b|\b(?:0[1-9] {day}|{day} 0[1-9]) 20[0-9]{{2}}\b|\b19[0-9]{{2}} {month} {day}\b|\b20[0-9]{{2}} (?:0[1-9] {day}|{month} 0[1-9])\b"
        )
    };
    let mut patterns: Vec<String> = vec![
        // Record numbers: "MRN 123456", "MRN: A-1234", "MRN12345678", "record number 98765",
        // "hospital number 1234567", "patient ID 4711", "accession number 12345678", "Patienten-ID
        // 12345678", "KVNR A123456789" (German insurance number). The value must hold digits, so
        // "medical record review" is not one; `mrn\b` and the digits keep "mRNA-1273" out.
        r"(?i)\b(?:mrn\b|mr\s?no\b\.?|(?:medical\s+)?record\s+(?:number\b|no\b\.?|\#)|(?:patient|hospital)\s+(?:id\b|number\b|no\b\.?|\#)|(?:chart|case|unit|accession)\s+(?:number\b|no\b\.?|\#)|fallnummer\b|patientennummer\b|patienten-?id\b|kvnr\b|(?:kranken)?versichertennummer\b)[\s:\#.-]{0,3}[a-z]{0,3}-?[0-9]{3,}|(?i)\bmrn[0-9]{3,}".into(),
        // US social security numbers, with or without the word. Written with spaces, three numbers
        // are also a blood pressure and a guideline's year ("BP 140 90 2017"): any last group
        // only where the text calls it one ("social security number: 123 45 6789"; "SSN" alone is
        // blocked anyway), and always only when the area is one the SSA issues (not 000, 666 or
        // 9xx) and the group is not 00.
        r"\b[0-9]{3}-[0-9]{2}-[0-9]{4}\b|\b[0-9]{3}\.[0-9]{2}\.[0-9]{4}\b|(?i)\bssn\b".into(),
        r"(?i)\b(?:social\s+security|soc\.?\s*sec)\b\D{0,24}\b(?:00[1-9]|0[1-9][0-9]|[1-578][0-9]{2}|6[0-57-9][0-9]|66[0-57-9]) (?:0[1-9]|[1-9][0-9]) [0-9]{4}\b".into(),
        // Without the word, written with spaces: [`numbers::spaced_ssn`]. UK NHS numbers with the
        // word ("NHS no 485 777 2019"); without it, as 3-3-4 phone numbers.
        r"(?i)\bnhs\s*(?:number|no\.?|\#)?[\s:]*[0-9]{3}\s?[0-9]{3}\s?[0-9]{4}\b".into(),
        // Phone numbers: North American 3-3-4 ([`numbers::north_american_phone`]), international
        // "+49 30 1234567" and "0049 30 12345678" (after no digit or decimal point: "p 0.001 2020" is
        // no number), national trunk prefix "0171 1234567" (area code also in brackets, "(030)
        // 12345678"), French pairs "06 12 34 56 78", and any bare run of 9+ digits (PMIDs have at
        // most 8).
        r"\+[0-9]{1,3}[\s.-]?\(?[0-9]{1,4}\)?(?:[\s.-]?[0-9]{2,4}){2,4}\b".into(),
        r"(?:^|[^0-9.,])00[1-9][0-9]{0,2}[\s.-]\(?[0-9]{1,5}\)?[\s/.-]?[0-9]{2,8}(?:[\s.-][0-9]{2,8}){0,3}\b".into(),
        r"\b0[1-9](?:[\s.][0-9]{2}){4}\b".into(),
        r"(?:\(0[0-9]{2,4}\)\s?|\b0[0-9]{2,4}[\s/-]?)[0-9]{5,8}\b".into(),
        // The same in groups, as UK and German numbers are written: "020 7946 0958", "(030) 1234
        // 5678", "030/1234 5678", and in pairs after a group of three: "0171 123 45 67". The
        // leading 0 and area code keep doses, lab values and years out ("5 10 mg 2019").
        r"(?:\(0[0-9]{2,4}\)\s?|\b0[0-9]{2,4}(?:[\s-]|/\s?))(?:[0-9]{3,4}[\s-][0-9]{3,4}|[0-9]{2,4}(?:[\s-][0-9]{2}){2,3})\b".into(),
        r"\b[0-9]{9,}\b".into(),
        // E-mail addresses.
        r"(?i)\b[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]{2,}\b".into(),
        // Dates with a month name: "12 March 1961", "12. März 1961", "12th of March 1961", "March
        // 12, 1961".
        format!(r"(?i)\b{DAY}(?:st|nd|rd|th|\.)?\s+(?:of\s+)?{MONTH_WORD}\.?,?\s+[0-9]{{4}}\b"),
        format!(r"(?i)\b{MONTH_WORD}\.?\s+{DAY}(?:st|nd|rd|th)?,?\s+[0-9]{{4}}\b"),
        // As records write them: "03-Mar-1961", "12MAR1961", "3/Mar/61", "Mar-04-1961", and with a
        // two-digit year when the month is written in full: "3 March 61", "12th of March '61".
        format!(r"(?i)\b{DAY}[./-]?{MONTH_WORD}\.?[./-]?(?:[0-9]{{4}}|[0-9]{{2}})\b"),
        format!(r"(?i)\b{MONTH_WORD}[./-]{DAY}[./-][0-9]{{4}}\b"),
        format!(r"(?i)\b{DAY}(?:st|nd|rd|th|\.)?\s+(?:of\s+)?{MONTH_FULL},?\s+'?[0-9]{{2}}\b"),
        // Birth-date phrases ("infants born to mothers with diabetes" is fine: a day must follow).
        format!(r"(?i)\b(?:dob|d\.o\.b|date\s+of\s+birth|birth\s?date|geburtsdatum|geb\.)|\bborn\s+(?:on\s+)?(?:[0-9]{{1,2}}\b|{MONTH_WORD}\.?\s+[0-9])"),
        // Street addresses: a house number, a street name and a street word. Unambiguous street
        // words in any case; short or ambiguous ones ("Way", "Dr", "Place") only after a
        // capitalised name, so "2 stents in place" is not an address.
        r"(?i)\b[0-9]{1,5}[a-z]?\s+(?:[a-z]+\s+){1,3}(?:street|avenue|boulevard|road|lane)\b".into(),
        r"\b[0-9]{1,5}[A-Za-z]?\s+(?:[A-Z][a-z]+\s+){1,3}(?:St|Ave|Rd|Ln|Dr|Drive|Blvd|Way|Court|Ct|Place|Pl|Terrace|Close|Crescent)\b".into(),
        r"(?i)\b[a-zäöüß]+(?:straße|strasse|str\.|weg|gasse|allee|platz)\s+[0-9]{1,4}[a-z]?\b".into(),
    ];
    patterns.extend(numeric_dates);
    patterns.push(spaced_date);
    patterns
}

/// The most words and pairs one session's taint holds (some 15 MB; a 32 KiB file result adds
/// about 5,000). Past it the session fails closed: see [`TaintSet::matches`].
pub(crate) const MAX_TAINT_ENTRIES: usize = 200_000;

/// Every word a PHI tool returned in this session, and the consecutive pairs among them.
#[derive(Debug, Default, Clone)]
pub struct TaintSet {
    /// Words that identify on their own (not common English or medical vocabulary).
    rare_words: HashSet<String>,
    /// Consecutive word pairs, `"a b"`, from each PHI string.
    pairs: HashSet<String>,
    /// More than [`MAX_TAINT_ENTRIES`] were added: every text matches from then on.
    full: bool,
}

impl TaintSet {
    /// Taint everything inside a PHI tool's result: every string and number (a case number may
    /// come as a JSON number), and every object key (a result may be keyed by patient name).
    pub fn add_result(&mut self, result: &Value) {
        each_text(result, &mut |text, is_key| if is_key { self.add_key(&text) } else { self.add_text(&text) });
    }

    pub fn add_text(&mut self, text: &str) {
        self.add_words(text, true);
    }

    /// A key that reads as text ("Zebulon Quixote", "John Smith") taints as text. A schema-like
    /// key ("heart_rate", "date_of_birth") is the result's shape, not patient data: only its rare
    /// words taint ("mrn_4471123"), not its pairs, or every later query about heart rate would be
    /// blocked after one vital-signs result.
    fn add_key(&mut self, key: &str) {
        self.add_words(key, key.chars().any(char::is_whitespace));
    }

    fn add_words(&mut self, text: &str, with_pairs: bool) {
        if self.full {
            return;
        }
        let words = words(text);
        for word in &words {
            if is_rare(word) {
                self.rare_words.insert(word.clone());
            }
        }
        if with_pairs {
            for pair in words.windows(2) {
                if counts_as_pair(&pair[0], &pair[1]) {
                    self.pairs.insert(format!("{} {}", pair[0], pair[1]));
                }
            }
        }
        if self.len() > MAX_TAINT_ENTRIES {
            self.fill();
        }
    }

    /// Past the cap nothing is forgotten: the session fails closed instead (every text matches,
    /// so no third-party call leaves), and the words themselves are no longer needed.
    fn fill(&mut self) {
        // The cap only: the words are patient data.
        tracing::warn!(
            max_entries = MAX_TAINT_ENTRIES,
            "session taint is full: third-party tools are refused (phi_blocked) for the rest of this session"
        );
        self.full = true;
        self.rare_words = HashSet::new();
        self.pairs = HashSet::new();
    }

    /// How many words and pairs are held.
    pub(crate) fn len(&self) -> usize {
        self.rare_words.len() + self.pairs.len()
    }

    pub fn is_empty(&self) -> bool {
        !self.full && self.rare_words.is_empty() && self.pairs.is_empty()
    }

    /// Does `text` share a rare word or a run of two words with anything tainted? Always, once the
    /// taint is full.
    pub fn matches(&self, text: &str) -> bool {
        if self.full {
            return true;
        }
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
    IDENTIFIER_PATTERNS.iter().any(|pattern| pattern.is_match(text))
        || numbers::north_american_phone(text)
        || numbers::spaced_ssn(text)
        || names::named_patient(text)
        || names::titled_name(text)
}

/// Screen what a third-party call would send. `Err(PhiBlocked)` or `Err(TaintFull)` means the
/// call must not leave.
pub fn screen_call(tool: &dyn Tool, args: &Value, taint: &TaintSet) -> Result<(), ToolError> {
    screen_value(None, args, taint)?;
    tool.outbound_text(args).map_or(Ok(()), |built| screen_text(&built, taint))
}

/// Screen every text of `value` (its strings, keys and numbers, at any depth); `key` is the key it
/// is the value of. An integer is screened with its key ("mrn 48213377" is a record number where
/// 48213377 alone reads as a PubMed id) and, like a string, a bare run of nine or more digits reads
/// as a phone number: a timestamp in seconds is blocked too, so a third-party tool should take
/// its dates as text. A fraction is no identifier: it is checked against the taint only
/// (0.30000000000000004 is not a phone number).
fn screen_value(key: Option<&str>, value: &Value, taint: &TaintSet) -> Result<(), ToolError> {
    match value {
        Value::String(text) => screen_text(text, taint),
        Value::Number(n) => {
            let digits = n.to_string();
            let fraction = n.is_f64() && n.as_f64().is_some_and(|f| f.fract() != 0.0);
            match (fraction, key) {
                (true, _) if taint.matches(&digits) => Err(refusal(taint)),
                (true, _) => Ok(()),
                (false, Some(key)) => screen_text(&format!("{key} {digits}"), taint),
                (false, None) => screen_text(&digits, taint),
            }
        }
        Value::Array(items) => items.iter().try_for_each(|item| screen_value(key, item, taint)),
        Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            screen_text(key, taint)?;
            screen_value(Some(key), item, taint)
        }),
        Value::Bool(_) | Value::Null => Ok(()),
    }
}

pub fn screen_text(text: &str, taint: &TaintSet) -> Result<(), ToolError> {
    if has_identifier(text) || taint.matches(text) { Err(refusal(taint)) } else { Ok(()) }
}

/// Why a screened text is refused. Once the taint is full every text is, whatever its words, and
/// the model is told so ([`ToolError::TaintFull`]) rather than to ask again without names.
fn refusal(taint: &TaintSet) -> ToolError {
    if taint.full { ToolError::TaintFull } else { ToolError::PhiBlocked }
}

/// Every text in a call's arguments, in order: string values, numbers as their decimal text (a
/// phone or record number sent as a JSON number leaves just as a string would) and object keys,
/// each key right before its value, at any depth.
pub(crate) fn collect_strings<'a>(value: &'a Value, out: &mut Vec<Cow<'a, str>>) {
    each_text(value, &mut |text, _| out.push(text));
}

/// Calls `f` with every text of `value` in order, depth first: each object key (`true`) right
/// before its value, string values, and numbers as their decimal text.
fn each_text<'a>(value: &'a Value, f: &mut impl FnMut(Cow<'a, str>, bool)) {
    match value {
        Value::String(s) => f(Cow::Borrowed(s), false),
        Value::Number(n) => f(Cow::Owned(n.to_string()), false),
        Value::Array(items) => items.iter().for_each(|v| each_text(v, f)),
        Value::Object(map) => map.iter().for_each(|(key, v)| {
            f(Cow::Borrowed(key), true);
            each_text(v, f);
        }),
        Value::Bool(_) | Value::Null => {}
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

mod names;
mod numbers;

#[cfg(test)]
mod tests;
