//! The guideline corpus: JSON Lines, one guideline per line with the seed's `MedicalGuideline`
//! fields (`id`, `title`, `source`, `condition`, `summary`, `url`, `publication_date`,
//! `last_updated`), the searched body `text`, and optionally `recommendations` and
//! `evidence_level`.
//!
//! The shipped corpus is compiled into the binary so the default works from any working
//! directory; an operator's corpus (`backends.guidelines.corpus_path`) is read and checked the same
//! way. Every problem names the file, the line and the field, so a bad record refuses start with a
//! message the operator can act on. The corpus holds published guidance, never patient data, so
//! naming its values in an error is safe.

use std::collections::HashMap;
use std::path::Path;

use chrono::NaiveDate;
use serde::Deserialize;

/// The corpus shipped in `data/guidelines/`.
const SHIPPED: &str = include_str!("../../../data/guidelines/guidelines.jsonl");
/// How the shipped corpus is named in errors (it is checked by the tests, so this never shows).
const SHIPPED_ORIGIN: &str = "data/guidelines/guidelines.jsonl (shipped)";

/// Bounds that keep one record a reasonable size for the index and the result.
const MAX_ID_CHARS: usize = 100;
const MAX_SHORT_CHARS: usize = 300;
const MAX_SUMMARY_CHARS: usize = 4_000;
const MAX_TEXT_CHARS: usize = 200_000;
const MAX_RECOMMENDATIONS: usize = 30;
const MAX_RECOMMENDATION_CHARS: usize = 2_000;
/// A corpus file larger than this is refused before it is read.
const MAX_CORPUS_BYTES: u64 = 64 * 1024 * 1024;

/// One guideline as a corpus line holds it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Guideline {
    pub id: String,
    pub title: String,
    /// The publishing organisation, e.g. "USPSTF", "CDC", "NIH/NHLBI".
    pub source: String,
    pub condition: String,
    pub summary: String,
    pub url: String,
    pub publication_date: String,
    pub last_updated: String,
    /// The searched body: what the guideline says, in more detail than the summary.
    pub text: String,
    /// The guideline's key statements, returned with the result.
    #[serde(default)]
    pub recommendations: Vec<String>,
    /// The grade or strength the publisher gives, e.g. "USPSTF grade B".
    #[serde(default)]
    pub evidence_level: Option<String>,
}

/// Why a corpus was refused. Messages name the file, line and field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CorpusError {
    #[error("cannot read {origin}: {reason}")]
    Unreadable { origin: String, reason: String },
    #[error("{origin} line {line}: field `{field}`: {reason}")]
    BadField { origin: String, line: usize, field: String, reason: String },
    #[error("{origin} line {line}: {reason}")]
    BadLine { origin: String, line: usize, reason: String },
    #[error("{origin}: no guidelines (the file has no records)")]
    Empty { origin: String },
}

/// The shipped corpus.
pub(crate) fn shipped() -> Result<Vec<Guideline>, CorpusError> {
    parse(SHIPPED, SHIPPED_ORIGIN)
}

/// An operator's corpus file.
pub(crate) fn from_file(path: &Path) -> Result<Vec<Guideline>, CorpusError> {
    let origin = path.display().to_string();
    let unreadable = |reason: String| CorpusError::Unreadable { origin: origin.clone(), reason };
    let size = std::fs::metadata(path).map_err(|e| unreadable(e.to_string()))?.len();
    if size > MAX_CORPUS_BYTES {
        return Err(unreadable(format!("larger than {} MiB", MAX_CORPUS_BYTES / (1024 * 1024))));
    }
    let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
    parse(&text, &origin)
}

/// Parse and check every line; blank lines are skipped. `origin` names the corpus in errors.
pub(crate) fn parse(text: &str, origin: &str) -> Result<Vec<Guideline>, CorpusError> {
    let mut guidelines = Vec::new();
    let mut first_line_of: HashMap<String, usize> = HashMap::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        if raw.trim().is_empty() {
            continue;
        }
        let field_error = |field: &str, reason: String| CorpusError::BadField {
            origin: origin.to_string(),
            line,
            field: field.to_string(),
            reason,
        };
        let mut json = serde_json::Deserializer::from_str(raw);
        let guideline: Guideline = serde_path_to_error::deserialize(&mut json).map_err(|err| {
            let path = err.path().to_string();
            let reason = err.into_inner().to_string();
            // serde names a missing or unknown field in its message; the path names a wrong type.
            match path.as_str() {
                "." => CorpusError::BadLine { origin: origin.to_string(), line, reason },
                field => field_error(field, reason),
            }
        })?;
        check(&guideline).map_err(|(field, reason)| field_error(field, reason))?;
        if let Some(first) = first_line_of.insert(guideline.id.clone(), line) {
            return Err(field_error("id", format!("`{}` is already used on line {first}", guideline.id)));
        }
        guidelines.push(guideline);
    }
    if guidelines.is_empty() {
        return Err(CorpusError::Empty { origin: origin.to_string() });
    }
    Ok(guidelines)
}

/// The field that is wrong and why.
fn check(g: &Guideline) -> Result<(), (&'static str, String)> {
    let id_ok = g.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if g.id.is_empty() || g.id.len() > MAX_ID_CHARS || !id_ok {
        return Err(("id", format!("must be 1–{MAX_ID_CHARS} letters, digits, '-', '_' or '.'")));
    }
    for (field, value, max) in [
        ("title", &g.title, MAX_SHORT_CHARS),
        ("source", &g.source, MAX_SHORT_CHARS),
        ("condition", &g.condition, MAX_SHORT_CHARS),
        ("summary", &g.summary, MAX_SUMMARY_CHARS),
        ("text", &g.text, MAX_TEXT_CHARS),
    ] {
        text_field(value, max).map_err(|reason| (field, reason))?;
    }
    let url = url::Url::parse(&g.url).map_err(|e| ("url", format!("not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(("url", "must be an http(s) URL".into()));
    }
    let published = date(&g.publication_date).map_err(|reason| ("publication_date", reason))?;
    let updated = date(&g.last_updated).map_err(|reason| ("last_updated", reason))?;
    if updated < published {
        return Err(("last_updated", "is earlier than publication_date".into()));
    }
    if g.recommendations.len() > MAX_RECOMMENDATIONS {
        return Err(("recommendations", format!("at most {MAX_RECOMMENDATIONS} entries")));
    }
    for recommendation in &g.recommendations {
        text_field(recommendation, MAX_RECOMMENDATION_CHARS).map_err(|reason| ("recommendations", reason))?;
    }
    if let Some(level) = &g.evidence_level {
        text_field(level, MAX_SHORT_CHARS).map_err(|reason| ("evidence_level", reason))?;
    }
    Ok(())
}

fn text_field(value: &str, max: usize) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err("must not be empty".into());
    }
    if value.chars().count() > max {
        return Err(format!("longer than {max} characters"));
    }
    Ok(())
}

/// Dates are ISO `YYYY-MM-DD`, as the result model shows them.
fn date(value: &str) -> Result<NaiveDate, String> {
    NaiveDate::parse_from_str(value, "%Y-%m-%d").map_err(|_| "must be a date written YYYY-MM-DD".to_string())
}
