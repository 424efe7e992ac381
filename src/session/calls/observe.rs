//! What an audit record means for the metrics: every path that runs calls (a session, the admin
//! API's invoke) counts them here, from the record about to be written, so the numbers and the
//! audit log agree.

use std::time::Duration;

use crate::audit::{AuditEvent, AuditRecord};
use crate::telemetry::Metrics;

/// A finished call as counted, for its span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub status: &'static str,
    pub confirmation: &'static str,
    pub error_code: Option<&'static str>,
    /// Set when the tool ran (not for calls refused before running).
    pub duration: Option<Duration>,
}

/// Count a record; `Some` for a `call_finished`.
pub fn count(metrics: &Metrics, record: &AuditRecord) -> Option<Counted> {
    metrics.audit_record(record.event.as_str());
    if record.event != AuditEvent::CallFinished {
        return None;
    }
    let status = record.status.map(|s| s.as_str()).unwrap_or("failed");
    let confirmation = record
        .confirmation
        .map(|c| c.as_str())
        .unwrap_or("not_required");
    let error_code = record.error_code.as_deref().and_then(static_code);
    let refused = error_code.is_some_and(|c| {
        matches!(
            c,
            "unknown_tool" | "invalid_arguments" | "permission_denied" | "rate_limited"
        )
    });
    let ran = matches!(status, "completed" | "failed") && !refused;
    let duration = ran.then(|| Duration::from_millis(record.duration_ms.unwrap_or_default()));
    metrics.tool_call_finished(&record.tool, status, duration);
    if let Some(code) = error_code {
        metrics.tool_error(&record.tool, code);
        if code == "rate_limited" {
            metrics.rate_limited(&record.tool);
        }
        if code == "phi_blocked" {
            metrics.phi_blocked(&record.tool);
        }
    }
    if confirmation != "not_required" {
        metrics.tool_confirmation(&record.tool, confirmation);
    }
    Some(Counted {
        status,
        confirmation,
        error_code,
        duration,
    })
}

/// The static error code a label may carry; anything else is not counted by code.
fn static_code(code: &str) -> Option<&'static str> {
    const CODES: [&str; 9] = [
        "unknown_tool",
        "invalid_arguments",
        "permission_denied",
        "rate_limited",
        "phi_blocked",
        "timeout",
        "backend_error",
        "internal_error",
        "audit_unavailable",
    ];
    CODES.iter().copied().find(|c| *c == code)
}
