//! The audit records a call emits (CONTRACT §5): which fields each event carries, and which
//! arguments may be written at all (none for a tool that handles PHI, none that outbound
//! screening blocks, none past a size bound).

use serde_json::Value;

use super::{Call, CallTable, DeclineReason, Outcome};
use crate::audit::{AuditEvent, AuditRecord, AuditStatus};
use crate::tools::registry::RegisteredTool;

/// The largest arguments (serialised) an audit line holds; larger ones are recorded by digest.
pub(super) const MAX_AUDIT_ARGUMENTS: usize = 4096;

impl CallTable {
    /// The arguments an audit record may hold: only for tools that handle no PHI, only what
    /// passed validation and outbound screening (a query screening blocks may hold PHI), and only
    /// up to [`MAX_AUDIT_ARGUMENTS`] bytes (a larger one is recorded by its digest alone).
    pub(super) fn audit_arguments(&self, tool: &RegisteredTool, args: &Value) -> Option<Value> {
        if tool.spec().phi || self.screen(tool, args).is_err() {
            return None;
        }
        let size = serde_json::to_vec(args).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
        (size <= MAX_AUDIT_ARGUMENTS).then(|| args.clone())
    }

    /// The audit record of `event` for `call`, as it stands now.
    pub(super) fn record(&self, event: AuditEvent, call_id: &str, call: &Call) -> AuditRecord {
        let finished = event == AuditEvent::CallFinished;
        let approved = event == AuditEvent::CallApproved;
        let (status, error_code) = match &call.outcome {
            Some(Outcome::Completed { .. }) => (AuditStatus::Completed, None),
            Some(Outcome::Failed(err)) => (AuditStatus::Failed, Some(err.code().to_string())),
            Some(Outcome::Declined(DeclineReason::Expired)) => (AuditStatus::Expired, None),
            Some(Outcome::Declined(_)) => (AuditStatus::Declined, None),
            None => (AuditStatus::Failed, None),
        };
        AuditRecord {
            event,
            session_id: self.session_id.clone(),
            call_id: call_id.to_string(),
            tool: call.name.clone(),
            user: self.user.clone(),
            roles: self.principal.roles.clone(),
            status: finished.then_some(status),
            error_code: if finished { error_code } else { None },
            confirmation: (finished || approved).then_some(call.confirmation),
            duration_ms: finished.then(|| call.accepted_at.elapsed().as_millis() as u64),
            phi: call.phi,
            args_sha256: call.args_sha256.clone(),
            arguments: if call.phi || !finished { None } else { call.audit_arguments.clone() },
            origin: self.origin.clone(),
            resource: call.resource.clone(),
        }
    }
}
