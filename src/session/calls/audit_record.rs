//! The audit records a call emits (CONTRACT §5): which fields each event carries, and which
//! arguments may be written at all (none for a tool that handles PHI, none in which outbound
//! screening finds PHI — whether or not the tool sends anything out —, none of a call screening
//! blocked, none past a size bound).

use serde_json::Value;

use super::{Call, CallTable, DeclineReason, Outcome};
use crate::audit::{AuditEvent, AuditRecord, AuditStatus};
use crate::policy::screening::screen_call;
use crate::tools::ToolError;
use crate::tools::registry::RegisteredTool;

/// The largest arguments (serialised) an audit line holds; larger ones are recorded by digest.
pub(super) const MAX_AUDIT_ARGUMENTS: usize = 4096;

impl CallTable {
    /// The arguments an audit record may hold: only for tools that handle no PHI, only what
    /// passed validation and outbound screening against the taint as it is now (a query screening
    /// blocks may hold PHI), and only up to [`MAX_AUDIT_ARGUMENTS`] bytes (a larger one is recorded
    /// by its digest alone). Screened for every such tool, not only third-party ones: the audit
    /// file and its Redis mirror must not hold identifiers a local tool (guideline search) was
    /// given; that tool still runs, as its data does not leave.
    pub(super) fn audit_arguments(&self, tool: &RegisteredTool, args: &Value) -> Option<Value> {
        if tool.spec().phi || screen_call(tool.tool.as_ref(), args, &self.taint).is_err() {
            return None;
        }
        let size = serde_json::to_vec(args).map(|bytes| bytes.len()).unwrap_or(usize::MAX);
        (size <= MAX_AUDIT_ARGUMENTS).then(|| args.clone())
    }

    /// Settle what the terminal record of a call that just ended may hold. A call screening
    /// blocked keeps no arguments: they are the text judged PHI. A call that ran keeps what was
    /// screened as it started ([`CallTable::run`]). A call that never ran (declined, expired,
    /// refused) is screened again, since PHI results may have tainted the session while it waited
    /// for confirmation.
    pub(super) fn settle_audit_arguments(&mut self, call_id: &str, ran: bool) {
        let Some(call) = self.calls.get(call_id) else { return };
        let blocked = matches!(call.outcome, Some(Outcome::Failed(ToolError::PhiBlocked | ToolError::TaintFull)));
        let keep = !blocked
            && (ran
                || match (&call.tool, &call.audit_arguments) {
                    (Some(tool), Some(args)) => self.audit_arguments(tool, args).is_some(),
                    _ => false,
                });
        if let Some(call) = self.calls.get_mut(call_id).filter(|_| !keep) {
            call.audit_arguments = None;
        }
    }

    /// The audit record of `event` for `call`, as it stands now.
    pub(super) fn record(&self, event: AuditEvent, call_id: &str, call: &Call) -> AuditRecord {
        let finished = event == AuditEvent::CallFinished;
        let approved = event == AuditEvent::CallApproved;
        let (status, error_code) = match &call.outcome {
            Some(Outcome::Completed { .. }) => (AuditStatus::Completed, None),
            Some(Outcome::Failed(err)) => (AuditStatus::Failed, Some(err.code())),
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
            // Settled as the call ended ([`CallTable::settle_audit_arguments`]).
            arguments: if call.phi || !finished { None } else { call.audit_arguments.clone() },
            origin: self.origin.clone(),
            resource: call.resource.clone(),
        }
    }
}
