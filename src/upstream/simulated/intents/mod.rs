//! What the simulated model "understands": keyword and pattern rules that turn a typed request into a
//! tool request (name + canonical arguments) or a question back to the user. There is no language
//! model here; the rules recognise the phrasings listed in docs/simulated-model.md and nothing more.
//!
//! - [`calendar`]: "what is on my calendar tomorrow", "book a meeting ... at 2pm tomorrow".
//! - [`clinical`]: BMI, Wells DVT/PE and CHA₂DS₂-VASc requests.
//! - [`files`]: finding documents ("find the diabetes protocol") and reading one ("read it").
//! - [`knowledge`]: differential diagnosis, web search and evidence requests.
//! - [`literature`]: PubMed searches.
//! - [`guidelines`]: guideline searches ("what do the guidelines say about …").
//! - [`fit`]: shaping canonical arguments to the tool schema the session actually declared.

mod calendar;
mod clinical;
pub(crate) mod files;
pub mod fit;
mod guidelines;
mod knowledge;
mod literature;

use std::sync::LazyLock;

use chrono::NaiveDate;
use regex::{Captures, Regex};
use serde_json::Value;

/// A request the rules recognised.
#[derive(Debug, Clone, PartialEq)]
pub enum Understood {
    /// Call `tool` with these canonical arguments (shaped to the real schema later by [`fit`]).
    Call { tool: &'static str, arguments: Value },
    /// Recognised, but something needed is missing: say `ask` instead of calling.
    NeedMore { tool: &'static str, ask: String },
}

impl Understood {
    #[cfg(test)]
    pub fn tool(&self) -> &'static str {
        match self {
            Understood::Call { tool, .. } | Understood::NeedMore { tool, .. } => tool,
        }
    }
}

/// Everything recognised in `text`. Requests joined by " and also " are read separately, so one
/// utterance can ask for two tools (one response, two function calls). Empty: nothing recognised.
/// `today` is the UTC date that "today"/"tomorrow" count from.
pub fn understand(text: &str, today: NaiveDate) -> Vec<Understood> {
    split_requests(text).filter_map(|part| understand_one(part, today)).collect()
}

fn understand_one(text: &str, today: NaiveDate) -> Option<Understood> {
    let lower = text.to_lowercase();
    clinical::understand(text, &lower)
        .or_else(|| knowledge::understand(text, &lower))
        .or_else(|| calendar::understand_booking(text, &lower, today))
        .or_else(|| calendar::understand_query(text, &lower, today))
        .or_else(|| files::understand_search(text, &lower))
        .or_else(|| guidelines::understand(text, &lower))
        .or_else(|| literature::understand(text, &lower))
}

fn split_requests(text: &str) -> impl Iterator<Item = &str> {
    static JOINER: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r"(?i)\s+and\s+also\s+").ok());
    let parts: Vec<&str> = match JOINER.as_ref() {
        Some(joiner) => joiner.split(text).collect(),
        None => vec![text],
    };
    parts.into_iter().map(str::trim).filter(|part| !part.is_empty())
}

/// A case-insensitive pattern compiled once. `None` only for an invalid pattern, which the tests of
/// each rule file would catch; the rule then simply never matches (no panics at runtime).
pub(crate) type Pattern = LazyLock<Option<Regex>>;

pub(crate) fn captures<'t>(pattern: &Pattern, text: &'t str) -> Option<Captures<'t>> {
    pattern.as_ref().and_then(|re| re.captures(text))
}

pub(crate) fn is_match(pattern: &Pattern, text: &str) -> bool {
    pattern.as_ref().is_some_and(|re| re.is_match(text))
}

/// A capture group as trimmed text.
pub(crate) fn group<'t>(caps: &Captures<'t>, index: usize) -> Option<&'t str> {
    caps.get(index).map(|m| m.as_str().trim()).filter(|s| !s.is_empty())
}

/// Whether any of `needles` occurs in `lower` without a negation just before it in the same
/// clause ("no cancer", "without tenderness", "denies haemoptysis").
pub(crate) fn affirmed(lower: &str, needles: &[&str]) -> bool {
    const NEGATIONS: [&str; 6] = ["no ", "not ", "without ", "denies ", "negative for ", "absent "];
    const WINDOW: usize = 24;
    needles.iter().any(|needle| {
        lower.match_indices(needle).any(|(at, _)| {
            let mut start = at.saturating_sub(WINDOW);
            while !lower.is_char_boundary(start) {
                start -= 1;
            }
            let before = &lower[start..at];
            let clause = before.rsplit([',', ';', '.']).next().unwrap_or(before);
            let clause = clause.rsplit(" and ").next().unwrap_or(clause);
            !NEGATIONS.iter().any(|negation| clause.contains(negation))
        })
    })
}

/// The topic the first of `patterns` captures (group 1) that `tidy` leaves non-empty; patterns are
/// ordered from most to least specific.
pub(crate) fn first_topic(patterns: &[Pattern], text: &str, tidy: fn(&str) -> String) -> Option<String> {
    patterns.iter().find_map(|pattern| {
        let caps = captures(pattern, text)?;
        let topic = tidy(group(&caps, 1)?);
        (!topic.is_empty()).then_some(topic)
    })
}

/// Cut `text` to at most `max` characters on a word boundary.
pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let cut: String = text.chars().take(max).collect();
    match cut.rfind(' ') {
        Some(space) if space > max / 2 => cut[..space].to_string(),
        _ => cut,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn today() -> NaiveDate {
        NaiveDate::from_ymd_opt(2026, 3, 10).expect("date")
    }

    #[test]
    fn negation_is_seen_within_the_clause_only() {
        assert!(affirmed("active cancer and tenderness", &["cancer"]));
        assert!(!affirmed("no cancer", &["cancer"]));
        assert!(!affirmed("patient without active cancer", &["cancer"]));
        assert!(affirmed("no fever, cancer present", &["cancer"]));
        assert!(affirmed("no fever and cancer", &["cancer"]));
        assert!(!affirmed("nothing here", &["cancer"]));
    }

    #[test]
    fn two_requests_joined_by_and_also_give_two_calls() {
        let found =
            understand("What is on my calendar tomorrow and also calculate the BMI for 70 kg and 175 cm", today());
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].tool(), "get_calendar_events");
        assert_eq!(found[1].tool(), "calculate_medical_score");
    }

    #[test]
    fn chit_chat_is_not_a_request() {
        assert!(understand("Hello, can you hear me?", today()).is_empty());
        assert!(understand("", today()).is_empty());
    }

    #[test]
    fn clinical_rules_win_over_search_words() {
        let found = understand("Search for the Wells DVT example", today());
        assert_eq!(
            found,
            vec![Understood::Call {
                tool: "calculate_medical_score",
                arguments: json!({"calculator_name": "wells_dvt", "parameters": clinical::wells_dvt_seed()}),
            }]
        );
    }

    #[test]
    fn clip_keeps_whole_words() {
        assert_eq!(clip("short", 10), "short");
        assert_eq!(clip("one two three four", 12), "one two");
    }
}
