//! `search_pubmed`: literature search in PubMed through NCBI E-utilities — `esearch` finds the
//! PMIDs (best match first), `efetch` returns their records; both answer in XML, and the result is the seed's
//! article list with citations.
//!
//! This is a third-party tool: NCBI is outside the hospital, so the session screens every string
//! argument for PHI before [`Tool::call`] runs (see `policy::screening`). The
//! query is never logged here either. The HTTP details (shared rate limit, retries, trace context)
//! live in [`client`], the XML reading in [`parse`].

pub(crate) mod client;
mod parse;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use self::client::Eutils;
use self::parse::Article;
use super::registry::RegistryError;
use super::{args, CallContext, Category, Citation, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec};
use super::text::{search_output, truncate};
use crate::config::PubmedBackendConfig;

/// Most articles one call returns: 10 abstracts of ≤ 1,200 characters keep the output well under
/// the 32 KiB a `function_call_output` may take (and `text::search_output` drops the last ones if
/// an answer's other fields still do not fit).
const MAX_RESULTS: u64 = 10;
/// The seed's default (`max_results: Optional[int] = 10`).
const DEFAULT_RESULTS: u64 = 10;
/// Abstracts are cut to this many characters (the model summarises; the link has the rest).
const ABSTRACT_CHARS: usize = 1200;
/// Authors listed in full up to this bound; longer lists end with "et al." (consortium papers list
/// hundreds, which would crowd out the abstracts within the 32 KiB output budget).
const AUTHORS_SHOWN: usize = 20;
/// Titles, journal names and each author are cut to these many characters: real ones are far
/// shorter, but nothing in the answer bounds them.
const TITLE_CHARS: usize = 400;
const JOURNAL_CHARS: usize = 200;
const AUTHOR_CHARS: usize = 100;
/// A longer DOI is left out: a cut one would name another document.
const DOI_CHARS: usize = 200;
const MAX_QUERY_CHARS: u64 = 300;

/// Publication types the model may filter on (PubMed's `[pt]` field values).
const PUBLICATION_TYPES: &[&str] = &[
    "Clinical Trial",
    "Randomized Controlled Trial",
    "Meta-Analysis",
    "Systematic Review",
    "Review",
    "Guideline",
    "Practice Guideline",
    "Observational Study",
    "Case Reports",
    "Comparative Study",
    "Multicenter Study",
];

/// Shown to the user when NCBI cannot be reached or answers with an error: no URL, key or body.
const UNAVAILABLE: &str = "PubMed is unavailable right now; try again in a moment.";
const UNREADABLE: &str = "PubMed is unavailable: its answer could not be read.";

/// The `search_pubmed` tool. One instance serves every session, so its rate limit is NCBI's
/// per-client limit for the whole process.
#[derive(Debug)]
pub struct SearchPubmed {
    spec: ToolSpec,
    eutils: Eutils,
}

/// The tool for `config`: fails only on a malformed base URL or an HTTP client that cannot be built.
pub fn tool(config: &PubmedBackendConfig) -> Result<SearchPubmed, RegistryError> {
    SearchPubmed::new(config).map_err(|reason| RegistryError::Backend { family: "pubmed", reason })
}

impl SearchPubmed {
    pub fn new(config: &PubmedBackendConfig) -> Result<Self, String> {
        let mut identity: Vec<(&'static str, String)> = Vec::new();
        if !config.tool.trim().is_empty() {
            identity.push(("tool", config.tool.trim().to_string()));
        }
        if let Some(email) = config.email.as_deref().map(str::trim).filter(|e| !e.is_empty()) {
            identity.push(("email", email.to_string()));
        }
        let key = config.api_key.as_ref().map(|k| k.expose().trim()).filter(|k| !k.is_empty());
        if let Some(key) = key {
            identity.push(("api_key", key.to_string()));
        }
        // NCBI: 3 requests/s per client, 10 with an API key.
        let rate = config.requests_per_second.unwrap_or(if key.is_some() { 10 } else { 3 });
        let eutils = Eutils::new(&config.base_url, identity, rate)?;
        let spec = ToolSpec {
            name: "search_pubmed",
            description: "Search PubMed (NCBI) for published medical literature: returns the best-matching \
                articles with title, authors, journal, publication date, DOI and a shortened abstract. Use for \
                evidence questions (trials, reviews, guidelines). The query leaves the hospital: never put \
                patient names, dates of birth, record numbers or other identifying details in it."
                .into(),
            parameters: parameters(),
            category: Category::Medical,
            phi: false,
            risk: Risk::Low,
            requires_confirmation: false,
            third_party: true,
            rate_limit_per_minute: 30,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Ok(Self { spec, eutils })
    }
}

fn parameters() -> Value {
    let date = json!({
        "type": "string",
        "pattern": "^[0-9]{4}(/[0-9]{2}(/[0-9]{2})?)?$",
        "maxLength": 10,
    });
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "PubMed search terms, e.g. \"SGLT2 inhibitors heart failure\". PubMed syntax \
                    (AND, OR, [tiab], [mh]) is allowed. No patient-identifying details.",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "default": DEFAULT_RESULTS,
                "description": "How many articles to return (best match first).",
            },
            "publication_types": {
                "type": "array",
                "items": {"type": "string", "enum": PUBLICATION_TYPES},
                "maxItems": PUBLICATION_TYPES.len(),
                "uniqueItems": true,
                "description": "Only articles of these publication types.",
            },
            "date_from": merge(&date, "Earliest publication date, YYYY or YYYY/MM (a full day is refused: it could be a birth date)."),
            "date_to": merge(&date, "Latest publication date, YYYY or YYYY/MM (a full day is refused: it could be a birth date)."),
        },
        "required": ["query"],
        "additionalProperties": false,
    })
}

fn merge(base: &Value, description: &str) -> Value {
    let mut value = base.clone();
    if let Some(map) = value.as_object_mut() {
        map.insert("description".into(), json!(description));
    }
    value
}

/// Validated arguments, as the call uses them.
struct Query {
    text: String,
    max_results: u64,
    publication_types: Vec<String>,
    date_from: Option<String>,
    date_to: Option<String>,
}

impl Query {
    fn from_args(args: &Value) -> Result<Self, ToolError> {
        let text = args::required_text(args, "query")?;
        let max_results = args::count(args, "max_results", DEFAULT_RESULTS, MAX_RESULTS);
        let publication_types = args
            .get("publication_types")
            .and_then(Value::as_array)
            .map(|types| {
                types
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|t| PUBLICATION_TYPES.contains(t))
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let date = |key: &str| args.get(key).and_then(Value::as_str).map(String::from);
        Ok(Self { text, max_results, publication_types, date_from: date("date_from"), date_to: date("date_to") })
    }

    /// The esearch `term`: the query, narrowed to the publication types if any.
    fn term(&self) -> String {
        if self.publication_types.is_empty() {
            return self.text.clone();
        }
        let types: Vec<String> = self.publication_types.iter().map(|t| format!("\"{t}\"[pt]")).collect();
        format!("({}) AND ({})", self.text, types.join(" OR "))
    }

    fn esearch_params(&self) -> Vec<(&'static str, String)> {
        let mut params = vec![
            ("db", "pubmed".to_string()),
            ("term", self.term()),
            ("retmax", self.max_results.to_string()),
            ("retmode", "xml".to_string()),
            ("sort", "relevance".to_string()),
        ];
        // E-utilities needs both ends of a date range; an open end gets a far bound.
        if self.date_from.is_some() || self.date_to.is_some() {
            params.push(("datetype", "pdat".into()));
            params.push(("mindate", self.date_from.clone().unwrap_or_else(|| "1800".into())));
            params.push(("maxdate", self.date_to.clone().unwrap_or_else(|| "3000".into())));
        }
        params
    }
}

#[async_trait::async_trait]
impl Tool for SearchPubmed {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let query = Query::from_args(&args)?;
        let body = self.eutils.get("esearch.fcgi", &query.esearch_params()).await.map_err(|_| unavailable())?;
        let hits = parse::search_hits(&body).map_err(|err| {
            tracing::warn!(error = %err, "PubMed esearch answer rejected");
            ToolError::Backend(UNREADABLE.into())
        })?;
        let mut pmids = hits.pmids;
        pmids.truncate(query.max_results as usize);
        if pmids.is_empty() {
            return Ok(output(&query.text, hits.total, Vec::new()));
        }
        let params = [
            ("db", "pubmed".to_string()),
            ("id", pmids.join(",")),
            ("retmode", "xml".into()),
            ("rettype", "abstract".into()),
        ];
        let xml = self.eutils.get("efetch.fcgi", &params).await.map_err(|_| unavailable())?;
        let mut articles = parse::articles(&xml).map_err(|err| {
            tracing::warn!(error = %err, "PubMed efetch answer rejected");
            ToolError::Backend(UNREADABLE.into())
        })?;
        // Only the articles asked for, once each, in esearch's order (relevance: what the model
        // should see); efetch promises neither that order nor that it sends nothing else.
        articles.retain(|a| pmids.contains(&a.pmid));
        articles.sort_by_key(|a| pmids.iter().position(|p| *p == a.pmid));
        articles.dedup_by(|a, b| a.pmid == b.pmid);
        tracing::debug!(found = hits.total, returned = articles.len(), "PubMed search done");
        Ok(output(&query.text, hits.total, articles))
    }
}

fn unavailable() -> ToolError {
    ToolError::Backend(UNAVAILABLE.into())
}

/// The seed's result object plus citations for the client, cut to fit one `function_call_output`
/// (the last articles dropped, `truncated: true`, when the cut fields are still too long).
fn output(query: &str, total_found: u64, articles: Vec<Article>) -> ToolOutput {
    let citations = articles.iter().map(citation).collect();
    let list: Vec<Value> = articles.iter().map(article_json).collect();
    search_output("articles", list, citations, total_found, query)
}

fn article_url(pmid: &str) -> String {
    format!("https://pubmed.ncbi.nlm.nih.gov/{pmid}/")
}

fn article_json(article: &Article) -> Value {
    let mut truncated = false;
    let mut cut = |text: &str, max: usize| {
        let (text, was_cut) = truncate(text, max);
        truncated |= was_cut;
        text
    };
    let mut authors: Vec<String> =
        article.authors.iter().take(AUTHORS_SHOWN).map(|a| cut(a, AUTHOR_CHARS)).collect();
    if article.authors.len() > AUTHORS_SHOWN {
        authors.push("et al.".into());
    }
    let full = article.abstract_paragraphs.join(" ");
    let abstract_text = cut(&full, ABSTRACT_CHARS);
    let title = cut(&article.title, TITLE_CHARS);
    let journal = cut(&article.journal, JOURNAL_CHARS);
    let mut value = json!({
        "pmid": article.pmid,
        "title": title,
        "authors": authors,
        "journal": journal,
        "publication_date": publication_date(article),
        "doi": doi(article),
        "abstract": (!abstract_text.is_empty()).then_some(abstract_text),
        "url": article_url(&article.pmid),
    });
    if truncated
        && let Some(map) = value.as_object_mut()
    {
        map.insert("truncated".into(), json!(true));
    }
    value
}

/// The issue date as `YYYY`, `YYYY-MM` or `YYYY-MM-DD` (PubMed prints months as "Jun" or "06");
/// empty when PubMed gives no year.
fn publication_date(article: &Article) -> String {
    let year = article.year.as_deref().filter(|y| y.len() == 4 && y.bytes().all(|b| b.is_ascii_digit()));
    let Some(year) = year else { return String::new() };
    let month = article.month.as_deref().and_then(month_number);
    let day = article.day.as_deref().and_then(|d| d.parse::<u8>().ok()).filter(|d| (1..=31).contains(d));
    match (month, day) {
        (Some(m), Some(d)) => format!("{year}-{m:02}-{d:02}"),
        (Some(m), None) => format!("{year}-{m:02}"),
        _ => year.to_string(),
    }
}

fn month_number(month: &str) -> Option<u8> {
    const NAMES: [&str; 12] = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
    if let Ok(n) = month.parse::<u8>() {
        return (1..=12).contains(&n).then_some(n);
    }
    let lower = month.to_ascii_lowercase();
    NAMES.iter().position(|name| lower.starts_with(name)).map(|i| i as u8 + 1)
}

/// The DOI, unless it is too long to be one.
fn doi(article: &Article) -> Option<String> {
    article.doi.clone().filter(|d| d.len() <= DOI_CHARS)
}

fn citation(article: &Article) -> Citation {
    Citation {
        title: truncate(&article.title, TITLE_CHARS).0,
        url: article_url(&article.pmid),
        source: "PubMed".into(),
        pmid: Some(article.pmid.clone()),
        doi: doi(article),
        evidence_level: None,
        date: Some(publication_date(article)).filter(|d| !d.is_empty()),
    }
}
