//! Guideline requests for `search_medical_guidelines`: "what do the guidelines say about X",
//! "USPSTF recommendations on X", "CDC guidance for X", "X guidelines". The query is the topic;
//! a named publisher (CDC, USPSTF, NHLBI…) becomes the `guideline_source` filter.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value, json};

use super::{Pattern, Understood, clip, first_topic, is_match};

const TOOL: &str = "search_medical_guidelines";
/// Guidelines asked for: enough to answer, few enough to read out.
const MAX_RESULTS: u32 = 5;
/// Longest query taken from the request (the tool allows 300 characters).
const MAX_QUERY: usize = 200;

static TOPIC_WORDS: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\bguidelines?\b|\bguidance\b|\buspstf\b|\brecommendations?\s+(?:on|for|about|regarding)\b").ok()
});
/// Ordered from most to least specific; the first that captures a non-empty topic wins.
static QUERIES: [Pattern; 3] = [
    LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:guidelines?|guidance|recommendations?)\s+(?:says?\s+|recommends?\s+)?(?:on|about|for|regarding|concerning|in)\s+(.+)").ok()
    }),
    LazyLock::new(|| Regex::new(r"(?i)\b(?:say|says|recommend|recommends)\s+(?:about|on|for|regarding)\s+(.+)").ok()),
    LazyLock::new(|| {
        Regex::new(
            r"(?i)^(?:(?:find|show|get|search|look\s+up)\s+(?:me\s+)?(?:the\s+)?)?(.+?)\s+(?:guidelines?|guidance)\b",
        )
        .ok()
    }),
];
/// Publishers the shipped corpus has, as the filter word and the pattern that names them.
static PUBLISHERS: [(&str, Pattern); 7] = [
    ("uspstf", LazyLock::new(|| Regex::new(r"(?i)\buspstf\b|preventive services task force").ok())),
    ("acip", LazyLock::new(|| Regex::new(r"(?i)\bacip\b").ok())),
    ("cdc", LazyLock::new(|| Regex::new(r"(?i)\bcdc\b").ok())),
    ("nhlbi", LazyLock::new(|| Regex::new(r"(?i)\bnhlbi\b").ok())),
    ("niddk", LazyLock::new(|| Regex::new(r"(?i)\bniddk\b").ok())),
    ("ahrq", LazyLock::new(|| Regex::new(r"(?i)\bahrq\b").ok())),
    ("fda", LazyLock::new(|| Regex::new(r"(?i)\bfda\b").ok())),
];
/// Publisher names, framing and filler removed from a topic.
static NOISE: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:the\s+)?(?:uspstf|acip|cdc|nhlbi|niddk|ahrq|fda|preventive services task force|current|latest|clinical|practice)\b|\b(?:guidelines?|guidance|recommendations?)\b|\bplease\b|[?.!,;:]+").ok()
});
static SPACES: Pattern = LazyLock::new(|| Regex::new(r"\s+").ok());
/// What is left of a topic that names nothing ("what", "say").
static EMPTY_TOPIC: Pattern = LazyLock::new(|| {
    Regex::new(
        r"(?i)^(?:(?:what|do|does|the|say|says|are|is|there|any|about|on|for|me|show|find|search|look|up|get)\s*)*$",
    )
    .ok()
});

pub(super) fn understand(text: &str, lower: &str) -> Option<Understood> {
    if !is_match(&TOPIC_WORDS, lower) {
        return None;
    }
    let topic = first_topic(&QUERIES, text, tidy);
    let Some(query) = topic else {
        return Some(Understood::NeedMore {
            tool: TOOL,
            ask: "Which condition or topic should I look up in the guidelines?".into(),
        });
    };
    let mut arguments = Map::new();
    arguments.insert("query".into(), json!(query));
    arguments.insert("max_results".into(), json!(MAX_RESULTS));
    if let Some((name, _)) = PUBLISHERS.iter().find(|(_, pattern)| is_match(pattern, lower)) {
        arguments.insert("guideline_source".into(), json!(name));
    }
    Some(Understood::Call { tool: TOOL, arguments: Value::Object(arguments) })
}

fn tidy(topic: &str) -> String {
    let mut topic = topic.to_string();
    if let Some(re) = NOISE.as_ref() {
        topic = re.replace_all(&topic, "").into_owned();
    }
    if let Some(re) = SPACES.as_ref() {
        topic = re.replace_all(&topic, " ").into_owned();
    }
    let topic = topic.trim();
    if is_match(&EMPTY_TOPIC, topic) {
        return String::new();
    }
    clip(topic, MAX_QUERY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arguments(text: &str) -> Value {
        match understand(text, &text.to_lowercase()) {
            Some(Understood::Call { tool, arguments }) => {
                assert_eq!(tool, TOOL);
                assert_eq!(arguments["max_results"], 5);
                arguments
            }
            other => panic!("not a guideline search: {other:?}"),
        }
    }

    #[test]
    fn all_patterns_compile() {
        assert!(TOPIC_WORDS.is_some() && NOISE.is_some() && SPACES.is_some() && EMPTY_TOPIC.is_some());
        assert!(QUERIES.iter().all(|pattern| pattern.is_some()));
        assert!(PUBLISHERS.iter().all(|(_, pattern)| pattern.is_some()));
    }

    #[test]
    fn topics_are_extracted() {
        let query = |text: &str| arguments(text)["query"].as_str().expect("query").to_string();
        assert_eq!(
            query("What do the guidelines say about colorectal cancer screening?"),
            "colorectal cancer screening"
        );
        assert_eq!(
            query("guidelines for anticoagulation in atrial fibrillation"),
            "anticoagulation in atrial fibrillation"
        );
        assert_eq!(query("What is the current guidance on lung cancer screening, please"), "lung cancer screening");
        assert_eq!(query("Show me the hypertension guidelines"), "hypertension");
        assert_eq!(
            query("recommendations for pneumococcal vaccination in adults"),
            "pneumococcal vaccination in adults"
        );
    }

    #[test]
    fn a_named_publisher_becomes_the_source_filter() {
        let found = arguments("What does the USPSTF recommend for osteoporosis screening?");
        assert_eq!(found, json!({"query": "osteoporosis screening", "max_results": 5, "guideline_source": "uspstf"}));
        let found = arguments("CDC guidelines on opioid prescribing");
        assert_eq!(found["guideline_source"], "cdc");
        assert_eq!(found["query"], "opioid prescribing");
        assert!(arguments("guidelines on sepsis").get("guideline_source").is_none());
    }

    #[test]
    fn a_request_without_topic_asks_for_one() {
        for text in ["What do the guidelines say?", "Search the guidelines", "guidelines"] {
            let found = understand(text, &text.to_lowercase());
            assert!(matches!(found, Some(Understood::NeedMore { tool: TOOL, .. })), "{text}: {found:?}");
        }
        assert!(understand("find PubMed articles on sepsis", "find pubmed articles on sepsis").is_none());
    }

    #[test]
    fn guideline_requests_are_not_taken_for_literature_searches() {
        let found = super::super::understand(
            "Search for guidelines on hepatitis C screening",
            chrono::NaiveDate::from_ymd_opt(2026, 3, 10).expect("date"),
        );
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].tool(), TOOL);
    }
}
