//! Server-owned tools: the [`Tool`] trait every tool implements, the policy each one declares
//! ([`ToolSpec`]), what a call returns ([`ToolOutput`]) and how it fails ([`ToolError`]).
//!
//! A tool never touches a socket: the session runs it in its own task under its timeout, with owned
//! arguments (already validated against [`ToolSpec::parameters`]) and a [`CallContext`]. One file or
//! folder per tool family; [`registry`] turns the enabled ones into the session's catalogue.

pub(crate) mod args;
pub mod calculators;
pub mod calendar;
pub mod files;
pub mod guidelines;
pub mod ddx;
mod error_code;
pub mod evidence;
pub(crate) mod http;
pub mod progress;
pub mod pubmed;
pub mod registry;
pub mod schema;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod text;
pub mod web_search;

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::policy::Principal;

pub use error_code::ErrorCode;

/// Every tool name voxgate knows, enabled or not (config keys `tools.<name>` are checked against it).
pub const KNOWN_TOOLS: &[&str] = &[
    "get_calendar_events",
    "create_calendar_event",
    "search_nextcloud_files",
    "retrieve_nextcloud_file",
    "search_openevidence",
    "search_pubmed",
    "calculate_medical_score",
    "search_medical_guidelines",
    "generate_differential_diagnosis",
    "web_search_medical",
];

/// Tools that change data: confirmation can never be turned off for them.
pub fn changes_data(name: &str) -> bool {
    matches!(name, "create_calendar_event")
}

/// The default timeout of a tool call (TOOLS.md).
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Calendar,
    File,
    Medical,
    Calculation,
    Search,
    /// A tool of an MCP server (`src/mcp/`).
    Mcp,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    Low,
    Medium,
    High,
}

/// What a tool declares about itself. Config may tighten the policy parts (see `registry`).
#[derive(Debug, Clone)]
pub struct ToolSpec {
    pub name: &'static str,
    /// Shown to the model: what the tool does and when to use it.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments: every string, number and list bounded,
    /// `additionalProperties: false`. Sent to the model and compiled once for validation.
    pub parameters: Value,
    pub category: Category,
    /// The tool reads or returns patient data: its arguments are never written to the audit log and
    /// its results taint the session for outbound PHI screening.
    pub phi: bool,
    pub risk: Risk,
    pub requires_confirmation: bool,
    /// The tool sends text to a third party; its outbound text is screened for PHI.
    pub third_party: bool,
    pub rate_limit_per_minute: u32,
    pub timeout: Duration,
}

/// Who is calling, from which session: everything a tool may know about the call besides its
/// arguments.
#[derive(Debug, Clone)]
pub struct CallContext {
    pub session_id: String,
    pub call_id: String,
    pub principal: Principal,
}

/// A citation shown to the user with the tool's result.
#[derive(Debug, Clone, Serialize, PartialEq, Default)]
pub struct Citation {
    pub title: String,
    pub url: String,
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pmid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doi: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_level: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub date: Option<String>,
}

/// A successful call: the result object for the model and citations for the client.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    pub result: Value,
    pub citations: Vec<Citation>,
}

impl ToolOutput {
    pub fn new(result: Value) -> Self {
        Self { result, citations: Vec::new() }
    }
}

/// Why a call failed. `Display` and [`ToolError::public_message`] never carry argument values,
/// backend bodies, hostnames, file paths or keys: they reach the model and the client.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ToolError {
    #[error("no such tool")]
    UnknownTool,
    /// The message names the field and what was expected, never the value given.
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("permission denied")]
    PermissionDenied,
    #[error("rate limited")]
    RateLimited { retry_after_s: u64 },
    #[error("blocked: the request looked like it contained patient-identifying details")]
    PhiBlocked,
    /// Code `phi_blocked` too (CONTRACT §4's list is closed), but nothing in the request was at
    /// fault: the session's taint is full and refuses every third-party call until it ends
    /// (policy/screening.rs). Rephrasing cannot help, so the message says to start a new session.
    #[error("blocked: this session has handled too much patient data for outbound screening")]
    TaintFull,
    #[error("the tool did not finish in time")]
    Timeout,
    /// The message is public: say what failed in general terms ("the calendar is unreachable").
    #[error("backend error: {0}")]
    Backend(String),
    #[error("internal error")]
    Internal,
    /// The call's audit record could not be made durable (`audit.on_error = "fail_closed"`).
    #[error("the audit log is unavailable")]
    AuditUnavailable,
    /// The tool ran and reported a failure of its own (an MCP `isError` result), with its text,
    /// bounded. That text is the tool's, not voxgate's: it may name a patient or hold a backend's
    /// internals, so it goes to the model only ([`ToolError::model_message`]) and is screened like
    /// a result ([`ToolError::tool_text`]); the client and the logs get a fixed sentence.
    #[error("the tool reported an error")]
    Reported(String),
}

impl ToolError {
    /// The CONTRACT §4 error code.
    pub fn code(&self) -> ErrorCode {
        match self {
            ToolError::UnknownTool => ErrorCode::UnknownTool,
            ToolError::InvalidArguments(_) => ErrorCode::InvalidArguments,
            ToolError::PermissionDenied => ErrorCode::PermissionDenied,
            ToolError::RateLimited { .. } => ErrorCode::RateLimited,
            ToolError::PhiBlocked | ToolError::TaintFull => ErrorCode::PhiBlocked,
            ToolError::Timeout => ErrorCode::Timeout,
            ToolError::Backend(_) => ErrorCode::BackendError,
            ToolError::Internal => ErrorCode::InternalError,
            ToolError::AuditUnavailable => ErrorCode::AuditUnavailable,
            // CONTRACT §4's list is closed and has no `tool_error`: the tool's own backend failed.
            ToolError::Reported(_) => ErrorCode::BackendError,
        }
    }

    /// A message the model can act on and the user may see (the client's `failed` event).
    pub fn public_message(&self) -> String {
        match self {
            ToolError::UnknownTool => "This tool does not exist in this session.".into(),
            ToolError::InvalidArguments(msg) => format!("Invalid arguments: {msg}"),
            ToolError::PermissionDenied => "The user is not allowed to use this tool.".into(),
            ToolError::RateLimited { retry_after_s } => {
                format!("Too many calls to this tool; try again in {retry_after_s} seconds.")
            }
            ToolError::PhiBlocked => "The request was blocked because it appears to contain \
                patient-identifying details; ask again without names, dates of birth or other \
                identifiers."
                .into(),
            ToolError::TaintFull => "This session has handled too much patient data to send \
                anything to outside services: literature and web searches are refused for the rest \
                of it, however they are worded. Start a new session for literature or web searches."
                .into(),
            ToolError::Timeout => "The tool did not finish in time.".into(),
            ToolError::Backend(msg) => msg.clone(),
            ToolError::Internal => "The tool failed unexpectedly.".into(),
            ToolError::AuditUnavailable => "The action could not be recorded in the audit log, so its \
                result is withheld; try again in a moment."
                .into(),
            ToolError::Reported(_) => "The tool reported an error.".into(),
        }
    }

    /// The message of the model's `function_call_output`: the public one, except that a tool's
    /// own error text goes to the model as its result would (the session taints with it first).
    pub fn model_message(&self) -> String {
        match self {
            ToolError::Reported(text) => format!("The tool reported an error: {text}"),
            _ => self.public_message(),
        }
    }

    /// Text the tool itself produced and the model will see, for PHI taint; `None` when every
    /// word of the message is voxgate's own.
    pub fn tool_text(&self) -> Option<&str> {
        match self {
            ToolError::Reported(text) => Some(text),
            _ => None,
        }
    }
}

impl ToolSpec {
    /// Results that name people (calendar events, files, MCP servers' answers) taint the session
    /// for outbound screening. A calculator handles PHI in its arguments, but its advice text
    /// names no one; the differential returns the knowledge base's text and the symptoms the model
    /// sent. Tainting with either would block ordinary literature searches on the same topic
    /// (docs/phi.md, "What counts as PHI").
    pub fn results_identify_people(&self) -> bool {
        self.phi && matches!(self.category, Category::Calendar | Category::File | Category::Mcp)
    }
}

/// A server-owned tool.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + 'static {
    fn spec(&self) -> &ToolSpec;

    /// The sentence shown to the user when the call needs confirmation, from validated arguments.
    fn confirmation_prompt(&self, _args: &Value) -> String {
        format!("I'd like to use the tool {}. Should I proceed?", self.spec().name)
    }

    /// Text this call builds from its arguments and sends to a third party, for PHI screening
    /// besides every string, number and key in the arguments (always screened); `None` when it builds none.
    fn outbound_text(&self, _args: &Value) -> Option<String> {
        None
    }

    /// For a PHI tool: the resource this call touches (an event UID, a file id) as the audit log
    /// records it — an identifier, never content. `None` when there is nothing to name.
    fn audit_resource(&self, _args: &Value, _ctx: &CallContext) -> Option<String> {
        None
    }

    /// After a crash: what became of this approved call (`ctx` names its session and call; its
    /// arguments are not kept). Tools whose writes are idempotent under an id derived from the
    /// call look it up; the default cannot tell.
    async fn recover(&self, _ctx: &CallContext) -> crate::audit::Recovered {
        crate::audit::Recovered::Unknown
    }

    /// Run the call. Arguments have been validated against the spec's schema.
    async fn call(&self, args: Value, ctx: CallContext) -> Result<ToolOutput, ToolError>;

    /// `Some(false)` when the tool's remote backend could not be used at the last attempt:
    /// `/readyz` then reports the tool degraded (the process keeps serving everything else).
    fn backend_reachable(&self) -> Option<bool> {
        None
    }
}
