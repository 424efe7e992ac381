//! Literature requests for `search_pubmed`: "find PubMed articles on X", "studies on X",
//! "search for X", "look up X in the literature". The query is the words after the topic
//! marker, without trailing filler ("in PubMed", "please") or punctuation.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::json;

use super::{Pattern, Understood, clip, first_topic, is_match};

const TOOL: &str = "search_pubmed";
/// Results asked for (the tool allows 1–20).
const MAX_RESULTS: u32 = 5;
/// Longest query taken from the request.
const MAX_QUERY: usize = 200;

static TOPIC_WORDS: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\bpubmed\b|\bliterature\b|\bstudies\b|\bstudy\b|\barticles?\b|\bpapers?\b|\bpublications?\b|\bresearch\b|\bsearch\s+for\b|\blook\s+up\b").ok()
});
/// Ordered from most to least specific; the first that captures a non-empty topic wins.
static QUERIES: [Pattern; 4] = [
    LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:studies|study|articles?|papers?|literature|research|publications?|trials|evidence|reviews?)\s+(?:on|about|regarding|into|of|for|covering)\s+(.+)").ok()
    }),
    LazyLock::new(|| Regex::new(r"(?i)\bpubmed\s+(?:for|on|about)\s+(.+)").ok()),
    LazyLock::new(|| Regex::new(r"(?i)\b(?:search|look)\s+(?:pubmed\s+|the\s+literature\s+)?(?:for|up)\s+(.+)").ok()),
    LazyLock::new(|| Regex::new(r"(?i)\bpubmed\s*[:,-]\s*(.+)").ok()),
];
/// Filler at the end of a topic.
static TRAILER: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)(?:\s+(?:in|on|from|using|via)\s+(?:pubmed|the\s+literature)|\s+please|\s+for\s+me|[\s.?!,;:]+)+$")
        .ok()
});
/// Filler at the start of a topic ("recent", "the latest").
static LEADER: Pattern =
    LazyLock::new(|| Regex::new(r"(?i)^(?:(?:recent|the\s+latest|latest|new|some|any|the)\s+)+").ok());

pub(super) fn understand(text: &str, lower: &str) -> Option<Understood> {
    if !is_match(&TOPIC_WORDS, lower) {
        return None;
    }
    let topic = first_topic(&QUERIES, text, tidy);
    Some(match topic {
        Some(query) => {
            Understood::Call { tool: TOOL, arguments: json!({ "query": query, "max_results": MAX_RESULTS }) }
        }
        None => Understood::NeedMore { tool: TOOL, ask: "What topic should I search the literature for?".into() },
    })
}

fn tidy(topic: &str) -> String {
    let mut topic = topic.trim().to_string();
    if let Some(re) = TRAILER.as_ref() {
        topic = re.replace(&topic, "").into_owned();
    }
    if let Some(re) = LEADER.as_ref() {
        topic = re.replace(&topic, "").into_owned();
    }
    clip(topic.trim(), MAX_QUERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> String {
        match understand(text, &text.to_lowercase()) {
            Some(Understood::Call { tool, arguments }) => {
                assert_eq!(tool, TOOL);
                assert_eq!(arguments["max_results"], 5);
                arguments["query"].as_str().expect("query").to_string()
            }
            other => panic!("not a search: {other:?}"),
        }
    }

    #[test]
    fn all_patterns_compile() {
        assert!(TOPIC_WORDS.is_some() && TRAILER.is_some() && LEADER.is_some());
        assert!(QUERIES.iter().all(|pattern| pattern.is_some()));
    }

    #[test]
    fn topics_are_extracted() {
        assert_eq!(query("Find recent PubMed articles on lactate clearance in sepsis."), "lactate clearance in sepsis");
        assert_eq!(query("search pubmed for sepsis lactate"), "sepsis lactate");
        assert_eq!(query("Are there studies on beta blockers in heart failure?"), "beta blockers in heart failure");
        assert_eq!(query("Search for the latest apixaban trials please"), "apixaban trials");
        assert_eq!(query("look up metformin in the literature"), "metformin");
        assert_eq!(query("PubMed: statins and dementia"), "statins and dementia");
    }

    #[test]
    fn a_search_without_topic_asks_for_one() {
        let found = understand("Search PubMed", "search pubmed");
        assert!(matches!(found, Some(Understood::NeedMore { tool: TOOL, .. })), "{found:?}");
        assert!(understand("good morning", "good morning").is_none());
    }
}
