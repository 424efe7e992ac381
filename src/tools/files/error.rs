//! `FilesError`: why a file backend call failed, in words that are safe to log and to show.
//!
//! No variant carries a file name, path, document text, URL, hostname or credential: the `Display`
//! text goes into logs as is, and [`From<FilesError> for ToolError`] picks the public message.

use crate::tools::ToolError;
use crate::tools::registry::RegistryError;

/// Why a file backend call failed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// The `file_id` is not one voxgate made, or names something outside the root.
    #[error("the file id does not name a file under the configured root")]
    BadFileId,
    /// The id is well formed but there is no (regular) file there.
    #[error("no file with this id")]
    NotFound,
    /// The file is larger than `backends.files.max_file_bytes`; nothing more is read.
    #[error("the file is larger than the configured limit")]
    TooLarge { limit: u64 },
    /// The document is damaged or not what its name says; the extractor refused it.
    #[error("the document could not be read as text")]
    Corrupt,
    /// Reading the document's text took longer than the extraction worker may run (its wall time
    /// or CPU limit): a very long or convoluted document, not necessarily a damaged one.
    #[error("reading the document's text took too long")]
    TooSlow,
    /// Every PDF reader of the process stayed busy for as long as a document may wait for one.
    #[error("every document reader is busy")]
    Busy,
    /// Local store I/O (std's `io::Error` does not carry the path, so it is safe as a source).
    #[error("the file store could not be read")]
    Io(#[source] std::io::Error),
    /// The WebDAV server answered 401, or 403 for the root itself.
    #[error("the file server refused the configured credentials")]
    CredentialsRefused,
    /// The WebDAV server answered 403 for one file or folder below the root (for example a link
    /// out of its root that it will not follow).
    #[error("the file server does not allow access to this file")]
    Forbidden,
    /// The WebDAV server could not be reached, or kept failing (5xx) after the retries.
    #[error("the file server is unreachable: {0}")]
    Unreachable(&'static str),
    /// The WebDAV server answered with an unexpected status.
    #[error("the file server answered with HTTP status {0}")]
    Status(u16),
    /// The WebDAV server's answer was not the multistatus XML it should be.
    #[error("the file server's answer could not be understood")]
    Malformed,
    /// Configuration that cannot work (named key, no secret).
    #[error("{0}")]
    Config(String),
    /// The blocking worker (extraction, directory walk) panicked or was cancelled.
    #[error("the file worker task failed")]
    Worker,
}

impl From<FilesError> for ToolError {
    fn from(err: FilesError) -> Self {
        let text = match err {
            FilesError::BadFileId => {
                return ToolError::InvalidArguments(
                    "file_id: not a file id from search_nextcloud_files results".into(),
                );
            }
            FilesError::Worker => return ToolError::Internal,
            FilesError::TooSlow => return ToolError::Timeout,
            FilesError::NotFound | FilesError::Forbidden => {
                "The file was not found; search again to get a current file_id.".into()
            }
            FilesError::TooLarge { limit } => {
                format!("The file is too large to read (the limit is {} MiB).", limit.div_ceil(1024 * 1024))
            }
            FilesError::Corrupt => {
                "The document could not be read as text; it may be damaged or in an unsupported format.".into()
            }
            FilesError::CredentialsRefused => {
                "The file server refused voxgate's credentials; an administrator must check them.".into()
            }
            FilesError::Io(_) | FilesError::Unreachable(_) | FilesError::Status(_) | FilesError::Malformed => {
                "The file store is unavailable right now.".into()
            }
            FilesError::Config(_) => "The file store is not configured correctly.".into(),
            FilesError::Busy => "Too many documents are being read right now; try again in a moment.".into(),
        };
        ToolError::Backend(text)
    }
}

/// At start-up the operator needs the reason and the key to check (the path they configured is
/// theirs to know, so it is not repeated here either).
impl From<FilesError> for RegistryError {
    fn from(err: FilesError) -> Self {
        let mut reason = err.to_string();
        if let Some(source) = std::error::Error::source(&err) {
            reason.push_str(&format!(": {source}"));
        }
        if matches!(err, FilesError::Io(_)) {
            reason.push_str(" (check backends.files.root)");
        }
        RegistryError::Backend {
            family: "files",
            reason,
        }
    }
}

/// Log a backend failure (its `Display` is PHI-free) and turn it into the public tool error.
pub(super) fn to_tool_error(tool: &'static str, err: FilesError) -> ToolError {
    match &err {
        FilesError::BadFileId
        | FilesError::NotFound
        | FilesError::Forbidden
        | FilesError::TooLarge { .. }
        | FilesError::TooSlow => {
            tracing::debug!(tool, error = %err, "file request refused");
        }
        _ => {
            let source = std::error::Error::source(&err).map(|s| s.to_string());
            tracing::warn!(tool, error = %err, source, "file backend failed");
        }
    }
    err.into()
}
