//! Small text helpers for tool results: cutting long text to fit the 32 KiB a `function_call_output`
//! may take (TOOLS.md), and turning a search engine's HTML snippet into plain text (or only tidying
//! the whitespace of one that is plain text already).

/// What a tool's serialised result may take, so that one `function_call_output` stays under the
/// 32 KiB of TOOLS.md with room for the envelope around it. Tools cut each text field with
/// [`truncate`], then drop list items from the end until the result fits.
pub const MAX_RESULT_BYTES: usize = 30 * 1024;

/// Longest URL kept in a result or citation: a cut URL would point somewhere else, so a longer one
/// makes its item unusable instead.
pub const MAX_URL_BYTES: usize = 2048;

/// A search tool's output: `{key: [...], "total_count", "query"}` (`key` is the seed's name for
/// the list: `results`, `files`) with items (and their citations, when each has one) dropped from
/// the end until it serialises to at most [`MAX_RESULT_BYTES`], and `"truncated": true` when any
/// was dropped.
pub fn search_output(
    key: &str,
    mut results: Vec<serde_json::Value>,
    mut citations: Vec<super::Citation>,
    total: u64,
    query: &str,
) -> super::ToolOutput {
    let build = |results: &[serde_json::Value], cut: bool| {
        let mut result = serde_json::json!({key: results, "total_count": total, "query": query});
        if cut {
            result["truncated"] = serde_json::json!(true);
        }
        result
    };
    let mut result = build(&results, false);
    while result.to_string().len() > MAX_RESULT_BYTES && !results.is_empty() {
        results.pop();
        citations.pop();
        result = build(&results, true);
    }
    super::ToolOutput { result, citations }
}

/// At most `max` characters, cut at a word boundary with "…"; and whether anything was cut.
pub fn truncate(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_string(), false);
    }
    let cut: String = text.chars().take(max).collect();
    let cut = match cut.rfind(char::is_whitespace) {
        Some(space) if space > max / 2 => &cut[..space],
        _ => cut.as_str(),
    };
    (format!("{}…", cut.trim_end()), true)
}

/// Plain text from a snippet with inline markup (`<strong>`, `<b>`) and the common entities;
/// whitespace runs collapsed.
pub fn plain(snippet: &str) -> String {
    let mut out = String::with_capacity(snippet.len());
    let mut in_tag = false;
    for c in snippet.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => in_tag = false,
            _ if !in_tag => out.push(c),
            _ => {}
        }
    }
    let decoded = out
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&amp;", "&");
    collapse_whitespace(&decoded)
}

/// Text that is already plain (Google's `title` and `snippet`) with its whitespace runs collapsed:
/// a "<" in it is a less-than sign ("eGFR <30"), not the start of markup, so nothing else changes.
pub fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_whole_words() {
        assert_eq!(
            truncate("short text", 20),
            ("short text".to_string(), false)
        );
        assert_eq!(
            truncate("alpha beta gamma delta", 13),
            ("alpha beta…".to_string(), true)
        );
    }

    #[test]
    fn snippets_lose_markup_and_entities() {
        assert_eq!(
            plain("The <strong>Semantic Kernel</strong> &amp; more&#x27;s\n  text"),
            "The Semantic Kernel & more's text"
        );
    }
}
