//! `search_medical_guidelines`: full-text search over a guideline corpus held in this process —
//! by default the one shipped in `data/guidelines/` (US federal public-domain guidance: USPSTF,
//! CDC, NIH, AHRQ, FDA, VA/DoD), or an operator's own (`backends.guidelines.corpus_path`).
//!
//! Nothing leaves the process, so the query is not a third-party text and is not PHI-screened;
//! it is still never logged. The corpus is read and checked in [`corpus`], indexed in [`index`]
//! at start; a call ranks, filters and shapes the seed's `SearchMedicalGuidelinesResult`, with one
//! citation per guideline for the client.

mod corpus;
mod index;
#[cfg(test)]
mod tests;

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

use self::corpus::Guideline;
use self::index::{Filters, GuidelineIndex};
use super::registry::RegistryError;
use super::text::{MAX_RESULT_BYTES, truncate};
use super::{
    CallContext, Category, Citation, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec,
};
use crate::config::GuidelinesBackendConfig;

pub use self::corpus::CorpusError;

const MAX_RESULTS: u64 = 20;
/// The seed's default.
const DEFAULT_RESULTS: u64 = 10;
const MAX_QUERY_CHARS: u64 = 300;
const MAX_FILTER_CHARS: u64 = 100;
/// A result's summary and each recommendation are cut to these lengths; the URL has the rest.
const SUMMARY_CHARS: usize = 1_200;
const RECOMMENDATION_CHARS: usize = 500;
const RECOMMENDATIONS_SHOWN: usize = 6;

/// The `search_medical_guidelines` tool: the corpus and its index, shared by every session.
pub struct SearchGuidelines {
    spec: ToolSpec,
    guidelines: Vec<Guideline>,
    index: GuidelineIndex,
}

impl std::fmt::Debug for SearchGuidelines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchGuidelines").field("guidelines", &self.guidelines.len()).finish()
    }
}

/// The tool for `config`: the operator's corpus when one is configured, else the shipped one.
pub fn tool(config: &GuidelinesBackendConfig) -> Result<SearchGuidelines, RegistryError> {
    let backend = |reason: String| RegistryError::Backend { family: "guidelines", reason };
    let guidelines = match &config.corpus_path {
        Some(path) => corpus::from_file(path),
        None => corpus::shipped(),
    }
    .map_err(|err| backend(err.to_string()))?;
    SearchGuidelines::new(guidelines).map_err(|err| backend(err.to_string()))
}

/// Check an operator's corpus file as start-up would (for config validation and `check-config`).
pub fn check_corpus(path: &Path) -> Result<usize, CorpusError> {
    corpus::from_file(path).map(|guidelines| guidelines.len())
}

impl SearchGuidelines {
    fn new(guidelines: Vec<Guideline>) -> Result<Self, index::IndexError> {
        let started = Instant::now();
        let index = GuidelineIndex::build(&guidelines)?;
        tracing::info!(
            guidelines = guidelines.len(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "guideline index built"
        );
        let spec = ToolSpec {
            name: "search_medical_guidelines",
            description: "Search curated clinical practice guidelines and recommendations (USPSTF, CDC, \
                NIH, AHRQ, FDA and others) held locally: screening, prevention, immunisation, treatment and \
                drug-safety guidance. Returns the best-matching guidelines with source, condition, summary, \
                key recommendations, dates and a link. Filter by publishing organisation (e.g. \"cdc\", \
                \"uspstf\") or by condition (e.g. \"diabetes\")."
                .into(),
            parameters: parameters(),
            category: Category::Medical,
            phi: false,
            risk: Risk::Low,
            requires_confirmation: false,
            third_party: false,
            rate_limit_per_minute: 30,
            timeout: DEFAULT_TOOL_TIMEOUT,
        };
        Ok(Self { spec, guidelines, index })
    }

    /// The seed's result and the citations for `args` (already validated).
    fn search(&self, args: &Value) -> Result<ToolOutput, ToolError> {
        let text = |key: &str| args.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
        let query = text("query")
            .ok_or_else(|| ToolError::InvalidArguments("`/query`: a non-empty search text is required".into()))?;
        let filters = Filters {
            source: text("guideline_source").map(String::from),
            condition: text("condition").map(String::from),
        };
        let max = crate::tools::args::count(args, "max_results", DEFAULT_RESULTS, MAX_RESULTS);
        let hits = self.index.search(query, &filters, max as usize).map_err(|err| {
            tracing::error!(error = %err, "guideline search failed");
            ToolError::Internal
        })?;
        let found: Vec<&Guideline> = hits.ranked.iter().filter_map(|&at| self.guidelines.get(at)).collect();
        Ok(output(query, hits.total, &found))
    }
}

fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_QUERY_CHARS,
                "description": "What to look for, in plain words, e.g. \"colorectal cancer screening age\" or \
                    \"anticoagulation in atrial fibrillation\".",
            },
            "guideline_source": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FILTER_CHARS,
                "description": "Only guidelines from this organisation, e.g. \"uspstf\", \"cdc\", \"nhlbi\", \
                    \"ahrq\", \"fda\".",
            },
            "condition": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_FILTER_CHARS,
                "description": "Only guidelines whose condition contains these words, e.g. \"diabetes\".",
            },
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_RESULTS,
                "default": DEFAULT_RESULTS,
                "description": "How many guidelines to return, best match first.",
            },
        },
        "required": ["query"],
        "additionalProperties": false,
    })
}

#[async_trait::async_trait]
impl Tool for SearchGuidelines {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        // An in-memory search of a small index: well under a millisecond, no need for a blocking pool.
        self.search(&args)
    }
}

/// The seed's `SearchMedicalGuidelinesResult` (plus `truncated` when anything was cut) and one
/// citation per returned guideline.
fn output(query: &str, total: usize, found: &[&Guideline]) -> ToolOutput {
    let mut truncated = false;
    let mut list: Vec<Value> = found
        .iter()
        .map(|g| {
            let (value, cut) = guideline_json(g);
            truncated |= cut;
            value
        })
        .collect();
    let size = |list: &[Value]| list.iter().map(|v| v.to_string().len() + 1).sum::<usize>() + query.len() + 100;
    while !list.is_empty() && size(&list) > MAX_RESULT_BYTES {
        list.pop();
        truncated = true;
    }
    let citations = found.iter().take(list.len()).map(|g| citation(g)).collect();
    let mut result = json!({ "guidelines": list, "total_count": total, "query": query });
    if truncated && let Some(map) = result.as_object_mut() {
        map.insert("truncated".into(), json!(true));
    }
    ToolOutput { result, citations }
}

fn guideline_json(g: &Guideline) -> (Value, bool) {
    let (summary, mut cut) = truncate(&g.summary, SUMMARY_CHARS);
    let recommendations: Vec<String> = g
        .recommendations
        .iter()
        .take(RECOMMENDATIONS_SHOWN)
        .map(|r| {
            let (text, c) = truncate(r, RECOMMENDATION_CHARS);
            cut |= c;
            text
        })
        .collect();
    cut |= g.recommendations.len() > RECOMMENDATIONS_SHOWN;
    let mut value = json!({
        "id": g.id,
        "title": g.title,
        "source": g.source,
        "condition": g.condition,
        "summary": summary,
        "url": g.url,
        "publication_date": g.publication_date,
        "last_updated": g.last_updated,
    });
    if let Some(map) = value.as_object_mut() {
        if !recommendations.is_empty() {
            map.insert("recommendations".into(), json!(recommendations));
        }
        if let Some(level) = &g.evidence_level {
            map.insert("evidence_level".into(), json!(level));
        }
    }
    (value, cut)
}

fn citation(g: &Guideline) -> Citation {
    Citation {
        title: g.title.clone(),
        url: g.url.clone(),
        source: g.source.clone(),
        pmid: None,
        doi: None,
        evidence_level: g.evidence_level.clone(),
        date: Some(g.last_updated.clone()),
    }
}
