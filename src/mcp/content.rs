//! An MCP `CallToolResult` turned into what the model gets: the text content, bounded so one
//! `function_call_output` stays under 32 KiB (TOOLS.md) once serialised, with `truncated` when cut; other content
//! (images, audio, embedded or linked resources) summarised by type and size, never passed on raw;
//! `isError` results become [`ToolError::Reported`] failures (code `backend_error`) whose
//! bounded server text goes to the model only, screened like a result; the client is told a fixed
//! sentence (CONTRACT §4: no upstream bodies).
//!
//! Blocks are read through their JSON form (`type` plus fields, as on the wire) rather than rmcp's
//! Rust enums, which are `non_exhaustive` and grow with each protocol revision: an unknown block
//! is summarised by its type like any other non-text content.

use rmcp::model::CallToolResult;
use serde_json::{Map, Value, json};

use crate::tools::text::MAX_RESULT_BYTES;
use crate::tools::{ToolError, ToolOutput};

/// Text passed to the model per call, in bytes (the rest is cut, `truncated: true`).
const MAX_TEXT_BYTES: usize = 24 * 1024;
/// Structured content is passed on only when it is this small once serialised.
const MAX_STRUCTURED_BYTES: usize = 4 * 1024;
/// Characters of an `isError` text passed on.
const MAX_ERROR_CHARS: usize = 500;
/// Non-text blocks listed at most.
const MAX_SUMMARIES: usize = 16;

/// The model-facing result of an MCP call.
pub(super) fn to_output(result: CallToolResult) -> Result<ToolOutput, ToolError> {
    let blocks: Vec<Value> = result.content.iter().filter_map(|b| serde_json::to_value(b).ok()).collect();
    if result.is_error == Some(true) {
        let text = texts(&blocks).collect::<Vec<_>>().join("\n");
        let text = if text.trim().is_empty() { "The tool reported an error.".to_string() } else { text };
        return Err(ToolError::Reported(text.chars().take(MAX_ERROR_CHARS).collect()));
    }
    let mut text = String::new();
    let mut truncated = false;
    for piece in texts(&blocks) {
        if !text.is_empty() {
            text.push('\n');
        }
        truncated |= push_bounded(&mut text, piece, MAX_TEXT_BYTES);
    }
    let others: Vec<Value> = blocks.iter().filter(|b| b["type"] != "text").map(summarise).collect();
    truncated |= others.len() > MAX_SUMMARIES;
    let mut out = Map::new();
    out.insert("text".into(), Value::String(text));
    if let Some(structured) = result.structured_content {
        match serde_json::to_string(&structured) {
            Ok(s) if s.len() <= MAX_STRUCTURED_BYTES => {
                out.insert("structured".into(), structured);
            }
            _ => truncated = true,
        }
    }
    if !others.is_empty() {
        out.insert("other_content".into(), Value::Array(others.into_iter().take(MAX_SUMMARIES).collect()));
    }
    out.insert("truncated".into(), Value::Bool(truncated));
    fit(&mut out);
    Ok(ToolOutput::new(Value::Object(out)))
}

/// Cut the text further (on a character boundary) until the result, serialised as the model gets
/// it, takes at most [`MAX_RESULT_BYTES`]: JSON escaping doubles a quote, a backslash or a newline
/// and makes another control character six bytes, so [`MAX_TEXT_BYTES`] of text can serialise to
/// far more than TOOLS.md's 32 KiB. Should even no text be too much, the structured part and then
/// the summaries go too.
fn fit(out: &mut Map<String, Value>) {
    let size = |out: &Map<String, Value>| serde_json::to_string(out).map_or(usize::MAX, |s| s.len());
    if size(out) <= MAX_RESULT_BYTES {
        return;
    }
    out.insert("truncated".into(), Value::Bool(true));
    let text = out.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
    let ends: Vec<usize> = text.char_indices().map(|(i, _)| i).chain([text.len()]).collect();
    // The escaped size grows with the prefix kept, so the prefixes that fit come first.
    let fitting = ends.partition_point(|&end| {
        out.insert("text".into(), Value::String(text[..end].to_string()));
        size(out) <= MAX_RESULT_BYTES
    });
    let end = fitting.checked_sub(1).map_or(0, |last| ends[last]);
    out.insert("text".into(), Value::String(text[..end].to_string()));
    for part in ["structured", "other_content"] {
        if size(out) <= MAX_RESULT_BYTES {
            break;
        }
        out.remove(part);
    }
}

fn texts(blocks: &[Value]) -> impl Iterator<Item = &str> {
    blocks.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str())
}

/// Append `piece` to `text` up to `limit` bytes (on a character boundary); true when cut.
fn push_bounded(text: &mut String, piece: &str, limit: usize) -> bool {
    let room = limit.saturating_sub(text.len());
    if piece.len() <= room {
        text.push_str(piece);
        return false;
    }
    let mut cut = room;
    while !piece.is_char_boundary(cut) {
        cut -= 1;
    }
    text.push_str(&piece[..cut]);
    true
}

/// `{type, mime_type, bytes}` for a non-text block (base64 payloads counted as decoded bytes).
fn summarise(block: &Value) -> Value {
    let kind = block["type"].as_str().unwrap_or("unknown");
    let (mime, size) = match kind {
        "image" | "audio" => (block["mimeType"].as_str(), block["data"].as_str().map(base64_len)),
        "resource" => {
            let r = &block["resource"];
            let size = r["text"].as_str().map(str::len).or_else(|| r["blob"].as_str().map(base64_len));
            (r["mimeType"].as_str(), size)
        }
        "resource_link" => (block["mimeType"].as_str(), block["size"].as_u64().map(|s| s as usize)),
        _ => (None, None),
    };
    json!({"type": kind, "mime_type": mime, "bytes": size})
}

fn base64_len(data: &str) -> usize {
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3).saturating_sub(padding)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ContentBlock as Content, ImageContent};

    fn result(content: Vec<rmcp::model::ContentBlock>, is_error: bool) -> CallToolResult {
        if is_error { CallToolResult::error(content) } else { CallToolResult::success(content) }
    }

    #[test]
    fn text_is_joined_and_bounded() {
        let long = "x".repeat(MAX_TEXT_BYTES + 10);
        let out = to_output(result(vec![Content::text("first"), Content::text(long)], false)).unwrap();
        let text = out.result["text"].as_str().unwrap();
        assert!(text.starts_with("first\nxxx"));
        assert_eq!(text.len(), MAX_TEXT_BYTES);
        assert_eq!(out.result["truncated"], true);
    }

    #[test]
    fn images_are_summarised_not_passed_on() {
        let image = rmcp::model::ContentBlock::Image(ImageContent::new("aGVsbG8=", "image/png"));
        let out = to_output(result(vec![Content::text("ok"), image], false)).unwrap();
        assert_eq!(out.result["other_content"], json!([{"type": "image", "mime_type": "image/png", "bytes": 5}]));
        assert_eq!(out.result["truncated"], false);
        assert!(!out.result.to_string().contains("aGVsbG8"));
    }

    #[test]
    fn is_error_becomes_a_bounded_backend_error_the_client_never_reads() {
        let err = to_output(result(vec![Content::text("e".repeat(2000))], true)).unwrap_err();
        assert_eq!(err.code().as_str(), "backend_error", "CONTRACT §4's closed list has no tool_error");
        assert_eq!(err.tool_text().map(|t| t.chars().count()), Some(MAX_ERROR_CHARS));
        assert!(err.model_message().ends_with(&"e".repeat(MAX_ERROR_CHARS)));
        assert!(!err.public_message().contains("eee"), "{}", err.public_message());

        let err = to_output(result(vec![Content::text("Patient Zebulon Quixote: no such order")], true)).unwrap_err();
        assert_eq!(err.public_message(), "The tool reported an error.");
        assert!(err.model_message().contains("Zebulon Quixote"));
        assert!(!err.to_string().contains("Zebulon"), "Display (logs) carries no server text");
    }

    /// The bound is on the result as the model gets it: JSON-escaped, where a quote, a backslash or
    /// a newline takes two bytes and another control character six.
    #[test]
    fn the_serialised_result_fits_however_the_text_escapes() {
        let structured = json!({"rows": "\"".repeat(MAX_STRUCTURED_BYTES / 2 - 20)});
        for piece in ["\"", "\\", "\n", "\u{1}", "é\"", "x"] {
            let text = piece.repeat(30_000);
            let mut answer = result(vec![Content::text(text.clone())], false);
            answer.structured_content = Some(structured.clone());
            let out = to_output(answer).unwrap();
            let size = serde_json::to_string(&out.result).unwrap().len();
            assert!(size <= MAX_RESULT_BYTES, "{piece:?}: {size} bytes");
            assert_eq!(out.result["truncated"], true, "{piece:?}");
            let kept = out.result["text"].as_str().unwrap();
            assert!(text.starts_with(kept) && !kept.is_empty(), "{piece:?}: a prefix of the text is kept");
            assert!(out.result.get("structured").is_some(), "{piece:?}: the small structured part stays");
        }
        // Short text is not cut.
        let out = to_output(result(vec![Content::text("\"".repeat(100))], false)).unwrap();
        assert_eq!(out.result["truncated"], false);
        assert_eq!(out.result["text"].as_str().unwrap().len(), 100);
    }

    #[test]
    fn cuts_on_a_character_boundary() {
        let mut text = String::new();
        assert!(push_bounded(&mut text, "ééé", 3));
        assert_eq!(text, "é");
    }
}
