//! Configuration of the knowledge tools' backends (CONTRACT §8): the differential-diagnosis knowledge
//! base and its optional LLM, the web-search provider and the evidence adapter.
//!
//! Web search and evidence are third parties: unset, their tools are simply not offered. The
//! differential tool always works from the knowledge base shipped in `data/ddx/`.

use std::path::PathBuf;

use serde::Deserialize;

use super::{ConfigError, Secret};

/// `[backends.ddx]`: where the knowledge base comes from, and an optional re-ranking LLM.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DdxBackendConfig {
    /// An operator's own knowledge base (same JSON format); unset = the one shipped in the binary.
    pub knowledge_base_path: Option<PathBuf>,
    /// OpenAI-compatible API root (`POST {llm_url}/chat/completions`) the operator has declared
    /// PHI-safe: the patient's findings are sent there.
    pub llm_url: Option<String>,
    pub llm_api_key: Option<Secret>,
    pub llm_model: Option<String>,
    /// How long the LLM may take before the knowledge-base answer is returned instead; the
    /// differential also stops it in time for the tool's own timeout, when that ends sooner.
    pub llm_timeout_ms: u64,
}

/// Default LLM budget: well inside the tool's 30 s so the fallback still answers in time.
pub const DEFAULT_DDX_LLM_TIMEOUT_MS: u64 = 15_000;

impl DdxBackendConfig {
    pub fn llm_timeout_ms(&self) -> u64 {
        if self.llm_timeout_ms == 0 {
            DEFAULT_DDX_LLM_TIMEOUT_MS
        } else {
            self.llm_timeout_ms
        }
    }
}

/// Which web-search API `web_search_medical` speaks.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WebSearchProvider {
    Brave,
    Google,
}

impl WebSearchProvider {
    /// The provider's public API root, used when `base_url` is unset.
    pub fn default_base_url(self) -> &'static str {
        match self {
            WebSearchProvider::Brave => "https://api.search.brave.com",
            WebSearchProvider::Google => "https://www.googleapis.com",
        }
    }

    pub fn display_name(self) -> &'static str {
        match self {
            WebSearchProvider::Brave => "Brave Search",
            WebSearchProvider::Google => "Google Custom Search",
        }
    }
}

/// Medical sites the web search may return by default: public health agencies, the NLM and
/// well-known clinical references. An operator may narrow or widen it.
pub const DEFAULT_MEDICAL_DOMAINS: &[&str] = &[
    "nih.gov",
    "ncbi.nlm.nih.gov",
    "medlineplus.gov",
    "cdc.gov",
    "who.int",
    "fda.gov",
    "ahrq.gov",
    "cms.gov",
    "uspreventiveservicestaskforce.org",
    "nice.org.uk",
    "nhs.uk",
    "cochranelibrary.com",
    "mayoclinic.org",
    "clevelandclinic.org",
    "heart.org",
    "diabetes.org",
    "cancer.gov",
    "cancer.org",
    "aafp.org",
    "acog.org",
    "idsociety.org",
    "nejm.org",
    "thelancet.com",
    "bmj.com",
    "jamanetwork.com",
];

/// `[backends.web_search]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSearchBackendConfig {
    /// Unset: `web_search_medical` is not offered.
    pub provider: Option<WebSearchProvider>,
    /// Unset: the provider's own API root.
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
    /// Google Programmable Search Engine id.
    pub cx: Option<String>,
    /// Registrable domains (subdomains included) results may come from.
    pub allowed_domains: Vec<String>,
}

impl Default for WebSearchBackendConfig {
    fn default() -> Self {
        Self {
            provider: None,
            base_url: None,
            api_key: None,
            cx: None,
            allowed_domains: DEFAULT_MEDICAL_DOMAINS
                .iter()
                .map(|d| d.to_string())
                .collect(),
        }
    }
}

/// `[backends.evidence]`: the evidence adapter (CONTRACT §8). Unset: `search_openevidence` is not
/// offered.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvidenceBackendConfig {
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
}

/// The knowledge backends' own checks, each naming its key.
pub(super) fn validate(
    ddx: &DdxBackendConfig,
    web: &WebSearchBackendConfig,
    evidence: &EvidenceBackendConfig,
) -> Result<(), ConfigError> {
    if let Some(path) = &ddx.knowledge_base_path {
        crate::tools::ddx::KnowledgeBase::from_file(path)
            .map_err(|e| ConfigError::new("backends.ddx.knowledge_base_path", e.to_string()))?;
    }
    if let Some(url) = &ddx.llm_url {
        http_url("backends.ddx.llm_url", url)?;
        if ddx.llm_model.as_deref().is_none_or(|m| m.trim().is_empty()) {
            return Err(ConfigError::new(
                "backends.ddx.llm_model",
                "required when backends.ddx.llm_url is set",
            ));
        }
    }
    if let Some(url) = &web.base_url {
        http_url("backends.web_search.base_url", url)?;
    }
    if let Some(provider) = web.provider {
        if web
            .api_key
            .as_ref()
            .is_none_or(|k| k.expose().trim().is_empty())
        {
            return Err(ConfigError::new(
                "backends.web_search.api_key",
                "required when a provider is set",
            ));
        }
        if provider == WebSearchProvider::Google
            && web.cx.as_deref().is_none_or(|c| c.trim().is_empty())
        {
            return Err(ConfigError::new(
                "backends.web_search.cx",
                "required for provider = \"google\"",
            ));
        }
    }
    if web.allowed_domains.is_empty() {
        return Err(ConfigError::new(
            "backends.web_search.allowed_domains",
            "must list at least one domain",
        ));
    }
    for (i, domain) in web.allowed_domains.iter().enumerate() {
        if !is_domain(domain) {
            return Err(ConfigError::new(
                format!("backends.web_search.allowed_domains[{i}]"),
                "must be a bare domain such as nih.gov (no scheme, path or wildcard)",
            ));
        }
    }
    if let Some(url) = &evidence.base_url {
        http_url("backends.evidence.base_url", url)?;
    }
    Ok(())
}

fn http_url(key: &str, value: &str) -> Result<(), ConfigError> {
    let ok = url::Url::parse(value)
        .is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
    if ok {
        Ok(())
    } else {
        Err(ConfigError::new(key, "must be an http(s) URL"))
    }
}

/// A lower-case host name with at least one dot: `nih.gov`, `www.cdc.gov`.
pub fn is_domain(value: &str) -> bool {
    value.len() <= 253
        && value.contains('.')
        && value.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(
        ddx: DdxBackendConfig,
        web: WebSearchBackendConfig,
        evidence: EvidenceBackendConfig,
    ) -> Result<(), ConfigError> {
        validate(&ddx, &web, &evidence)
    }

    #[test]
    fn defaults_are_valid_and_offer_no_third_party() {
        assert!(check(Default::default(), Default::default(), Default::default()).is_ok());
        assert!(WebSearchBackendConfig::default().provider.is_none());
        assert!(
            WebSearchBackendConfig::default()
                .allowed_domains
                .iter()
                .all(|d| is_domain(d))
        );
    }

    #[test]
    fn a_bad_operator_knowledge_base_is_refused_naming_the_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kb.json");
        let mut kb: serde_json::Value =
            serde_json::from_str(include_str!("../../data/ddx/knowledge_base.json")).unwrap();
        kb["conditions"][5]["next_steps"] = serde_json::json!([]);
        std::fs::write(&path, kb.to_string()).unwrap();
        let ddx = DdxBackendConfig {
            knowledge_base_path: Some(path),
            ..Default::default()
        };
        let err = check(ddx, Default::default(), Default::default()).unwrap_err();
        assert_eq!(err.key, "backends.ddx.knowledge_base_path");
        assert_eq!(
            err.reason,
            "condition #5 (pericarditis): next_steps must not be empty"
        );
    }

    #[test]
    fn each_bad_key_is_named() {
        let cases: Vec<(
            &str,
            DdxBackendConfig,
            WebSearchBackendConfig,
            EvidenceBackendConfig,
        )> = vec![
            (
                "backends.ddx.llm_url",
                DdxBackendConfig {
                    llm_url: Some("ftp://x".into()),
                    ..Default::default()
                },
                Default::default(),
                Default::default(),
            ),
            (
                "backends.ddx.llm_model",
                DdxBackendConfig {
                    llm_url: Some("http://127.0.0.1:1/v1".into()),
                    ..Default::default()
                },
                Default::default(),
                Default::default(),
            ),
            (
                "backends.web_search.api_key",
                Default::default(),
                WebSearchBackendConfig {
                    provider: Some(WebSearchProvider::Brave),
                    ..Default::default()
                },
                Default::default(),
            ),
            (
                "backends.web_search.cx",
                Default::default(),
                WebSearchBackendConfig {
                    provider: Some(WebSearchProvider::Google),
                    api_key: Some(Secret::new("k")),
                    ..Default::default()
                },
                Default::default(),
            ),
            (
                "backends.web_search.allowed_domains[1]",
                Default::default(),
                WebSearchBackendConfig {
                    allowed_domains: vec!["nih.gov".into(), "https://cdc.gov/".into()],
                    ..Default::default()
                },
                Default::default(),
            ),
            (
                "backends.evidence.base_url",
                Default::default(),
                Default::default(),
                EvidenceBackendConfig {
                    base_url: Some("not a url".into()),
                    api_key: None,
                },
            ),
        ];
        for (key, ddx, web, evidence) in cases {
            assert_eq!(check(ddx, web, evidence).unwrap_err().key, key);
        }
    }
}
