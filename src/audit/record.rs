//! One audit record (CONTRACT §5) and how it is written as a line: fields in a fixed order, then
//! `prev_sha256`, the SHA-256 of the previous line, so the file is tamper-evident.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// `prev_sha256` of the very first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditEvent {
    CallStarted,
    CallFinished,
}

impl AuditEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditEvent::CallStarted => "call_started",
            AuditEvent::CallFinished => "call_finished",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditStatus {
    Completed,
    Failed,
    Declined,
    Expired,
    Abandoned,
}

impl AuditStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditStatus::Completed => "completed",
            AuditStatus::Failed => "failed",
            AuditStatus::Declined => "declined",
            AuditStatus::Expired => "expired",
            AuditStatus::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Confirmation {
    NotRequired,
    Approved,
    Declined,
    Expired,
    SessionClosed,
    ClientCannotConfirm,
}

impl Confirmation {
    pub fn as_str(self) -> &'static str {
        match self {
            Confirmation::NotRequired => "not_required",
            Confirmation::Approved => "approved",
            Confirmation::Declined => "declined",
            Confirmation::Expired => "expired",
            Confirmation::SessionClosed => "session_closed",
            Confirmation::ClientCannotConfirm => "client_cannot_confirm",
        }
    }
}

/// What the session knows about a call event; the writer adds `ts`, `seq`, `id`, `prev_sha256`.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditRecord {
    pub event: AuditEvent,
    pub session_id: String,
    pub call_id: String,
    pub tool: String,
    /// The keyed hash of `sub`, never the raw id.
    pub user: String,
    pub roles: Vec<String>,
    pub status: Option<AuditStatus>,
    pub error_code: Option<String>,
    pub confirmation: Option<Confirmation>,
    pub duration_ms: Option<u64>,
    /// The tool handles PHI: its arguments are never written.
    pub phi: bool,
    pub args_sha256: String,
    /// Written only for tools that handle no PHI.
    pub arguments: Option<Value>,
}

/// A line as written, fields in this order.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub ts: String,
    pub seq: u64,
    pub id: String,
    pub event: AuditEvent,
    pub session_id: String,
    pub call_id: String,
    pub tool: String,
    pub user: String,
    pub roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AuditStatus>,
    #[serde(default)]
    pub error_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation: Option<Confirmation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    pub phi: bool,
    pub args_sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Value>,
    pub prev_sha256: String,
}

impl Line {
    pub fn new(record: AuditRecord, seq: u64, prev_sha256: String) -> Self {
        let arguments = if record.phi { None } else { record.arguments };
        Line {
            ts: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            seq,
            id: record_id(seq),
            event: record.event,
            session_id: record.session_id,
            call_id: record.call_id,
            tool: record.tool,
            user: record.user,
            roles: record.roles,
            status: record.status,
            error_code: record.error_code,
            confirmation: record.confirmation,
            duration_ms: record.duration_ms,
            phi: record.phi,
            args_sha256: record.args_sha256,
            arguments,
            prev_sha256,
        }
    }
}

/// The record id, which is also its Redis stream id: deterministic, so a retried XADD cannot
/// add the record twice.
pub fn record_id(seq: u64) -> String {
    format!("{seq}-1")
}

/// Hex SHA-256 of a line's bytes (without its newline).
pub fn line_hash(line: &[u8]) -> String {
    hex::encode(Sha256::digest(line))
}
