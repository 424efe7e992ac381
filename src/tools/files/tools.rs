//! The two file tools: their specs and argument schemas (what the model sees) and the results they
//! return (the seed's `SearchNextcloudFilesResult` and `RetrieveNextcloudFileResult`, field names
//! kept; a search adds `truncated: true` when files were left out, to fit or at a listing's bound).

use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::FilesError;
use super::backend::{FileEntry, FilesBackend, Health};
use super::error::to_tool_error;
use super::extract::{decode_text, extract_text, truncate_chars};
use super::file_id::{MAX_FILE_ID_CHARS, RelPath};
use super::search::{SearchRequest, search};
use crate::tools::text::{self, MAX_RESULT_BYTES};
use crate::tools::{
    args, CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec,
};

const SEARCH: &str = "search_nextcloud_files";
const RETRIEVE: &str = "retrieve_nextcloud_file";
/// File tools: 20 calls per minute (TOOLS.md).
const RATE_PER_MINUTE: u32 = 20;

const MAX_QUERY_CHARS: u64 = 200;
const MAX_FILE_TYPE_CHARS: u64 = 100;
const DEFAULT_MAX_RESULTS: u64 = 20;
const MAX_RESULTS_LIMIT: u64 = 50;
const DEFAULT_MAX_CHARS: u64 = 10_000;
/// The most text one call returns: with the other fields it stays under the 32 KiB output bound.
const MAX_CHARS_LIMIT: u64 = 20_000;

/// Both tools' policy (TOOLS.md): file category, PHI, read-only, low risk, 20 calls per minute.
fn file_tool_spec(name: &'static str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name,
        description: description.into(),
        parameters,
        category: Category::File,
        phi: true,
        risk: Risk::Low,
        requires_confirmation: false,
        third_party: false,
        rate_limit_per_minute: RATE_PER_MINUTE,
        timeout: DEFAULT_TOOL_TIMEOUT,
    }
}

/// The backend could not be reached or refused the credentials the last time it was asked.
fn unusable(backend: &dyn FilesBackend) -> bool {
    matches!(
        backend.health(),
        Health::Unreachable | Health::CredentialsRefused
    )
}

// === search_nextcloud_files ===

/// `search_nextcloud_files`: find files by name, type or (optionally) content.
pub struct SearchNextcloudFiles {
    spec: ToolSpec,
    backend: Arc<dyn FilesBackend>,
    max_file_bytes: u64,
}

impl SearchNextcloudFiles {
    pub fn new(backend: Arc<dyn FilesBackend>, max_file_bytes: u64) -> Self {
        let spec = file_tool_spec(
            SEARCH,
            "Search the user's documents (the clinic's Nextcloud files: protocols, letters, \
                          templates) by words in the file name or folder; with include_content also in the text of \
                          the documents. Returns file_ids for retrieve_nextcloud_file.",
            search_schema(),
        );
        Self {
            spec,
            backend,
            max_file_bytes,
        }
    }
}

fn search_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "description": "Search query: words from the file name, folder or (with include_content) text"},
            "file_type": {"type": "string", "minLength": 1, "maxLength": MAX_FILE_TYPE_CHARS, "description": "Only files of this type: \"pdf\", \"docx\", \"txt\", \"md\", \"csv\", \"html\" or a MIME type"},
            "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS_LIMIT, "default": DEFAULT_MAX_RESULTS, "description": "Most files to return, best match first"},
            "include_content": {"type": "boolean", "default": false, "description": "Also search the text inside the documents (slower)"},
        },
        "required": ["query"],
        "additionalProperties": false,
    })
}

#[async_trait::async_trait]
impl Tool for SearchNextcloudFiles {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn backend_reachable(&self) -> Option<bool> {
        Some(!unusable(self.backend.as_ref()))
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let query = args["query"]
            .as_str()
            .unwrap_or_default()
            .trim()
            .to_string();
        if query.is_empty() {
            return Err(ToolError::InvalidArguments(
                "query: must not be blank".into(),
            ));
        }
        let request = SearchRequest {
            file_type: args["file_type"].as_str().map(str::to_string),
            max_results: args::count(&args, "max_results", DEFAULT_MAX_RESULTS, MAX_RESULTS_LIMIT) as usize,
            include_content: args["include_content"].as_bool().unwrap_or(false),
            max_file_bytes: self.max_file_bytes,
            query,
        };
        let found = search(self.backend.as_ref(), &request)
            .await
            .map_err(|e| to_tool_error(SEARCH, e))?;
        let files: Vec<Value> = found.files.iter().map(file_json).collect();
        let mut output = text::search_output("files", files, Vec::new(), found.total as u64, &request.query);
        // A listing cut at a bound is as incomplete as a list cut to fit: the same flag says so.
        if found.truncated {
            output.result["truncated"] = json!(true);
            // The flag takes room too: a result that no longer fits loses files from the end.
            while output.result.to_string().len() > MAX_RESULT_BYTES
                && let Some(files) = output.result["files"].as_array_mut()
                && files.pop().is_some()
            {}
        }
        Ok(output)
    }
}

/// The seed's `NextcloudFile`.
fn file_json(entry: &FileEntry) -> Value {
    json!({
        "file_id": entry.path.file_id(),
        "name": entry.path.name(),
        "path": entry.path.display(),
        "size": entry.size,
        "mime_type": entry.mime_type,
        "modified": entry.modified.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)).unwrap_or_default(),
        "url": entry.url,
    })
}

// === retrieve_nextcloud_file ===

/// `retrieve_nextcloud_file`: one file's text (PDF, DOCX, HTML extracted), cut at `max_chars`.
pub struct RetrieveNextcloudFile {
    spec: ToolSpec,
    backend: Arc<dyn FilesBackend>,
    max_file_bytes: u64,
}

impl RetrieveNextcloudFile {
    pub fn new(backend: Arc<dyn FilesBackend>, max_file_bytes: u64) -> Self {
        let spec = file_tool_spec(
            RETRIEVE,
            "Read one of the user's documents found with search_nextcloud_files: returns its text \
                          (extracted from PDF, DOCX, HTML; plain text, Markdown and CSV as they are), cut at max_chars.",
            retrieve_schema(),
        );
        Self {
            spec,
            backend,
            max_file_bytes,
        }
    }
}

fn retrieve_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "file_id": {"type": "string", "minLength": 4, "maxLength": MAX_FILE_ID_CHARS, "pattern": "^f1\\.[A-Za-z0-9_-]+$", "description": "A file_id from search_nextcloud_files results"},
            "extract_text": {"type": "boolean", "default": true, "description": "Extract the text of PDF/DOCX/HTML documents; false returns text files as they are and no content for other files"},
            "max_chars": {"type": "integer", "minimum": 1, "maximum": MAX_CHARS_LIMIT, "default": DEFAULT_MAX_CHARS, "description": "Most characters of text to return"},
        },
        "required": ["file_id"],
        "additionalProperties": false,
    })
}

#[async_trait::async_trait]
impl Tool for RetrieveNextcloudFile {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn backend_reachable(&self) -> Option<bool> {
        Some(!unusable(self.backend.as_ref()))
    }

    /// The file read, as `sha256:` and the hex SHA-256 of its canonical file id: the id decodes
    /// back to the path, which may itself be PHI (a patient's name as a folder), so the audit holds
    /// a digest a reviewer can match against a known file's id (docs/audit.md), never the id.
    fn audit_resource(&self, args: &Value, _ctx: &CallContext) -> Option<String> {
        let written = args["file_id"].as_str()?;
        // The same file whether or not the id came with blanks around it (the backend trims them).
        let canonical = RelPath::from_file_id(written).map_or_else(|_| written.to_string(), |path| path.file_id());
        Some(format!("sha256:{}", hex::encode(Sha256::digest(canonical))))
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let file_id = args["file_id"].as_str().unwrap_or_default();
        let extract = args["extract_text"].as_bool().unwrap_or(true);
        let max_chars = args::whole_number(&args, "max_chars")
            .unwrap_or(DEFAULT_MAX_CHARS)
            .min(MAX_CHARS_LIMIT) as usize;
        let fail = |e: FilesError| to_tool_error(RETRIEVE, e);
        let path = RelPath::from_file_id(file_id).map_err(fail)?;
        let (entry, bytes) = self
            .backend
            .read(&path, self.max_file_bytes)
            .await
            .map_err(fail)?;
        let kind = entry.kind();
        let text = match (extract, kind) {
            (true, _) => extract_text(kind, bytes).await.map_err(fail)?,
            (false, kind) if kind.is_text() => Some(decode_text(&bytes)),
            (false, _) => None,
        };
        let (mut content, mut truncated) = match text {
            Some(text) => {
                let (text, cut) = truncate_chars(text, max_chars);
                (Some(text), cut)
            }
            None => (None, false),
        };
        let build = |content: &Option<String>, truncated: bool| {
            json!({
                "file_id": entry.path.file_id(),
                "name": entry.path.name(),
                "content": content,
                "content_truncated": truncated,
                "mime_type": entry.mime_type,
                "size": entry.size,
                "url": entry.url,
            })
        };
        let mut result = build(&content, truncated);
        // Escaping can make text longer than its characters: cut further until the output fits.
        // An empty text cannot be cut further: the loop ends there whatever the other fields weigh
        // (it never awaits, so nothing else would end it).
        while result.to_string().len() > MAX_RESULT_BYTES
            && let Some(text) = content.take_if(|text| !text.is_empty())
        {
            let keep = text.chars().count() * 3 / 4;
            content = Some(truncate_chars(text, keep).0);
            truncated = true;
            result = build(&content, truncated);
        }
        Ok(ToolOutput::new(result))
    }
}
