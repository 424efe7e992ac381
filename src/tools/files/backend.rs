//! The `FilesBackend` trait the tools talk to, the backend-neutral [`FileEntry`], and the kinds of
//! document voxgate can turn into text ([`DocKind`]).

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::FilesError;
use super::file_id::RelPath;
use crate::tools::http;

/// How far a listing goes: deeper folders and further entries are not looked at (a search over a
/// whole Nextcloud account must stay inside the tool's 30 s budget).
pub const MAX_WALK_DEPTH: usize = 8;
pub const MAX_WALK_ENTRIES: usize = 5000;
/// Folders listed in one walk at most, the root among them.
pub const MAX_WALK_FOLDERS: usize = 300;

/// Of the call's time left when a walk starts, this much (at most a quarter of it) is kept for
/// ranking and answering: the walk does not run into it.
const WALK_RESERVE: Duration = Duration::from_secs(1);

/// When a walk must stop and answer what it found (`truncated`) rather than be cut off with the
/// call and lose it all: `None` outside a tool call (no deadline to keep). A content search's walk
/// takes at most half of the time, the rest is for reading the files it found.
pub(super) fn walk_deadline(by_content: bool) -> Option<Instant> {
    let left = http::time_left()?;
    let budget = left.saturating_sub(WALK_RESERVE.min(left / 4));
    let budget = if by_content { budget / 2 } else { budget };
    Some(Instant::now() + budget)
}

/// One file as the tools see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub path: RelPath,
    pub size: u64,
    pub modified: Option<DateTime<Utc>>,
    /// From the server (`getcontenttype`) or, failing that, from the extension.
    pub mime_type: String,
    /// WebDAV: the file's URL; local: its path under the root (there is no server).
    pub url: String,
}

impl FileEntry {
    pub fn kind(&self) -> DocKind {
        DocKind::of(&self.path.extension(), &self.mime_type)
    }
}

/// What a backend listed for a search.
#[derive(Debug, Default)]
pub struct Candidates {
    pub files: Vec<FileEntry>,
    /// A bound of the listing (the walk's depth, folders or entries; a server search's results or
    /// folders) left files out: the search's answer must not read as complete.
    pub truncated: bool,
}

/// Whether a backend could be reached the last time it was asked (for `/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not asked yet, or nothing to ask (a local folder).
    Unknown,
    Up,
    Unreachable,
    CredentialsRefused,
}

/// A file store. Shared by every session (`Arc<dyn FilesBackend>`).
#[async_trait::async_trait]
pub trait FilesBackend: Send + Sync + 'static {
    /// Files that may match `words` (the lower-case words of the query): every file of a bounded
    /// walk, or the server's own name search where it has one and the text of files will not be
    /// searched (`by_content` false), and whether a bound cut the listing. Ranking happens later.
    async fn candidates(&self, words: &[String], by_content: bool) -> Result<Candidates, FilesError>;

    /// One file's metadata and up to `max_bytes` of its content; a larger file is refused with
    /// [`FilesError::TooLarge`] before more than `max_bytes` are read.
    async fn read(
        &self,
        path: &RelPath,
        max_bytes: u64,
    ) -> Result<(FileEntry, Vec<u8>), FilesError>;

    fn health(&self) -> Health {
        Health::Unknown
    }
}

/// The document formats text extraction knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    PlainText,
    Markdown,
    Csv,
    Html,
    Pdf,
    Docx,
    /// Anything else: listed, never read as text.
    Other,
}

impl DocKind {
    /// From the extension first (servers often say `application/octet-stream`), then the MIME type.
    pub fn of(extension: &str, mime_type: &str) -> DocKind {
        match extension {
            "txt" | "text" | "log" => DocKind::PlainText,
            "md" | "markdown" => DocKind::Markdown,
            "csv" | "tsv" => DocKind::Csv,
            "html" | "htm" | "xhtml" => DocKind::Html,
            "pdf" => DocKind::Pdf,
            "docx" => DocKind::Docx,
            _ => match mime_type.split(';').next().unwrap_or_default().trim() {
                "text/plain" => DocKind::PlainText,
                "text/markdown" => DocKind::Markdown,
                "text/csv" => DocKind::Csv,
                "text/html" | "application/xhtml+xml" => DocKind::Html,
                "application/pdf" => DocKind::Pdf,
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document" => {
                    DocKind::Docx
                }
                _ => DocKind::Other,
            },
        }
    }

    /// Text formats: returned as they are when the caller asks for no extraction.
    pub fn is_text(self) -> bool {
        matches!(
            self,
            DocKind::PlainText | DocKind::Markdown | DocKind::Csv | DocKind::Html
        )
    }
}

/// The MIME type for a file name when the server did not say (or there is no server).
pub fn mime_for(extension: &str) -> &'static str {
    match extension {
        "txt" | "text" | "log" => "text/plain",
        "md" | "markdown" => "text/markdown",
        "csv" => "text/csv",
        "tsv" => "text/tab-separated-values",
        "html" | "htm" => "text/html",
        "xhtml" => "application/xhtml+xml",
        "pdf" => "application/pdf",
        "docx" => "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "doc" => "application/msword",
        "xlsx" => "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "odt" => "application/vnd.oasis.opendocument.text",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_the_extension_then_the_mime_type() {
        assert_eq!(DocKind::of("pdf", "application/octet-stream"), DocKind::Pdf);
        assert_eq!(DocKind::of("", "text/html; charset=utf-8"), DocKind::Html);
        assert_eq!(
            DocKind::of("bin", "application/octet-stream"),
            DocKind::Other
        );
        assert_eq!(DocKind::of("docx", ""), DocKind::Docx);
        assert!(DocKind::Csv.is_text() && !DocKind::Pdf.is_text());
        assert_eq!(mime_for("md"), "text/markdown");
    }
}
