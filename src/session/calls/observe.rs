//! What an audit record means for the metrics: every path that runs calls (a session, the admin
//! API's invoke) counts them here, from the record about to be written, so the numbers and the
//! audit log agree.

use std::time::Duration;

use crate::audit::{AuditEvent, AuditRecord, AuditStatus, Confirmation};
use crate::telemetry::Metrics;
use crate::tools::ErrorCode;

/// A finished call as counted, for its span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    pub status: AuditStatus,
    pub confirmation: Confirmation,
    pub error_code: Option<ErrorCode>,
    /// Set when the tool ran (not for calls refused before running).
    pub duration: Option<Duration>,
}

/// Count a record; `Some` for a `call_finished`.
pub fn count(metrics: &Metrics, record: &AuditRecord) -> Option<Counted> {
    metrics.audit_record(record.event.as_str());
    if record.event != AuditEvent::CallFinished {
        return None;
    }
    let status = record.status.unwrap_or(AuditStatus::Failed);
    let confirmation = record.confirmation.unwrap_or(Confirmation::NotRequired);
    let error_code = record.error_code;
    let refused = error_code.is_some_and(ErrorCode::is_refusal);
    let ran = matches!(status, AuditStatus::Completed | AuditStatus::Failed) && !refused;
    let duration = ran.then(|| Duration::from_millis(record.duration_ms.unwrap_or_default()));
    metrics.tool_call_finished(&record.tool, status.as_str(), duration);
    if let Some(code) = error_code {
        metrics.tool_error(&record.tool, code.as_str());
        if code == ErrorCode::RateLimited {
            metrics.rate_limited(&record.tool);
        }
        if code == ErrorCode::PhiBlocked {
            metrics.phi_blocked(&record.tool);
        }
    }
    if confirmation != Confirmation::NotRequired {
        metrics.tool_confirmation(&record.tool, confirmation.as_str());
    }
    Some(Counted {
        status,
        confirmation,
        error_code,
        duration,
    })
}
