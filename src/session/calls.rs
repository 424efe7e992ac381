//! The tool-call state machine of one session, without I/O.
//!
//! ```text
//! accepted ─► validated ─► rate limit ─┬─────────────────────────────────────────► running ─► completed | failed
//!     │           │            │       └► awaiting_confirmation ─┬► approved (recorded) ─┘
//!     └───────────┴────────────┴─► failed                         └► declined | expired ─► declined
//! ```
//! A call is accepted once its item completed (see `settle`: one cut off with its response never
//! is). Every transition returns [`Action`]s for the session loop to perform. The rate limit is
//! charged once, before the user is asked ([`Action::CheckLimit`]): a user is never asked to
//! approve a call that would then be refused. An approval is written to the audit log
//! (`call_approved`) and flushed before the tool runs, so a crash after a side effect is known to
//! have been approved. A call's terminal transition emits its one `call_finished` audit record
//! and nothing else; only when that record is flushed ([`CallTable::on_audited`]) do the model's
//! `function_call_output` and the client's terminal event go out. So each call is audited exactly
//! once, before its result reaches anyone; when the record cannot be made durable and
//! `audit.on_error` is `fail_closed`, the call fails `audit_unavailable` instead
//! ([`CallTable::on_audit_failed`]) and nothing it produced is released. While the log is not
//! writable (`fail_closed`, [`CallTable::with_audit`]), a new call is finished at accept with
//! `audit_unavailable` and its tool never runs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::audit::{AuditEvent, AuditHandle, AuditRecord, Confirmation, Origin};
use crate::policy::Principal;
use crate::policy::phi::{args_sha256, invented_tool_name};
use crate::policy::rate_limit::Limited;
use crate::policy::screening::{TaintSet, screen_call};
use crate::protocol::voxgate as events;
use crate::tools::registry::{RegisteredTool, ToolRegistry};
use crate::tools::{CallContext, ToolError, ToolOutput};

pub use decline::DeclineReason;

/// What the session loop must do next.
#[derive(Debug)]
pub enum Action {
    /// Send a `voxgate.*` event to the client (dropped if the client did not ask for them).
    Client(String),
    /// Append an audit record; when `gates` names a call, its next step waits for the flush.
    Audit { record: Box<AuditRecord>, gates: Option<String> },
    /// Charge the call to the user's rate limit, then report with [`CallTable::on_limit_checked`].
    CheckLimit { call_id: String, tool: Arc<RegisteredTool> },
    /// Run the tool in its own task.
    Spawn { call_id: String, tool: Arc<RegisteredTool>, args: Value },
    /// Decline the call as expired unless decided within `after`.
    Expire { call_id: String, after: Duration },
    /// Send the model the call's `function_call_output`; `failed`: it is an error, not a result.
    Output { call_id: String, output: String, failed: bool },
}

#[derive(Debug)]
enum Outcome {
    Completed { output: ToolOutput },
    Failed(ToolError),
    Declined(DeclineReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the rate limiter's answer.
    CheckingLimit,
    AwaitingConfirmation,
    /// Approved; the `call_approved` record is being flushed.
    Approving,
    Running,
    /// The terminal audit record is being flushed.
    Finishing,
    Done,
}

#[derive(Debug)]
struct Call {
    name: String,
    state: State,
    accepted_at: Instant,
    phi: bool,
    args_sha256: String,
    /// Arguments as written to the audit log: only for tools that handle no PHI, only as screened
    /// (see `audit_record`).
    audit_arguments: Option<Value>,
    /// Validated arguments, kept while the call waits for confirmation.
    args: Option<Value>,
    tool: Option<Arc<RegisteredTool>>,
    confirmation: Confirmation,
    outcome: Option<Outcome>,
    /// For PHI tools: the resource the call touches (never content).
    resource: Option<String>,
    /// Gating records (approval, finish) not yet acknowledged: acks may arrive in any order, and
    /// the call moves on only when all of them are in.
    pending_gates: u8,
    /// One of them could not be made durable (`fail_closed`).
    gate_failed: bool,
}

/// Why a confirmation from the client was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no call with this id is awaiting confirmation")]
pub struct NotAwaitingConfirmation;

/// Every call of one session, keyed by `call_id`.
pub struct CallTable {
    session_id: String,
    principal: Principal,
    /// The keyed hash of `principal.sub`, as audit records carry it.
    user: String,
    client_can_confirm: bool,
    /// The admin invoke path runs tools without asking anyone (CONTRACT §2).
    skip_confirmation: bool,
    confirmation_timeout: Duration,
    registry: Arc<ToolRegistry>,
    /// Every word this session's people-identifying tools returned, screened against what
    /// third-party tools would send.
    taint: TaintSet,
    calls: HashMap<String, Call>,
    /// Calls whose arguments are final and whose item has not ended yet (see `settle`).
    held: HashMap<String, settle::Held>,
    /// Who and from where, on every record of this table.
    origin: Arc<Origin>,
    /// Asked at accept whether the audit log refuses new calls (see [`Self::with_audit`]).
    audit: Option<AuditHandle>,
}

impl CallTable {
    pub fn new(
        session_id: String,
        principal: Principal,
        user: String,
        client_can_confirm: bool,
        confirmation_timeout: Duration,
        registry: Arc<ToolRegistry>,
    ) -> Self {
        Self {
            session_id,
            principal,
            user,
            client_can_confirm,
            skip_confirmation: false,
            confirmation_timeout,
            registry,
            taint: TaintSet::default(),
            calls: HashMap::new(),
            held: HashMap::new(),
            origin: Arc::new(Origin::default()),
            audit: None,
        }
    }

    /// The client's address and user agent (and whether this is the admin API) for the records.
    pub fn with_origin(mut self, origin: Origin) -> Self {
        self.origin = Arc::new(origin);
        self
    }

    /// Finish new calls at accept with `audit_unavailable`, their tools not run, while `audit`
    /// refuses them ([`AuditHandle::refuses_calls`]: `fail_closed` and the log not writable).
    pub fn with_audit(mut self, audit: AuditHandle) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Run calls without asking for confirmation (the admin API's invoke).
    pub fn without_confirmation(mut self) -> Self {
        self.skip_confirmation = true;
        self
    }

    /// What outbound screening checks against (see `policy::screening`).
    pub fn taint(&self) -> &TaintSet {
        &self.taint
    }

    /// Is this call id one voxgate owns (known to the table)?
    pub fn owns(&self, call_id: &str) -> bool {
        self.calls.contains_key(call_id)
    }

    /// Calls not yet finished (parked, running, or waiting for their audit flush).
    pub fn unfinished(&self) -> usize {
        self.calls.values().filter(|c| c.state != State::Done).count()
    }

    /// Calls still running, or approved and about to run (their `call_approved` is being
    /// flushed): what [`Self::abandon_running`] ends at the close deadline.
    pub fn running(&self) -> usize {
        self.calls.values().filter(|c| matches!(c.state, State::Running | State::Approving)).count()
    }

    /// The model's call is complete: accept it and take it as far as it can go now. A repeated
    /// call id is ignored (the same call is announced by several events).
    pub fn accept(&mut self, call_id: &str, name: &str, raw_args: &str, now: Instant) -> Vec<Action> {
        // Held until its item ended, it is settled now (`response.done` listing it completed).
        self.held.remove(call_id);
        if self.calls.contains_key(call_id) {
            return Vec::new();
        }
        let tool = self.registry.get(name).cloned();
        // A call to an unknown tool is treated as PHI-bearing: we cannot know what it holds. Its
        // name is the model's invention and may hold anything too: only a keyed hash of it is
        // recorded, counted or logged.
        let phi = tool.as_ref().is_none_or(|t| t.spec().phi);
        let parsed: Result<Value, _> = serde_json::from_str(raw_args);
        let call = Call {
            name: if tool.is_some() { name.to_string() } else { invented_tool_name(name) },
            state: State::Running,
            accepted_at: now,
            phi,
            args_sha256: args_sha256(raw_args),
            // Arguments are recorded only once validated and screened (see `audit_arguments`).
            audit_arguments: None,
            args: None,
            tool: tool.clone(),
            confirmation: Confirmation::NotRequired,
            outcome: None,
            resource: None,
            pending_gates: 0,
            gate_failed: false,
        };
        let started = self.record(AuditEvent::CallStarted, call_id, &call);
        self.calls.insert(call_id.to_string(), call);
        let mut actions = vec![Action::Audit { record: Box::new(started), gates: None }];
        // `call_started` gates nothing: a tool run now could read PHI or send arguments out with
        // no durable trace, and be lost with the held records if the process dies.
        if self.audit_refuses() {
            actions.extend(self.refuse_unaudited(call_id));
            return actions;
        }

        let checked = match (tool, parsed) {
            (None, _) => Err(ToolError::UnknownTool),
            (Some(tool), _) if !tool.permits(&self.principal) => Err(ToolError::PermissionDenied),
            (Some(_), Err(_)) => Err(ToolError::InvalidArguments("the arguments are not valid JSON".into())),
            (Some(tool), Ok(args)) => tool.validate(&args).map(|()| (tool, args)),
        };
        let (tool, args) = match checked {
            Ok(ok) => ok,
            Err(err) => {
                actions.extend(self.finish(call_id, Outcome::Failed(err)));
                return actions;
            }
        };
        if tool.policy.requires_confirmation && !self.skip_confirmation && !self.client_can_confirm {
            self.set_confirmation(call_id, Confirmation::ClientCannotConfirm);
            actions.extend(self.finish(call_id, Outcome::Declined(DeclineReason::ClientCannotConfirm)));
            return actions;
        }
        let ctx = CallContext { session_id: self.session_id.clone(), call_id: call_id.to_string(), principal: self.principal.clone() };
        let audit_arguments = self.audit_arguments(&tool, &args);
        if let Some(call) = self.calls.get_mut(call_id) {
            call.state = State::CheckingLimit;
            call.audit_arguments = audit_arguments;
            call.resource = if tool.spec().phi { tool.tool.audit_resource(&args, &ctx) } else { None };
            call.args = Some(args);
        }
        actions.push(Action::CheckLimit { call_id: call_id.to_string(), tool });
        actions
    }

    /// The rate limiter answered for a call: refuse it, ask the user, or run it.
    pub fn on_limit_checked(&mut self, call_id: &str, limit: Result<(), Limited>, now_ms: u64) -> Vec<Action> {
        let Some(call) = self.calls.get_mut(call_id) else { return Vec::new() };
        if call.state != State::CheckingLimit {
            return Vec::new();
        }
        let (Some(tool), Some(args)) = (call.tool.clone(), call.args.take()) else {
            return self.finish(call_id, Outcome::Failed(ToolError::Internal));
        };
        if let Err(limited) = limit {
            return self.finish(call_id, Outcome::Failed(ToolError::RateLimited { retry_after_s: limited.retry_after_s }));
        }
        let name = tool.name();
        if !tool.policy.requires_confirmation || self.skip_confirmation {
            return self.run(call_id, tool, args);
        }
        let mut actions = Vec::new();
        let prompt = tool.tool.confirmation_prompt(&args);
        let expires_in_ms = self.confirmation_timeout.as_millis() as u64;
        let expires_at_ms = now_ms + expires_in_ms;
        actions.push(Action::Client(events::confirmation_requested(call_id, name, &args, &prompt, expires_at_ms, expires_in_ms)));
        actions.push(Action::Expire { call_id: call_id.to_string(), after: self.confirmation_timeout });
        if let Some(call) = self.calls.get_mut(call_id) {
            call.state = State::AwaitingConfirmation;
            call.args = Some(args);
        }
        actions
    }

    /// The client decided on a parked call.
    pub fn on_confirm(&mut self, call_id: &str, approved: bool) -> Result<Vec<Action>, NotAwaitingConfirmation> {
        let call = self.calls.get_mut(call_id).ok_or(NotAwaitingConfirmation)?;
        if call.state != State::AwaitingConfirmation {
            return Err(NotAwaitingConfirmation);
        }
        if !approved {
            call.confirmation = Confirmation::Declined;
            return Ok(self.finish(call_id, Outcome::Declined(DeclineReason::UserDeclined)));
        }
        call.confirmation = Confirmation::Approved;
        if self.audit_refuses() {
            // Its approval could not be made durable before the tool acts on it.
            return Ok(self.refuse_unaudited(call_id));
        }
        let Some(call) = self.calls.get_mut(call_id) else { return Ok(Vec::new()) };
        call.state = State::Approving;
        call.pending_gates += 1;
        // The decision is on disk before the tool can act on it.
        let Some(call) = self.calls.get(call_id) else { return Ok(Vec::new()) };
        let record = self.record(AuditEvent::CallApproved, call_id, call);
        Ok(vec![Action::Audit { record: Box::new(record), gates: Some(call_id.to_string()) }])
    }

    /// A parked call's confirmation window closed (or a held call's wait for its item's end, see
    /// `settle`).
    pub fn on_expired(&mut self, call_id: &str) -> Vec<Action> {
        if let Some(actions) = self.settle_expired(call_id) {
            return actions;
        }
        match self.calls.get_mut(call_id) {
            Some(call) if call.state == State::AwaitingConfirmation => {
                call.confirmation = Confirmation::Expired;
                self.finish(call_id, Outcome::Declined(DeclineReason::Expired))
            }
            _ => Vec::new(),
        }
    }

    /// A tool task ended.
    pub fn on_tool_finished(&mut self, call_id: &str, result: Result<ToolOutput, ToolError>) -> Vec<Action> {
        match self.calls.get(call_id) {
            Some(call) if call.state == State::Running => {}
            _ => return Vec::new(),
        }
        let outcome = match result {
            Ok(output) => Outcome::Completed { output },
            Err(err) => Outcome::Failed(err),
        };
        self.finish(call_id, outcome)
    }

    /// A gating record could not be made durable and `audit.on_error` is `fail_closed`: an
    /// approved call does not run, a finished one releases nothing but `audit_unavailable` (the
    /// writer records it so).
    pub fn on_audit_failed(&mut self, call_id: &str) -> Vec<Action> {
        self.on_gate(call_id, false)
    }

    /// A gating record is on disk: run an approved call, or tell the model and the client how a
    /// finished one ended.
    pub fn on_audited(&mut self, call_id: &str) -> Vec<Action> {
        self.on_gate(call_id, true)
    }

    fn on_gate(&mut self, call_id: &str, durable: bool) -> Vec<Action> {
        let Some(call) = self.calls.get_mut(call_id) else { return Vec::new() };
        if call.pending_gates == 0 {
            return Vec::new();
        }
        call.pending_gates -= 1;
        call.gate_failed |= !durable;
        if call.pending_gates > 0 {
            return Vec::new();
        }
        let failed = std::mem::take(&mut call.gate_failed);
        match call.state {
            State::Approving if failed => return self.finish(call_id, Outcome::Failed(ToolError::AuditUnavailable)),
            State::Approving => {
                return match (call.tool.clone(), call.args.take()) {
                    (Some(tool), Some(args)) => self.run(call_id, tool, args),
                    _ => self.finish(call_id, Outcome::Failed(ToolError::Internal)),
                };
            }
            State::Finishing if failed => call.outcome = Some(Outcome::Failed(ToolError::AuditUnavailable)),
            State::Finishing => {}
            _ => return Vec::new(),
        }
        call.state = State::Done;
        let duration_ms = call.accepted_at.elapsed().as_millis() as u64;
        let name = call.name.clone();
        // The result has been delivered once it leaves here; free the memory it holds.
        call.args = None;
        // Whatever of the tool's own text reaches the model taints the session: a PHI tool's
        // error text can name a patient as well as its result can.
        let taints = call.tool.as_ref().is_some_and(|t| t.spec().results_identify_people());
        let mut actions = Vec::with_capacity(3);
        match call.outcome.take() {
            Some(Outcome::Completed { output }) => {
                let text = serde_json::to_string(&output.result).unwrap_or_else(|_| "{}".into());
                if taints {
                    self.taint.add_result(&output.result);
                }
                actions.push(Action::Output { call_id: call_id.to_string(), output: text, failed: false });
                actions.push(Action::Client(events::completed(call_id, &name, duration_ms, &output.citations)));
            }
            Some(Outcome::Failed(err)) => {
                if let Some(text) = err.tool_text().filter(|_| taints) {
                    self.taint.add_text(text);
                }
                // The model may get the tool's own words; the client only voxgate's (CONTRACT §4:
                // no PHI, no upstream bodies).
                actions.push(Action::Output {
                    call_id: call_id.to_string(),
                    output: events::error_output(err.code().as_str(), &err.model_message()),
                    failed: true,
                });
                actions.push(Action::Client(events::failed(call_id, &name, err.code().as_str(), &err.public_message())));
            }
            Some(Outcome::Declined(reason)) => {
                actions.push(Action::Output {
                    call_id: call_id.to_string(),
                    output: events::error_output(reason.model_code(), reason.model_message()),
                    failed: true,
                });
                actions.push(Action::Client(events::declined(call_id, &name, reason.as_str())));
            }
            None => {}
        }
        actions
    }

    fn run(&mut self, call_id: &str, tool: Arc<RegisteredTool>, args: Value) -> Vec<Action> {
        // Checked again as the tool is about to act: the log may have stopped taking records
        // while the rate limit was checked (a Redis round trip) or since the call was accepted.
        if self.audit_refuses() {
            return self.refuse_unaudited(call_id);
        }
        if let Some(call) = self.calls.get_mut(call_id) {
            call.state = State::Running;
        }
        // The last policy phase, at run time so an approval after new PHI results is screened
        // against them too: nothing leaves for a third party unscreened. `started` only once it
        // passed: a blocked call never started (CONTRACT §4 makes `started` optional).
        match self.screen(&tool, &args) {
            Ok(()) => {
                // What is audited is what was screened as it left, against the taint as it is now.
                let audit_arguments = self.audit_arguments(&tool, &args);
                if let Some(call) = self.calls.get_mut(call_id) {
                    call.audit_arguments = audit_arguments;
                }
                vec![Action::Client(events::started(call_id, tool.name())), Action::Spawn { call_id: call_id.to_string(), tool, args }]
            }
            Err(blocked) => self.finish(call_id, Outcome::Failed(blocked)),
        }
    }

    /// Outbound PHI screening (TOOLS.md) of what a third-party tool would send.
    fn screen(&self, tool: &RegisteredTool, args: &Value) -> Result<(), ToolError> {
        if tool.spec().third_party { screen_call(tool.tool.as_ref(), args, &self.taint) } else { Ok(()) }
    }

    fn set_confirmation(&mut self, call_id: &str, confirmation: Confirmation) {
        if let Some(call) = self.calls.get_mut(call_id) {
            call.confirmation = confirmation;
        }
    }

    /// With `audit.on_error = "fail_closed"`, is the log refusing new work (failing or hung)?
    fn audit_refuses(&self) -> bool {
        self.audit.as_ref().is_some_and(AuditHandle::refuses_calls)
    }

    /// Finish a call the log cannot take (`audit_unavailable`) before its tool acts, and answer it
    /// now. Its records are held like any (they land, in order, once the disk takes writes), but
    /// its answer does not wait for their acknowledgement: the tool never ran, so nothing is
    /// released without a trace, and on a hung disk (`fdatasync` blocked) the acknowledgement
    /// would not come before the disk does: the model and the client would wait with it for the
    /// refusal docs/audit.md promises "at once".
    fn refuse_unaudited(&mut self, call_id: &str) -> Vec<Action> {
        let mut actions = self.finish(call_id, Outcome::Failed(ToolError::AuditUnavailable));
        for action in &mut actions {
            if let Action::Audit { gates, .. } = action {
                *gates = None;
            }
        }
        actions.extend(self.on_gate(call_id, false));
        actions
    }

    /// The one terminal transition: record the outcome and emit the `call_finished` record.
    fn finish(&mut self, call_id: &str, outcome: Outcome) -> Vec<Action> {
        let Some(call) = self.calls.get_mut(call_id) else { return Vec::new() };
        if matches!(call.state, State::Finishing | State::Done) {
            return Vec::new();
        }
        let ran = call.state == State::Running;
        call.state = State::Finishing;
        call.pending_gates += 1;
        call.outcome = Some(outcome);
        self.settle_audit_arguments(call_id, ran);
        let Some(call) = self.calls.get(call_id) else { return Vec::new() };
        let record = self.record(AuditEvent::CallFinished, call_id, call);
        vec![Action::Audit { record: Box::new(record), gates: Some(call_id.to_string()) }]
    }
}

/// Milliseconds since the Unix epoch (confirmation deadlines are told to the client in it).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or_default()
}

mod audit_record;
mod closing;
mod decline;
pub mod observe;
pub mod recover;
mod settle;
#[cfg(test)]
mod tests;
