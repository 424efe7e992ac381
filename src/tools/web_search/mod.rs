//! `web_search_medical`: current medical information from the web, through the Brave Search API or
//! the Google Custom Search JSON API ([`providers`]), restricted to an allow-list of medical domains.
//!
//! The allow-list (`backends.web_search.allowed_domains`, a medical default) is enforced twice: the
//! query carries a `site:` restriction when the list is short and the query with it stays within the
//! provider's limits ([`providers::query_limits`]), and every result whose host is not an allowed
//! domain (or a subdomain of one) is dropped.
//! The model may narrow it with `domain_filter`, never widen it (`invalid_arguments`).
//!
//! A third party receives the query, so the session screens every string argument for PHI first
//! (`policy::screening`); the tool exists only when a provider is configured.

mod providers;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};
use url::Url;

use super::registry::RegistryError;
use super::text::{MAX_URL_BYTES, truncate};
use super::{
    CallContext, Category, Citation, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput,
    ToolSpec, args, http,
};
use crate::config::{Secret, WebSearchBackendConfig, WebSearchProvider, is_domain};

const NAME: &str = "web_search_medical";
const DEFAULT_RESULTS: u64 = 5;
const MAX_RESULTS: u64 = 10;
const MAX_QUERY_CHARS: u64 = 300;
const MAX_FILTER_DOMAINS: u64 = 20;
/// With more domains than this no `site:` restriction is tried (the default list is far longer);
/// with fewer it is still left out when the query with it would exceed the provider's limits. The
/// result filter alone then enforces the list.
const MAX_SITE_TERMS: usize = 8;
const SNIPPET_CHARS: usize = 500;
/// Titles and dates come from the provider (or the page), unbounded: cut like snippets.
const TITLE_CHARS: usize = 300;
const DATE_CHARS: usize = 40;
const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;
const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Said when the provider cannot be reached: the model should fall back to the local sources.
const UNAVAILABLE: &str = "Web search is unavailable right now. Use search_medical_guidelines or \
    search_pubmed instead, and tell the user the web could not be searched.";
const UNREADABLE: &str = "Web search is unavailable: its answer could not be read.";

/// The tool: one provider, one allow-list, shared by every session.
pub struct WebSearchMedical {
    spec: ToolSpec,
    provider: WebSearchProvider,
    http: reqwest::Client,
    base: Url,
    api_key: Secret,
    cx: String,
    allowed: Vec<String>,
}

impl std::fmt::Debug for WebSearchMedical {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSearchMedical")
            .field("provider", &self.provider)
            .field("base", &self.base.as_str())
            .finish()
    }
}

/// The tool when a provider is configured; `None` (not offered) otherwise.
pub fn tool(config: &WebSearchBackendConfig) -> Result<Option<WebSearchMedical>, RegistryError> {
    let Some(provider) = config.provider else {
        return Ok(None);
    };
    let backend = |reason: String| RegistryError::Backend {
        family: "web_search",
        reason,
    };
    let base = config
        .base_url
        .as_deref()
        .unwrap_or(provider.default_base_url());
    let base = http::base_url(base, "backends.web_search.base_url").map_err(backend)?;
    let api_key = config
        .api_key
        .clone()
        .ok_or_else(|| backend("backends.web_search.api_key is required".into()))?;
    let allowed: Vec<String> = config
        .allowed_domains
        .iter()
        .map(|d| d.trim().to_ascii_lowercase())
        .collect();
    let spec = ToolSpec {
        name: NAME,
        description: format!(
            "Search the web for current medical information ({}), limited to trusted medical sites such as {}. \
             Returns titles, links and snippets. Prefer search_medical_guidelines or search_pubmed for \
             guidance and evidence. The query leaves the hospital: never include patient names, dates of \
             birth, record numbers or other identifying details.",
            provider.display_name(),
            allowed
                .iter()
                .take(6)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ),
        parameters: parameters(),
        category: Category::Search,
        phi: false,
        risk: Risk::Low,
        requires_confirmation: false,
        third_party: true,
        rate_limit_per_minute: 30,
        timeout: DEFAULT_TOOL_TIMEOUT,
    };
    Ok(Some(WebSearchMedical {
        spec,
        provider,
        http: http::client(REQUEST_TIMEOUT).map_err(backend)?,
        base,
        api_key,
        cx: config.cx.clone().unwrap_or_default(),
        allowed,
    }))
}

fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {
                "type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS,
                "description": "What to search for. No patient-identifying details.",
            },
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "default": DEFAULT_RESULTS},
            "domain_filter": {
                "type": "array",
                "items": {"type": "string", "minLength": 3, "maxLength": 253, "pattern": "^[A-Za-z0-9.-]+$"},
                "maxItems": MAX_FILTER_DOMAINS,
                "uniqueItems": true,
                "description": "Only these sites, e.g. [\"nih.gov\", \"cdc.gov\"]; each must be one of the allowed medical domains.",
            },
        },
        "required": ["query"],
        "additionalProperties": false,
    })
}

/// `query (site:a OR site:b …)`, if the domains are few and the whole stays within the provider's
/// query limits: a query the provider refuses (Brave answers 422) would make the search fail.
fn restricted(provider: WebSearchProvider, query: &str, domains: &[String]) -> Option<String> {
    if domains.len() > MAX_SITE_TERMS {
        return None;
    }
    let sites: Vec<String> = domains.iter().map(|d| format!("site:{d}")).collect();
    let sent = format!("{query} ({})", sites.join(" OR "));
    let (max_chars, max_words) = providers::query_limits(provider);
    (sent.chars().count() <= max_chars && sent.split_whitespace().count() <= max_words).then_some(sent)
}

/// Is `host` the domain itself or one of its subdomains?
fn within(host: &str, domain: &str) -> bool {
    host == domain
        || host
            .strip_suffix(domain)
            .is_some_and(|rest| rest.ends_with('.'))
}

impl WebSearchMedical {
    /// The domains this call may return: the `domain_filter` (each inside the allow-list) or the
    /// whole allow-list.
    fn domains(&self, args: &Value) -> Result<Vec<String>, ToolError> {
        let Some(filter) = args.get("domain_filter").and_then(Value::as_array) else {
            return Ok(self.allowed.clone());
        };
        let mut domains = Vec::new();
        for entry in filter.iter().filter_map(Value::as_str) {
            let domain = entry.trim().trim_start_matches("www.").to_ascii_lowercase();
            if !is_domain(&domain) || !self.allowed.iter().any(|allowed| within(&domain, allowed)) {
                return Err(ToolError::InvalidArguments(format!(
                    "`/domain_filter`: every domain must be one of the allowed medical domains ({})",
                    self.allowed.join(", ")
                )));
            }
            domains.push(domain);
        }
        if domains.is_empty() {
            Ok(self.allowed.clone())
        } else {
            Ok(domains)
        }
    }

    async fn search(&self, query: &str, count: usize) -> Result<Value, ToolError> {
        let body = http::with_retries("web search", || {
            let request = providers::request(
                self.provider,
                &self.http,
                &self.base,
                self.api_key.expose(),
                &self.cx,
                query,
                count,
            );
            async move {
                // The URL is fixed by config (checked at start), so this does not fail in practice.
                let request = request.map_err(|_| (http::Failure::Transport, None))?;
                http::attempt(request, MAX_BODY_BYTES).await
            }
        })
        .await
        .map_err(|_| ToolError::Backend(UNAVAILABLE.into()))?;
        // Some answers start with a UTF-8 byte-order mark, which JSON parsers refuse.
        let body = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(&body);
        serde_json::from_slice(body).map_err(|_| ToolError::Backend(UNREADABLE.into()))
    }
}

#[async_trait::async_trait]
impl Tool for WebSearchMedical {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let query = args::required_text(&args, "query")?;
        let max = args::count(&args, "max_results", DEFAULT_RESULTS, MAX_RESULTS) as usize;
        let domains = self.domains(&args)?;
        let sent = restricted(self.provider, &query, &domains).unwrap_or_else(|| query.clone());
        // Ask for more than needed: results outside the allow-list are dropped below.
        let answer = self.search(&sent, (max * 3).max(10)).await?;
        let hits = providers::hits(self.provider, &answer).ok_or_else(|| {
            tracing::warn!(provider = ?self.provider, "web search answer not in the provider's format");
            ToolError::Backend(UNREADABLE.into())
        })?;
        let (mut results, mut citations) = (Vec::new(), Vec::new());
        let mut dropped = 0usize;
        for hit in hits {
            // A cut URL would lead elsewhere: an overlong one makes the hit unusable.
            let host = Some(&hit.url)
                .filter(|u| u.len() <= MAX_URL_BYTES)
                .and_then(|u| Url::parse(u).ok())
                .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
            let Some(domain) = host.filter(|h| domains.iter().any(|d| within(h, d))) else {
                dropped += 1;
                continue;
            };
            if results.len() == max {
                break;
            }
            let (snippet, cut_snippet) = truncate(&hit.snippet, SNIPPET_CHARS);
            let (title, cut_title) = truncate(&hit.title, TITLE_CHARS);
            let date = hit.date.as_deref().map(|d| truncate(d, DATE_CHARS));
            let truncated = cut_snippet || cut_title || date.as_ref().is_some_and(|d| d.1);
            let date = date.map(|d| d.0);
            let mut item = json!({"title": title, "url": hit.url, "snippet": snippet, "domain": domain, "date": date});
            if truncated {
                item["truncated"] = json!(true);
            }
            results.push(item);
            citations.push(Citation { title, url: hit.url, source: domain, date, ..Default::default() });
        }
        tracing::debug!(returned = results.len(), dropped, "web search done");
        // `total_count` is what was found; results are dropped from the end only to fit 32 KiB.
        let total = results.len() as u64;
        Ok(super::text::search_output("results", results, citations, total, &query))
    }
}
