//! The two web-search APIs `web_search_medical` speaks, reduced to one [`Hit`] shape:
//!
//! - Brave Search API: `GET {base}/res/v1/web/search?q=&count=` with the key in the
//!   `X-Subscription-Token` header; results in `web.results[]` (`title`, `url`, `description` with
//!   `<strong>` markup, `page_age`).
//! - Google Custom Search JSON API: `GET {base}/customsearch/v1?key=&cx=&q=&num=`; results in
//!   `items[]` (`title`, `link`, `snippet`, dates only in `pagemap.metatags`). These are plain text
//!   (the markup is in `htmlTitle`/`htmlSnippet`): only their whitespace is collapsed, so a "<" or
//!   ">" in "eGFR <30" stays.
//!
//! Google's key travels in the query string, so only `http::Failure` is ever logged.

use serde_json::Value;
use url::Url;

use crate::config::WebSearchProvider;
use crate::tools::text::{collapse_whitespace, plain};

/// Largest page of results each API gives per request.
pub const BRAVE_MAX_COUNT: usize = 20;
pub const GOOGLE_MAX_NUM: usize = 10;

/// The longest query each API takes, in characters and in words. Brave refuses a `q` over 400
/// characters or 50 words; Google reads at most 32 words and its whole request URL (key and cx
/// included) must stay under 2,048 bytes.
pub fn query_limits(provider: WebSearchProvider) -> (usize, usize) {
    match provider {
        WebSearchProvider::Brave => (400, 50),
        WebSearchProvider::Google => (1500, 32),
    }
}

/// One search result, before the allow-list is applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    pub title: String,
    pub url: String,
    pub snippet: String,
    pub date: Option<String>,
}

/// The request for `query`, asking for `count` results.
pub fn request(
    provider: WebSearchProvider,
    http: &reqwest::Client,
    base: &Url,
    key: &str,
    cx: &str,
    query: &str,
    count: usize,
) -> Result<reqwest::RequestBuilder, url::ParseError> {
    Ok(match provider {
        WebSearchProvider::Brave => {
            let count = count.min(BRAVE_MAX_COUNT).to_string();
            http.get(base.join("res/v1/web/search")?)
                .query(&[("q", query), ("count", count.as_str())])
                .header("X-Subscription-Token", key)
                .header(reqwest::header::ACCEPT, "application/json")
        }
        WebSearchProvider::Google => {
            let num = count.min(GOOGLE_MAX_NUM).to_string();
            http.get(base.join("customsearch/v1")?).query(&[
                ("key", key),
                ("cx", cx),
                ("q", query),
                ("num", num.as_str()),
            ])
        }
    })
}

/// The hits in a provider's answer, in its order; entries without a title or an http(s) URL are
/// skipped. `None` when the answer is not the provider's format at all.
pub fn hits(provider: WebSearchProvider, answer: &Value) -> Option<Vec<Hit>> {
    // Brave's text is HTML; Google's is plain text, where stripping "tags" would eat "<7% … >130".
    let clean = match provider {
        WebSearchProvider::Brave => plain,
        WebSearchProvider::Google => collapse_whitespace,
    };
    let text = |item: &Value, key: &str| {
        item.get(key)
            .and_then(Value::as_str)
            .map(clean)
            .unwrap_or_default()
    };
    let list = match provider {
        // No `web` section means no web results (Brave omits it for an empty result).
        WebSearchProvider::Brave => match answer.get("web") {
            Some(web) => web.get("results")?.as_array()?.clone(),
            None if answer.get("type").is_some() => Vec::new(),
            None => return None,
        },
        // Google omits `items` when nothing matched; `kind` says it is a search answer.
        WebSearchProvider::Google => match answer.get("items") {
            Some(items) => items.as_array()?.clone(),
            None if answer.get("kind").is_some() => Vec::new(),
            None => return None,
        },
    };
    let hits = list
        .iter()
        .filter_map(|item| {
            let (url_key, snippet_key) = match provider {
                WebSearchProvider::Brave => ("url", "description"),
                WebSearchProvider::Google => ("link", "snippet"),
            };
            let url = item.get(url_key).and_then(Value::as_str)?.to_string();
            let title = text(item, "title");
            let web = Url::parse(&url).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
            (web && !title.is_empty()).then(|| Hit {
                title,
                snippet: text(item, snippet_key),
                date: date(provider, item),
                url,
            })
        })
        .collect();
    Some(hits)
}

/// When the page was published, if the provider says: Brave's `page_age`, Google's metatags.
fn date(provider: WebSearchProvider, item: &Value) -> Option<String> {
    let raw = match provider {
        WebSearchProvider::Brave => item.get("page_age").and_then(Value::as_str),
        WebSearchProvider::Google => {
            let tags = item.pointer("/pagemap/metatags/0")?;
            [
                "article:published_time",
                "og:updated_time",
                "dc.date",
                "citation_publication_date",
                "date",
            ]
            .iter()
            .find_map(|key| tags.get(*key).and_then(Value::as_str))
        }
    }?;
    // Keep the date part of an ISO timestamp; anything else is shown as given (bounded).
    let raw = raw.trim();
    let date = if raw.as_bytes().get(4) == Some(&b'-') {
        raw.get(..10).unwrap_or(raw)
    } else {
        raw
    };
    (!date.is_empty() && date.len() <= 40).then(|| date.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const BRAVE: &str = include_str!(
        "../../../tests/fixtures/search/semantic-kernel_brave_what_is_the_semantic_kernel.json"
    );
    const GOOGLE: &str = include_str!(
        "../../../tests/fixtures/search/semantic-kernel_google_what_is_the_semantic_kernel.json"
    );

    #[test]
    fn brave_answers_are_read() {
        let answer: Value = serde_json::from_str(BRAVE).unwrap();
        let hits = hits(WebSearchProvider::Brave, &answer).unwrap();
        assert_eq!(hits.len(), 10);
        assert_eq!(
            hits[0].url,
            "https://learn.microsoft.com/en-us/semantic-kernel/overview/"
        );
        assert!(
            !hits.iter().any(|h| h.snippet.contains("<strong>")),
            "markup removed"
        );
        assert!(hits.iter().any(|h| {
            h.date
                .as_deref()
                .is_some_and(|d| d.len() == 10 && d.starts_with("20"))
        }));
    }

    #[test]
    fn google_answers_are_read() {
        let answer: Value = serde_json::from_str(GOOGLE).unwrap();
        let hits = hits(WebSearchProvider::Google, &answer).unwrap();
        assert_eq!(hits.len(), 4);
        assert_eq!(hits[1].url, "https://github.com/microsoft/semantic-kernel");
        assert!(!hits[0].snippet.is_empty());
    }

    /// Google's `title` and `snippet` are plain text: a "<" is a less-than sign, not a tag, and
    /// dropping up to the next ">" would change a clinical threshold without a trace.
    #[test]
    fn google_text_keeps_its_angle_brackets() {
        let answer = serde_json::json!({"items": [{
            "title": "BP <130/80 &amp; A1C <7%",
            "link": "https://cdc.gov/x",
            "snippet": "BP <130/80 if eGFR >60;\n  stop if eGFR <30 · see <b>",
        }]});
        let google = hits(WebSearchProvider::Google, &answer).unwrap();
        assert_eq!(google[0].title, "BP <130/80 &amp; A1C <7%");
        assert_eq!(google[0].snippet, "BP <130/80 if eGFR >60; stop if eGFR <30 · see <b>");
        // Brave's description is HTML: its markup and entities still go.
        let answer = serde_json::json!({"web": {"results": [{
            "title": "T", "url": "https://cdc.gov/x", "description": "BP &lt;130/80 <strong>now</strong>",
        }]}});
        assert_eq!(hits(WebSearchProvider::Brave, &answer).unwrap()[0].snippet, "BP <130/80 now");
    }

    #[test]
    fn empty_and_foreign_answers() {
        assert_eq!(
            hits(
                WebSearchProvider::Google,
                &serde_json::json!({"kind": "customsearch#search"})
            ),
            Some(vec![])
        );
        assert_eq!(
            hits(
                WebSearchProvider::Brave,
                &serde_json::json!({"type": "search"})
            ),
            Some(vec![])
        );
        assert_eq!(
            hits(WebSearchProvider::Brave, &serde_json::json!({"error": "x"})),
            None
        );
    }
}
