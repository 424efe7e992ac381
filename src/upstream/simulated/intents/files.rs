//! Document requests: finding a file ("find the diabetes protocol", "search my files for the
//! referral letter template", "documents that mention insulin") and reading the one just found
//! ("read it", "open the second one", "read the pdf"). Also how the file tools' results are read
//! out, so a spoken answer names the files and starts reading the text.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use super::{Pattern, Understood, captures, clip, group, is_match};

const SEARCH: &str = "search_nextcloud_files";
const RETRIEVE: &str = "retrieve_nextcloud_file";
/// Longest query taken from the request.
const MAX_QUERY: usize = 120;
/// Files named and characters read out in a spoken answer.
const MAX_NAMED: usize = 3;
const MAX_READ_ALOUD: usize = 300;

/// A request about documents: a finding verb and a document word, or "my files".
static FIND: Pattern = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(?:find|search|look\s+for|locate|pull\s+up|show\s+me|get\s+me|where\s+is|fetch)\b.*\b(?:protocols?|documents?|files?|letters?|templates?|forms?|pdfs?|docx|policy|policies|sops?|leaflets?|handbooks?|guides?|lists?|spreadsheets?)\b",
    )
    .ok()
});
/// Literature words: such a request is for PubMed, not for the user's files.
static LITERATURE: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:pubmed|studies|study|articles?|papers?|literature|research|trials?)\b")
        .ok()
});
/// "documents that mention X", "files containing X", "files about X": a content search for X.
static MENTIONING: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:that\s+)?(?:mention(?:s|ing)?|contain(?:s|ing)?|with\s+the\s+words?|talk(?:s|ing)?\s+about)\s+(.+)").ok()
});
/// The topic after the verb: "find [me] [the|my|our] X".
static TOPIC: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:find|search(?:\s+(?:my|our|the)\s+(?:files|documents)\s+for)?|look\s+for|locate|pull\s+up|show\s+me|get\s+me|where\s+is|fetch)\s+(?:me\s+)?(.+)").ok()
});
/// Words that say what kind of thing, not which one ("file", "the", "in nextcloud", "please").
static FILLER: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:the|a|an|my|our|me|please|files?|documents?|in\s+(?:nextcloud|my\s+files|the\s+files)|on\s+nextcloud|for\s+me|pdf|docx|word)\b").ok()
});
static READ: Pattern = LazyLock::new(|| {
    Regex::new(r"(?i)^\s*(?:please\s+)?(?:read|open|show|what\s+does)\b.*?(?:\b(it|that|this|one|first|second|third|pdf|docx|file|document|protocol|letter|template|guide|list)\b|$)").ok()
});

/// "Find the diabetes protocol" → `search_nextcloud_files {query, [file_type], [include_content]}`.
pub(super) fn understand_search(text: &str, lower: &str) -> Option<Understood> {
    if !is_match(&FIND, lower) || is_match(&LITERATURE, lower) {
        return None;
    }
    let mut arguments = json!({});
    if let Some(topic) = captures(&MENTIONING, text)
        .as_ref()
        .and_then(|caps| group(caps, 1))
    {
        arguments["include_content"] = json!(true);
        arguments["query"] = json!(clean(topic));
    } else if let Some(topic) = captures(&TOPIC, text)
        .as_ref()
        .and_then(|caps| group(caps, 1))
    {
        arguments["query"] = json!(clean(topic));
    }
    if lower.contains("pdf") {
        arguments["file_type"] = json!("pdf");
    } else if lower.contains("docx") || lower.contains("word document") {
        arguments["file_type"] = json!("docx");
    }
    match arguments["query"].as_str() {
        Some(query) if !query.is_empty() => Some(Understood::Call {
            tool: SEARCH,
            arguments,
        }),
        _ => Some(Understood::NeedMore {
            tool: SEARCH,
            ask: "Which document should I look for? For example: find the diabetes protocol."
                .into(),
        }),
    }
}

/// "Read it" after a search → `retrieve_nextcloud_file` with a `file_id` from `last_search` (the
/// latest `search_nextcloud_files` result in the conversation): the one named by position, type or
/// a word of its name, else the first.
pub(crate) fn understand_read(text: &str, last_search: Option<&Value>) -> Option<Understood> {
    let lower = text.to_lowercase();
    let caps = captures(&READ, &lower)?;
    let files = last_search
        .and_then(|result| result["files"].as_array())
        .filter(|files| !files.is_empty());
    let Some(files) = files else {
        return Some(Understood::NeedMore {
            tool: RETRIEVE,
            ask: "Which file should I read? Ask me to find it first, for example: find the diabetes protocol.".into(),
        });
    };
    let position = match group(&caps, 1) {
        Some("second") => 1,
        Some("third") => 2,
        _ => 0,
    };
    let named = lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| {
            word.len() > 2
                && !matches!(
                    *word,
                    "read" | "open" | "show" | "the" | "what" | "does" | "say"
                )
        })
        .find_map(|word| {
            files.iter().find(|file| {
                file["name"]
                    .as_str()
                    .is_some_and(|n| n.to_lowercase().contains(word))
            })
        });
    let file = named
        .or_else(|| files.get(position))
        .or_else(|| files.first())?;
    let file_id = file["file_id"].as_str()?;
    Some(Understood::Call {
        tool: RETRIEVE,
        arguments: json!({ "file_id": file_id }),
    })
}

fn clean(topic: &str) -> String {
    let topic = match FILLER.as_ref() {
        Some(re) => re.replace_all(topic, " ").into_owned(),
        None => topic.to_string(),
    };
    let words: Vec<&str> = topic
        .split(|c: char| c.is_whitespace() || "?!.,;:\"'".contains(c))
        .filter(|w| !w.is_empty())
        .collect();
    clip(&words.join(" "), MAX_QUERY)
}

/// A search result read out: how many files, the first few names, and how to go on.
pub(crate) fn spoken_search(result: &Value) -> String {
    let files = result["files"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    let total = result["total_count"].as_u64().unwrap_or(files.len() as u64);
    if files.is_empty() {
        return "I found no matching files.".into();
    }
    let names: Vec<String> = files
        .iter()
        .take(MAX_NAMED)
        .filter_map(|f| f["name"].as_str())
        .map(|n| clip(n, 80))
        .collect();
    let noun = if total == 1 { "file" } else { "files" };
    format!(
        "I found {total} {noun}: {}. Say \"read it\" and I will read the first one.",
        names.join("; ")
    )
}

/// A retrieved file read out: its name and the start of its text.
pub(crate) fn spoken_file(result: &Value) -> String {
    let name = clip(result["name"].as_str().unwrap_or("the file"), 80);
    match result["content"]
        .as_str()
        .map(|text| text.split_whitespace().collect::<Vec<_>>().join(" "))
    {
        Some(text) if !text.is_empty() => format!("{name} begins: {}", clip(&text, MAX_READ_ALOUD)),
        _ => format!("I opened {name}, but it has no text I can read."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(text: &str) -> Option<Understood> {
        understand_search(text, &text.to_lowercase())
    }

    fn call(tool: &'static str, arguments: Value) -> Option<Understood> {
        Some(Understood::Call { tool, arguments })
    }

    #[test]
    fn finding_documents() {
        assert_eq!(
            search("Find the diabetes protocol"),
            call(SEARCH, json!({"query": "diabetes protocol"}))
        );
        assert_eq!(
            search("Search my files for the referral letter template please"),
            call(SEARCH, json!({"query": "referral letter template"}))
        );
        assert_eq!(
            search("find the diabetes protocol pdf"),
            call(
                SEARCH,
                json!({"query": "diabetes protocol", "file_type": "pdf"})
            )
        );
        assert_eq!(
            search("Find documents that mention insulin glargine"),
            call(
                SEARCH,
                json!({"query": "insulin glargine", "include_content": true})
            )
        );
        assert!(matches!(
            search("find the file"),
            Some(Understood::NeedMore { .. })
        ));
    }

    #[test]
    fn literature_and_chit_chat_are_not_file_requests() {
        assert_eq!(search("Find studies on diabetes protocols"), None);
        assert_eq!(search("search PubMed for sepsis"), None);
        assert_eq!(search("What is on my calendar tomorrow?"), None);
        assert_eq!(understand_read("Hello there", None), None);
    }

    #[test]
    fn reading_what_was_found() {
        let found = json!({"files": [
            {"file_id": "f1.a", "name": "diabetes-management-protocol.md"},
            {"file_id": "f1.b", "name": "diabetes-management-protocol.pdf"},
        ]});
        assert_eq!(
            understand_read("Read it", Some(&found)),
            call(RETRIEVE, json!({"file_id": "f1.a"}))
        );
        assert_eq!(
            understand_read("open the second one", Some(&found)),
            call(RETRIEVE, json!({"file_id": "f1.b"}))
        );
        assert_eq!(
            understand_read("read the pdf", Some(&found)),
            call(RETRIEVE, json!({"file_id": "f1.b"}))
        );
        assert!(matches!(
            understand_read("read it", None),
            Some(Understood::NeedMore { .. })
        ));
    }

    #[test]
    fn results_are_read_out() {
        let found = json!({"files": [{"name": "a.pdf"}, {"name": "b.md"}], "total_count": 2});
        assert_eq!(
            spoken_search(&found),
            "I found 2 files: a.pdf; b.md. Say \"read it\" and I will read the first one."
        );
        assert_eq!(
            spoken_search(&json!({"files": [], "total_count": 0})),
            "I found no matching files."
        );
        let file = json!({"name": "a.md", "content": "# Title\n\nLine  two"});
        assert_eq!(spoken_file(&file), "a.md begins: # Title Line two");
        assert_eq!(
            spoken_file(&json!({"name": "x.png", "content": null})),
            "I opened x.png, but it has no text I can read."
        );
    }
}
