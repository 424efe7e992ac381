//! One audit record (CONTRACT §5) and how it is written as a line: fields in a fixed order, then
//! `prev_sha256`, the link to the previous line (SHA-256, or HMAC-SHA256 with `audit.chain_key`,
//! see [`super::chain`]), so the file is tamper-evident.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::ErrorCode;

/// `prev_sha256` of the very first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditEvent {
    CallStarted,
    /// The user approved a call that needs confirmation; written (and fsynced) before the tool
    /// runs, so a crash after a side effect is known to have been approved.
    CallApproved,
    CallFinished,
    /// The chain head at this point (`chain_head`), for copies kept off the host.
    Checkpoint,
}

impl AuditEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditEvent::CallStarted => "call_started",
            AuditEvent::CallApproved => "call_approved",
            AuditEvent::CallFinished => "call_finished",
            AuditEvent::Checkpoint => "checkpoint",
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

/// What the session knows about a call event; the writer adds `seq`, `id`, `prev_sha256`, and `ts`:
/// the time the record was handed to it, which a record held through an outage keeps.
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
    pub error_code: Option<ErrorCode>,
    pub confirmation: Option<Confirmation>,
    pub duration_ms: Option<u64>,
    /// The tool handles PHI: its arguments are never written.
    pub phi: bool,
    pub args_sha256: String,
    /// Written only for tools that handle no PHI.
    pub arguments: Option<Value>,
    /// Who and from where (shared by every record of a session).
    pub origin: std::sync::Arc<Origin>,
    /// For PHI tools: the resource touched (an event UID; for a file, `sha256:` and the digest of
    /// its id, as the id spells out the path), never its content.
    pub resource: Option<String>,
}

/// Where a call came from, for access reviews (HIPAA §164.312(b)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The client's address (from `X-Forwarded-For` only behind `server.trusted_proxies`).
    pub client_addr: Option<String>,
    /// The client's `User-Agent`, cut to [`MAX_USER_AGENT`] characters.
    pub user_agent: Option<String>,
    /// The call came through `POST /admin/tools/{name}/invoke`.
    pub admin: bool,
}

/// Longest user agent recorded: enough to tell browsers apart, too short to smuggle a payload.
pub const MAX_USER_AGENT: usize = 256;

impl Origin {
    pub fn new(client_addr: Option<String>, user_agent: Option<&str>, admin: bool) -> Self {
        let user_agent = user_agent.map(|ua| ua.chars().filter(|c| !c.is_control()).take(MAX_USER_AGENT).collect());
        Origin { client_addr, user_agent, admin }
    }
}
/// A line as written, fields in this order.
#[derive(Debug, Serialize, Deserialize)]
pub struct Line {
    pub ts: String,
    pub seq: u64,
    pub id: String,
    #[serde(default)]
    pub instance: String,
    pub event: AuditEvent,
    pub session_id: String,
    pub call_id: String,
    pub tool: String,
    pub user: String,
    pub roles: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<AuditStatus>,
    /// Text, not [`ErrorCode`]: logs written by earlier versions hold codes the list no longer
    /// has (`tool_error`, before MCP errors became `backend_error`), and must still be read.
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_addr: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub admin: bool,
    /// On a `checkpoint`: the link of the line before it, i.e. the chain head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain_head: Option<String>,
    pub prev_sha256: String,
}

impl Line {
    /// The line of a record made now.
    pub fn new(record: AuditRecord, seq: u64, instance: &str, prev_sha256: String) -> Self {
        Self::made_at(record, Utc::now(), seq, instance, prev_sha256)
    }

    /// The line of a record made at `made` (its `ts`), however much later it is written.
    pub fn made_at(record: AuditRecord, made: DateTime<Utc>, seq: u64, instance: &str, prev_sha256: String) -> Self {
        let arguments = if record.phi { None } else { record.arguments };
        let origin = record.origin.as_ref().clone();
        Line {
            ts: stamp(made),
            seq,
            id: record_id(seq),
            instance: instance.to_string(),
            event: record.event,
            session_id: record.session_id,
            call_id: record.call_id,
            tool: record.tool,
            user: record.user,
            roles: record.roles,
            status: record.status,
            error_code: record.error_code.map(|code| code.as_str().to_string()),
            confirmation: record.confirmation,
            duration_ms: record.duration_ms,
            phi: record.phi,
            args_sha256: record.args_sha256,
            arguments,
            resource: record.resource,
            client_addr: origin.client_addr,
            user_agent: origin.user_agent,
            admin: origin.admin,
            chain_head: None,
            prev_sha256,
        }
    }

    /// A `checkpoint` line: the chain head (`prev_sha256` of the line it would precede).
    pub fn checkpoint(seq: u64, instance: &str, prev_sha256: String) -> Self {
        Line {
            ts: now(),
            seq,
            id: record_id(seq),
            instance: instance.to_string(),
            event: AuditEvent::Checkpoint,
            session_id: String::new(),
            call_id: String::new(),
            tool: String::new(),
            user: String::new(),
            roles: Vec::new(),
            status: None,
            error_code: None,
            confirmation: None,
            duration_ms: None,
            phi: false,
            args_sha256: String::new(),
            arguments: None,
            resource: None,
            client_addr: None,
            user_agent: None,
            admin: false,
            chain_head: Some(prev_sha256.clone()),
            prev_sha256,
        }
    }
}

fn now() -> String {
    stamp(Utc::now())
}

fn stamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The record id, which is also its Redis stream id: deterministic, so a retried XADD cannot
/// add the record twice.
pub fn record_id(seq: u64) -> String {
    format!("{seq}-1")
}
