//! Ranking a backend's candidates for `search_nextcloud_files`: by how many query words the file's
//! path has (and, with `include_content`, its text), names before contents, newest first; and
//! whether a bound left files out, so the answer does not read as complete when it is not. A
//! content search reads only while the call has time left ([`http::time_left`]): the files it could
//! not read in time are left out as at any other bound, and the names found are answered rather
//! than lost with the whole call to a `timeout`.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::StreamExt;

use super::FilesError;
use super::backend::{DocKind, FileEntry, FilesBackend};
use super::extract::extract_text;
use crate::tools::http;

/// Query words looked at (a spoken query is short; a pasted paragraph is not a search).
const MAX_WORDS: usize = 16;
/// With `include_content`: files read, the largest file read, and reads at a time.
pub const CONTENT_SEARCH_MAX_FILES: usize = 40;
pub const CONTENT_SEARCH_MAX_BYTES: u64 = 4 * 1024 * 1024;
const CONTENT_READS_AT_ONCE: usize = 4;
/// The longest one file's read and extraction may take: the PDF worker's own wall time.
const CONTENT_READ_MAX: Duration = Duration::from_secs(25);
/// Of the call's time, this much is kept for ranking and answering: no read runs into it.
const CONTENT_READ_RESERVE: Duration = Duration::from_secs(1);
/// No read is started with less than this to run: it would hardly finish.
const CONTENT_READ_MIN: Duration = Duration::from_secs(1);

/// What became of one file's content read.
enum ContentRead {
    /// Its text (`None`: a format without one).
    Text(Option<String>),
    /// Not started for lack of time, or cut off (or the PDF worker's time ran out): its text may
    /// match, so the answer is incomplete.
    OutOfTime,
    /// Damaged, refused or gone: searched as a file without text.
    Failed,
}

/// A search as the tool asked for it.
#[derive(Debug, Clone)]
pub struct SearchRequest {
    pub query: String,
    /// `pdf`, `.docx`, `txt`, or a MIME type; `None` = any type.
    pub file_type: Option<String>,
    pub max_results: usize,
    pub include_content: bool,
    /// `backends.files.max_file_bytes`: a content search never reads more than this per file.
    pub max_file_bytes: u64,
}

/// What a search found.
#[derive(Debug)]
pub struct Found {
    /// The matching files, best first, at most `max_results`.
    pub files: Vec<FileEntry>,
    /// How many matched in all, of the files looked at.
    pub total: usize,
    /// A bound (of the listing, of the files a content search reads, or of the call's time for
    /// reading them) left files out: there may be more matches than `total`.
    pub truncated: bool,
}

/// The matching files, best first, at most `max_results`, how many matched in all, and whether a
/// bound left files out.
pub async fn search(backend: &dyn FilesBackend, request: &SearchRequest) -> Result<Found, FilesError> {
    let words = query_words(&request.query);
    let listed = backend.candidates(&words, request.include_content).await?;
    let mut truncated = listed.truncated;
    let mut scored: Vec<(usize, usize, FileEntry)> = listed
        .files
        .into_iter()
        .filter(|entry| {
            request
                .file_type
                .as_deref()
                .is_none_or(|t| type_matches(entry, t))
        })
        .map(|entry| {
            let found = found_in(&entry.path.display().to_lowercase(), &words);
            (found.len(), found.len(), entry)
        })
        .collect();
    if request.include_content && !words.is_empty() {
        let limit = request.max_file_bytes.min(CONTENT_SEARCH_MAX_BYTES);
        let readable: Vec<usize> = (0..scored.len())
            .filter(|&i| scored[i].0 < words.len() && scored[i].2.kind() != DocKind::Other)
            .collect();
        let mut to_read: Vec<usize> = readable
            .iter()
            .copied()
            .filter(|&i| scored[i].2.size <= limit)
            .take(CONTENT_SEARCH_MAX_FILES + 1)
            .collect();
        // A file too large to read here may match by its text too: the answer is not complete.
        truncated |= readable.iter().any(|&i| scored[i].2.size > limit);
        // Files past the bound are not read: their text may match too.
        if to_read.len() > CONTENT_SEARCH_MAX_FILES {
            truncated = true;
            to_read.truncate(CONTENT_SEARCH_MAX_FILES);
        }
        let reads = futures::stream::iter(to_read)
            .map(|i| {
                let path = scored[i].2.path.clone();
                let kind = scored[i].2.kind();
                async move {
                    // Measured when the read starts (a slot is free), not when it was queued; cut
                    // off by dropping it, which kills a PDF worker too.
                    let budget = http::time_left().map_or(CONTENT_READ_MAX, |left| {
                        left.saturating_sub(CONTENT_READ_RESERVE).min(CONTENT_READ_MAX)
                    });
                    if budget < CONTENT_READ_MIN {
                        return (i, ContentRead::OutOfTime);
                    }
                    let read = async {
                        let (_, bytes) = backend.read(&path, limit).await?;
                        extract_text(kind, bytes).await
                    };
                    let outcome = match tokio::time::timeout(budget, read).await {
                        Ok(Ok(text)) => ContentRead::Text(text),
                        // Busy: every PDF reader was taken (by other calls, or this one's other
                        // reads); the document may match, so the answer is not complete.
                        Ok(Err(FilesError::TooSlow | FilesError::Busy)) | Err(_) => ContentRead::OutOfTime,
                        Ok(Err(_)) => ContentRead::Failed,
                    };
                    (i, outcome)
                }
            })
            .buffer_unordered(CONTENT_READS_AT_ONCE)
            .collect::<Vec<_>>()
            .await;
        for (i, outcome) in reads {
            match outcome {
                ContentRead::Text(Some(text)) => {
                    let mut found = found_in(&scored[i].2.path.display().to_lowercase(), &words);
                    found.extend(found_in(&text.to_lowercase(), &words));
                    scored[i].0 = found.len();
                }
                ContentRead::OutOfTime => truncated = true,
                ContentRead::Text(None) | ContentRead::Failed => {}
            }
        }
    }
    scored.retain(|(score, _, _)| words.is_empty() || *score > 0);
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(b.1.cmp(&a.1))
            .then(b.2.modified.cmp(&a.2.modified))
            .then(a.2.path.cmp(&b.2.path))
    });
    let total = scored.len();
    Ok(Found {
        files: scored
            .into_iter()
            .take(request.max_results)
            .map(|(_, _, entry)| entry)
            .collect(),
        total,
        truncated,
    })
}

/// Lower-case words of two or more letters or digits (all of them when every word is shorter).
fn query_words(query: &str) -> Vec<String> {
    let all: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && *w != "*")
        .map(str::to_lowercase)
        .collect();
    let long: Vec<String> = all
        .iter()
        .filter(|w| w.chars().count() >= 2)
        .cloned()
        .collect();
    let mut words = if long.is_empty() { all } else { long };
    words.dedup();
    words.truncate(MAX_WORDS);
    words
}

fn found_in<'w>(haystack: &str, words: &'w [String]) -> BTreeSet<&'w str> {
    words
        .iter()
        .filter(|w| haystack.contains(w.as_str()))
        .map(String::as_str)
        .collect()
}

/// `pdf`, `.PDF`, `application/pdf`, `text` (any plain text) or `word` all name what they say.
fn type_matches(entry: &FileEntry, wanted: &str) -> bool {
    let wanted = wanted.trim().trim_start_matches('.').to_ascii_lowercase();
    let extension = entry.path.extension();
    let mime = entry
        .mime_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    wanted == extension
        || wanted == mime
        || match wanted.as_str() {
            "txt" | "text" => entry.kind() == DocKind::PlainText,
            "md" | "markdown" => entry.kind() == DocKind::Markdown,
            "html" | "htm" => entry.kind() == DocKind::Html,
            "word" | "doc" => entry.kind() == DocKind::Docx || extension == "doc",
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::files::file_id::RelPath;

    fn entry(path: &str, mime: &str) -> FileEntry {
        FileEntry {
            path: RelPath::parse(path).unwrap(),
            size: 1,
            modified: None,
            mime_type: mime.into(),
            url: String::new(),
        }
    }

    #[test]
    fn words_are_lower_case_and_bounded() {
        assert_eq!(
            query_words("Diabetes  protocol, v2"),
            ["diabetes", "protocol", "v2"]
        );
        assert_eq!(query_words("a b"), ["a", "b"]);
        assert!(query_words("*").is_empty());
        assert_eq!(query_words(&"word ".repeat(40)).len(), 1);
    }

    #[test]
    fn file_types_match_by_extension_mime_or_family() {
        let pdf = entry("/a/Protocol.PDF", "application/octet-stream");
        assert!(
            type_matches(&pdf, "pdf") && type_matches(&pdf, ".pdf") && !type_matches(&pdf, "docx")
        );
        let txt = entry("/notes", "text/plain");
        assert!(type_matches(&txt, "txt") && type_matches(&txt, "text/plain"));
        assert!(type_matches(&entry("/l.docx", ""), "word"));
    }
}
