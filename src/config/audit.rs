//! Audit settings that decide what happens on a bad day (CONTRACT §11): whether a call whose
//! record cannot be made durable still releases its result. Kept apart from `mod.rs` so the
//! failure policy and its documentation live in one place.

use serde::Deserialize;

/// `audit.on_error`: what a call does when its audit record cannot be made durable (disk full,
/// fsync error, unwritable directory).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum AuditOnError {
    /// The call fails `audit_unavailable`, nothing it produced is released, `/readyz` is 503
    /// until records are durable again: no unaudited access to patient data.
    #[default]
    FailClosed,
    /// The result is released anyway and the failure is counted
    /// (`voxgate_audit_errors_total`): availability over the audit trail.
    FailOpen,
}

impl AuditOnError {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditOnError::FailClosed => "fail_closed",
            AuditOnError::FailOpen => "fail_open",
        }
    }
}
