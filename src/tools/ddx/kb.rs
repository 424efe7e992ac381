//! The differential-diagnosis knowledge base: a vocabulary of findings (each with the phrases that
//! name it) and conditions that weigh those findings, with age/sex priors, must-not-miss flags, first
//! workup and a public-domain source.
//!
//! The base shipped in `data/ddx/knowledge_base.json` is compiled into the binary, so the tool works
//! from any directory; `backends.ddx.knowledge_base_path` replaces it with an operator's own file in
//! the same format. Either is checked completely at start, and an error names the record.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

/// The shipped base (see `data/ddx/SOURCES.md`).
const EMBEDDED: &str = include_str!("../../../data/ddx/knowledge_base.json");
/// Largest operator file read (the shipped one is ~60 KiB).
const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;
/// Finding and risk-factor weights are small integers or halves; a larger one is a typo.
const MAX_WEIGHT: f64 = 5.0;

/// Why a knowledge base was refused; the message names the record and the field, never a path.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum KbError {
    #[error("cannot read the knowledge base file: {0}")]
    Read(String),
    #[error("the knowledge base is not valid JSON for the expected format: {0}")]
    Format(String),
    #[error("condition #{index} ({id}): {reason}")]
    Condition {
        index: usize,
        id: String,
        reason: String,
    },
    #[error("vocabulary entry {key}: {reason}")]
    Vocabulary { key: String, reason: String },
    #[error("the knowledge base has no conditions")]
    Empty,
}

/// How common a condition is in an unselected adult presenting to a hospital: the prior.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Prevalence {
    Common,
    Uncommon,
    Rare,
}

impl Prevalence {
    pub fn prior(self) -> f64 {
        match self {
            Prevalence::Common => 1.0,
            Prevalence::Uncommon => 0.5,
            Prevalence::Rare => 0.0,
        }
    }
}

/// Sex a condition is confined to (ectopic pregnancy: `F`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum Sex {
    F,
    M,
}

/// Ages (years) the condition occurs in at all, and where it is typical.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgeRange {
    pub min: u32,
    pub max: u32,
    pub typical_min: u32,
    pub typical_max: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub title: String,
    pub url: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub id: String,
    pub name: String,
    /// Other names a clinician may use (an LLM answer may name a candidate by one of these).
    pub synonyms: Vec<String>,
    pub prevalence: Prevalence,
    pub age: AgeRange,
    #[serde(default)]
    pub sex: Option<Sex>,
    /// Dangerous if missed: kept in the list, in place of lower-ranked ordinary conditions, when
    /// it scores at least 0.3 × the leader's score (`MUST_NOT_MISS_RATIO` in `mod.rs`); below that,
    /// one shared finding alone does not list it. It is flagged and named in the reasoning.
    pub must_not_miss: bool,
    /// Vocabulary key → weight: how strongly the finding points to this condition.
    pub findings: BTreeMap<String, f64>,
    /// Vocabulary key → weight, looked for in the history (and the symptoms).
    pub risk_factors: BTreeMap<String, f64>,
    pub next_steps: Vec<String>,
    pub red_flags: Vec<String>,
    pub source: Source,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeBase {
    pub version: u32,
    #[serde(default)]
    pub about: String,
    /// Finding key → the phrases (lower case) that name it, first one the display name. A phrase
    /// starting with `!` is an exception: words that contain one of the key's phrases but do not
    /// name the finding ("!collapsed lung" under syncope); they are moved to `exceptions`.
    pub vocabulary: BTreeMap<String, Vec<String>>,
    pub conditions: Vec<Condition>,
    /// Finding key → its exception phrases (normalised, without the `!`).
    #[serde(skip)]
    pub exceptions: BTreeMap<String, Vec<String>>,
}

/// Marks a vocabulary phrase as an exception (see [`KnowledgeBase::vocabulary`]).
const EXCEPTION_MARK: char = '!';

impl KnowledgeBase {
    /// The base compiled into the binary.
    pub fn embedded() -> Result<Self, KbError> {
        Self::parse(EMBEDDED)
    }

    /// An operator's base (`backends.ddx.knowledge_base_path`).
    pub fn from_file(path: &Path) -> Result<Self, KbError> {
        let meta = std::fs::metadata(path).map_err(|e| KbError::Read(e.kind().to_string()))?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(KbError::Read(format!(
                "larger than {} MiB",
                MAX_FILE_BYTES / 1024 / 1024
            )));
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| KbError::Read(e.kind().to_string()))?;
        Self::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Self, KbError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let kb: KnowledgeBase = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| KbError::Format(format!("at {}: {}", e.path(), e.inner())))?;
        kb.check()?;
        Ok(kb.normalised())
    }

    /// The display name of a finding: its first phrase.
    pub fn label(&self, key: &str) -> String {
        self.vocabulary
            .get(key)
            .and_then(|terms| terms.first())
            .map(|t| t.trim().to_string())
            .unwrap_or_else(|| key.replace('_', " "))
    }

    fn check(&self) -> Result<(), KbError> {
        if self.conditions.is_empty() {
            return Err(KbError::Empty);
        }
        for (key, terms) in &self.vocabulary {
            // Nothing left once normalised (only punctuation, "!." or "?") would match, or
            // cancel, at every space.
            let bare = |t: &String| {
                super::matcher::normalise(t.trim().trim_start_matches(EXCEPTION_MARK))
                    .trim()
                    .is_empty()
            };
            if terms.is_empty() || terms.iter().any(bare) {
                return Err(KbError::Vocabulary {
                    key: key.clone(),
                    reason: "needs at least one non-empty phrase".into(),
                });
            }
            // The first phrase is the display name, so it must name the finding.
            if terms[0].trim().starts_with(EXCEPTION_MARK) {
                return Err(KbError::Vocabulary {
                    key: key.clone(),
                    reason: "the first phrase must not be an exception (!)".into(),
                });
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, c) in self.conditions.iter().enumerate() {
            let fail = |reason: String| KbError::Condition {
                index,
                id: c.id.clone(),
                reason,
            };
            if c.id.trim().is_empty() || c.name.trim().is_empty() {
                return Err(fail("id and name must not be empty".into()));
            }
            if !seen.insert(c.id.as_str()) {
                return Err(fail("duplicate id".into()));
            }
            if c.findings.is_empty() {
                return Err(fail("findings must not be empty".into()));
            }
            for (field, map) in [("findings", &c.findings), ("risk_factors", &c.risk_factors)] {
                for (key, weight) in map {
                    if !self.vocabulary.contains_key(key) {
                        return Err(fail(format!("{field}: {key} is not in the vocabulary")));
                    }
                    if !(weight.is_finite() && *weight > 0.0 && *weight <= MAX_WEIGHT) {
                        return Err(fail(format!(
                            "{field}: weight of {key} must be in (0, {MAX_WEIGHT}]"
                        )));
                    }
                }
            }
            let a = &c.age;
            if !(a.min <= a.typical_min && a.typical_min <= a.typical_max && a.typical_max <= a.max)
            {
                return Err(fail(
                    "age: needs min <= typical_min <= typical_max <= max".into(),
                ));
            }
            if c.next_steps.is_empty() {
                return Err(fail("next_steps must not be empty".into()));
            }
            let url_ok = url::Url::parse(&c.source.url).is_ok_and(|u| u.scheme() == "https");
            if !url_ok || c.source.title.trim().is_empty() {
                return Err(fail("source needs a title and an https url".into()));
            }
        }
        Ok(())
    }

    /// Phrases in lower case, so matching compares like with like; exceptions set apart.
    fn normalised(mut self) -> Self {
        for (key, terms) in self.vocabulary.iter_mut() {
            let (exceptions, phrases): (Vec<String>, Vec<String>) = terms
                .drain(..)
                .partition(|t| t.trim().starts_with(EXCEPTION_MARK));
            *terms = phrases
                .iter()
                .map(|t| super::matcher::normalise(t))
                .collect();
            if !exceptions.is_empty() {
                let exceptions = exceptions
                    .iter()
                    .map(|t| super::matcher::normalise(t.trim().trim_start_matches(EXCEPTION_MARK)))
                    .collect();
                self.exceptions.insert(key.clone(), exceptions);
            }
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_base_loads_and_is_broad() {
        let kb = KnowledgeBase::embedded().unwrap();
        assert!(kb.conditions.len() >= 40, "{}", kb.conditions.len());
        assert!(kb.conditions.iter().filter(|c| c.must_not_miss).count() >= 15);
        for complaint in [
            "chest_pain",
            "dyspnea",
            "abdominal_pain",
            "headache",
            "fever",
            "syncope",
        ] {
            let n = kb
                .conditions
                .iter()
                .filter(|c| c.findings.contains_key(complaint))
                .count();
            assert!(n >= 4, "{complaint}: only {n} conditions");
        }
    }

    /// One phrase under two findings that the same condition weighs would count twice ("hiv" was
    /// both a tuberculosis exposure and immunosuppression).
    #[test]
    fn no_condition_counts_one_phrase_twice() {
        let kb = KnowledgeBase::embedded().unwrap();
        for c in &kb.conditions {
            let keys: Vec<&String> = c.findings.keys().chain(c.risk_factors.keys()).collect();
            for (i, a) in keys.iter().enumerate() {
                for b in &keys[i + 1..] {
                    for term in &kb.vocabulary[*a] {
                        assert!(
                            a == b || !kb.vocabulary[*b].contains(term),
                            "{}: {term:?} is under both {a} and {b}",
                            c.id
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_bad_record_is_named() {
        let mut value: serde_json::Value = serde_json::from_str(EMBEDDED).unwrap();
        value["conditions"][3]["findings"]["no_such_finding"] = 1.into();
        let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "condition #3 (pulmonary_embolism): findings: no_such_finding is not in the vocabulary"
        );

        let mut value: serde_json::Value = serde_json::from_str(EMBEDDED).unwrap();
        value["conditions"][1]["source"]["url"] = "ftp://example.org".into();
        let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("condition #1 (stable_angina): source"),
            "{err}"
        );

        let mut value: serde_json::Value = serde_json::from_str(EMBEDDED).unwrap();
        value["conditions"][2]["prevalence"] = "often".into();
        let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
        assert!(
            err.to_string().contains("conditions[2].prevalence"),
            "{err}"
        );
    }

    #[test]
    fn exception_phrases_are_set_apart_and_cannot_be_the_display_name() {
        let kb = KnowledgeBase::embedded().unwrap();
        assert!(kb.exceptions["syncope"].contains(&" collapsed lung ".to_string()));
        assert!(kb.vocabulary.values().flatten().all(|t| !t.contains('!')));

        let mut value: serde_json::Value = serde_json::from_str(EMBEDDED).unwrap();
        value["vocabulary"]["syncope"] = serde_json::json!(["!collapsed lung", "syncope"]);
        let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("vocabulary entry syncope: the first"),
            "{err}"
        );
        value["vocabulary"]["syncope"] = serde_json::json!(["syncope", " ! "]);
        let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
        assert!(err.to_string().contains("non-empty phrase"), "{err}");
        // Only punctuation is nothing once normalised: it would match (or cancel) at every space.
        for phrase in ["!.", "?", " ,; "] {
            value["vocabulary"]["syncope"] = serde_json::json!(["syncope", phrase]);
            let err = KnowledgeBase::parse(&value.to_string()).unwrap_err();
            assert!(err.to_string().contains("non-empty phrase"), "{phrase:?}: {err}");
        }
    }

    #[test]
    fn a_missing_file_is_a_read_error_without_the_path() {
        let err = KnowledgeBase::from_file(Path::new("/nonexistent/kb.json")).unwrap_err();
        assert!(matches!(err, KbError::Read(_)));
        assert!(!err.to_string().contains("nonexistent"));
    }
}
