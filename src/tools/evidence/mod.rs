//! `search_openevidence`: graded medical evidence from the operator's evidence service, through the
//! adapter protocol of CONTRACT §8:
//!
//! `GET {base_url}/search?q=&limit=&evidence_level=` with `Authorization: Bearer {api_key}`, answering
//! `{"results": [{title, summary, evidence_level, source, pubmed_id, url, date}], "total_count": n}`.
//!
//! OpenEvidence has no public API, so voxgate speaks this small protocol and a site-specific adapter
//! (or a compatible service) sits behind `backends.evidence.base_url`. The service is a third party:
//! every string argument is PHI-screened by the session before the call (`policy::screening`). Unset, the
//! tool is not offered.

#[cfg(test)]
mod tests;

use serde::Deserialize;
use serde_json::{Value, json};
use url::Url;

use super::registry::RegistryError;
use super::text::{MAX_URL_BYTES, truncate};
use super::{
    CallContext, Category, Citation, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput,
    ToolSpec, args, http,
};
use crate::config::{EvidenceBackendConfig, Secret};

const NAME: &str = "search_openevidence";
const DEFAULT_RESULTS: u64 = 5;
const MAX_RESULTS: u64 = 10;
const MAX_QUERY_CHARS: u64 = 300;
/// Summaries are cut to this many characters so ten results stay well under 32 KiB.
const SUMMARY_CHARS: usize = 1500;
/// The other text fields, cut like summaries (the service is a third party: nothing it sends is
/// trusted to be short).
const TITLE_CHARS: usize = 300;
const SOURCE_CHARS: usize = 200;
const PUBMED_ID_CHARS: usize = 20;
const DATE_CHARS: usize = 40;
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);
const LEVELS: [&str; 3] = ["high", "moderate", "low"];
const UNAVAILABLE: &str = "The evidence service is unavailable right now. Use search_pubmed or \
    search_medical_guidelines instead, and tell the user the evidence service could not be reached.";
const UNREADABLE: &str = "The evidence service is unavailable: its answer could not be read.";

/// One result as the adapter sends it. Every field may be missing or `null`; a result without a
/// title or URL is dropped by the caller.
#[derive(Debug, Deserialize)]
struct Evidence {
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    evidence_level: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default, deserialize_with = "id_text")]
    pubmed_id: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    date: Option<String>,
}

/// The answer; its results are read one by one ([`Evidence`]), so one result of the wrong shape
/// (a number for a title, not an object) drops that result, not the whole answer.
#[derive(Debug, Deserialize)]
struct Answer {
    results: Vec<Value>,
    #[serde(default)]
    total_count: Option<u64>,
}

/// PMIDs arrive as strings or numbers.
fn id_text<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(de)? {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// The tool: one evidence endpoint shared by every session.
pub struct SearchEvidence {
    spec: ToolSpec,
    http: reqwest::Client,
    endpoint: Url,
    api_key: Option<Secret>,
}

impl std::fmt::Debug for SearchEvidence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchEvidence")
            .field("endpoint", &self.endpoint.as_str())
            .finish()
    }
}

/// The tool when `backends.evidence.base_url` is set; `None` (not offered) otherwise.
pub fn tool(config: &EvidenceBackendConfig) -> Result<Option<SearchEvidence>, RegistryError> {
    let Some(base) = &config.base_url else {
        return Ok(None);
    };
    let backend = |reason: String| RegistryError::Backend {
        family: "evidence",
        reason,
    };
    let endpoint = http::base_url(base, "backends.evidence.base_url")
        .and_then(|b| {
            b.join("search")
                .map_err(|_| "backends.evidence.base_url cannot take a path".to_string())
        })
        .map_err(backend)?;
    let spec = ToolSpec {
        name: NAME,
        description: "Search graded medical evidence (OpenEvidence-style): answers a clinical question with \
            summaries of the best evidence, each with its evidence level (high, moderate, low), source, \
            PubMed id and link. The query leaves the hospital: never include patient-identifying details."
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
    Ok(Some(SearchEvidence {
        spec,
        http: http::client(REQUEST_TIMEOUT).map_err(backend)?,
        endpoint,
        api_key: config.api_key.clone(),
    }))
}

fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                "description": "The clinical question, e.g. \"beta blockers in heart failure\". No patient details.",
            },
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": DEFAULT_RESULTS},
            "evidence_level": {"type": "string", "enum": LEVELS, "description": "Only evidence of this level."},
        },
        "required": ["query"],
        "additionalProperties": false,
    })
}

/// `"High"`, `"moderate "` → the protocol's lower-case level; anything else is shown as given.
fn level(raw: Option<&str>) -> String {
    let raw = raw.map(str::trim).unwrap_or_default();
    let lower = raw.to_ascii_lowercase();
    if LEVELS.contains(&lower.as_str()) {
        lower
    } else if raw.is_empty() {
        "unknown".into()
    } else {
        raw.chars().take(40).collect()
    }
}

#[async_trait::async_trait]
impl Tool for SearchEvidence {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let query = args::required_text(&args, "query")?;
        let limit = args::count(&args, "max_results", DEFAULT_RESULTS, MAX_RESULTS);
        let wanted = args
            .get("evidence_level")
            .and_then(Value::as_str)
            .filter(|l| LEVELS.contains(l));
        let mut params = vec![("q", query.clone()), ("limit", limit.to_string())];
        if let Some(level) = wanted {
            params.push(("evidence_level", level.to_string()));
        }
        let body = http::with_retries("evidence", || {
            let mut request = self.http.get(self.endpoint.clone()).query(&params);
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key.expose());
            }
            http::attempt(request, MAX_BODY_BYTES)
        })
        .await
        .map_err(|_| ToolError::Backend(UNAVAILABLE.into()))?;
        let answer: Answer = serde_json::from_slice(&body).map_err(|_| {
            tracing::warn!("evidence answer is not the adapter protocol");
            ToolError::Backend(UNREADABLE.into())
        })?;

        let total = answer.total_count.unwrap_or(answer.results.len() as u64);
        let (mut results, mut citations) = (Vec::new(), Vec::new());
        let items = answer.results.into_iter().filter_map(|item| serde_json::from_value::<Evidence>(item).ok());
        for item in items {
            let (Some(url), Some(raw_title)) = (item.url, item.title) else {
                continue;
            };
            let url_ok = url.len() <= MAX_URL_BYTES
                && Url::parse(&url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            let level = level(item.evidence_level.as_deref());
            // A service that ignores the filter must not widen it.
            if !url_ok || raw_title.trim().is_empty() || wanted.is_some_and(|w| w != level) {
                continue;
            }
            if results.len() as u64 == limit {
                break;
            }
            let (summary, cut_summary) = truncate(item.summary.as_deref().unwrap_or_default().trim(), SUMMARY_CHARS);
            let (title, cut_title) = truncate(raw_title.trim(), TITLE_CHARS);
            let (source, cut_source) = truncate(item.source.as_deref().unwrap_or_default().trim(), SOURCE_CHARS);
            let pubmed_id = item.pubmed_id.as_deref().map(|id| truncate(id, PUBMED_ID_CHARS));
            let date = item.date.as_deref().map(|d| truncate(d, DATE_CHARS));
            let truncated = cut_summary
                || cut_title
                || cut_source
                || pubmed_id.as_ref().is_some_and(|p| p.1)
                || date.as_ref().is_some_and(|d| d.1);
            let (pubmed_id, date) = (pubmed_id.map(|p| p.0), date.map(|d| d.0));
            let mut value = json!({
                "title": title, "summary": summary, "evidence_level": level, "source": source,
                "pubmed_id": pubmed_id, "url": url, "date": date,
            });
            if truncated {
                value["truncated"] = json!(true);
            }
            results.push(value);
            citations.push(Citation {
                title,
                url,
                source: if source.is_empty() { "Evidence service".into() } else { source },
                pmid: pubmed_id,
                evidence_level: Some(level),
                date,
                ..Default::default()
            });
        }
        // Summaries are cut by characters: escaped or multi-byte text can still be too long in all.
        Ok(super::text::search_output("results", results, citations, total, &query))
    }
}
