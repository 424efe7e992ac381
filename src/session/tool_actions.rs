//! What the call table decided, carried out: audit records written (their acknowledgements
//! awaited in the session loop), rate limits checked, tools spawned on the session's `JoinSet`,
//! confirmation deadlines armed, outputs sent to the model; and the loop's two completion arms, a
//! tool that finished and an audit record that reached the disk. The decisions themselves are the
//! sans-I/O [`CallTable`](super::calls::CallTable)'s.

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::time::DelayQueue;

use super::bridge::{Bridge, PendingOutput};
use super::calls::Action;
use super::runner::ToolJob;
use crate::audit::{AuditError, AuditEvent};
use crate::protocol::voxgate as events;
use crate::tools::{CallContext, Category, ToolError, ToolOutput};

/// Progress events waiting for the session loop, per session; more are dropped (advisory).
const PROGRESS_QUEUE: usize = 16;

/// Tools tried in the session task before they get a task of their own: calculators compute and
/// answer without awaiting anything, so a call is answered without a hop to another task (and,
/// as both its audit records then reach the writer together, with one fsync and no wait for a
/// group). Anything that does wait is moved to its own task as it is, under its timeout.
const INLINE: [Category; 1] = [Category::Calculation];

fn tool_panicked(span: &tracing::Span) -> ToolError {
    tracing::error!(parent: span, "a tool panicked");
    ToolError::Internal
}

impl Bridge {
    /// Perform what the call table decided, in order (what an action leads to comes first).
    pub(super) async fn perform(&mut self, actions: Vec<Action>) {
        // Tool work is rare next to frames: a good moment to publish this session's frame counts.
        self.frames.flush();
        let mut queue = std::collections::VecDeque::from(actions);
        // Audit records go to the writer together when these actions are done: a calculator's
        // `call_started` and `call_finished` then wake the writer once. They are held only across
        // code that does not wait: before anything that would (a full client queue, a shared
        // limiter, a send upstream) or could let a tool task run, they are handed over.
        let mut audits = Vec::new();
        while let Some(action) = queue.pop_front() {
            match action {
                Action::Client(event) => {
                    if let Some(waits) = self.try_send_client_event(event) {
                        self.queue_audits(&mut audits);
                        self.send_client(waits).await;
                    }
                }
                Action::Audit { record, gates } => {
                    self.observe(&record);
                    audits.push((record, gates));
                }
                Action::CheckLimit { call_id, tool } => {
                    let (limiter, user) = (self.deps.limiter.clone(), self.info.user.clone());
                    let mut check = limiter.check(&user, tool.name(), tool.policy.rate_limit_per_minute);
                    let limit = match (&mut check).now_or_never() {
                        // The local limiter answers at once.
                        Some(limit) => limit,
                        None => {
                            // The only wait here that is not a send (a shared limiter is a
                            // network round trip): what this turn queued goes out first.
                            self.queue_audits(&mut audits);
                            self.to_client.drive_now();
                            self.to_upstream.drive_now();
                            check.await
                        }
                    };
                    let next = self.calls.on_limit_checked(&call_id, limit, super::calls::unix_ms());
                    next.into_iter().rev().for_each(|a| queue.push_front(a));
                }
                Action::Spawn { call_id, tool, args } => {
                    match self.spawn_tool(call_id.clone(), tool, args) {
                        Some(result) => {
                            let next = self.tool_finished(&call_id, result);
                            next.into_iter().rev().for_each(|a| queue.push_front(a));
                        }
                        // The task runs at the next wait: its `call_started` is with the writer first.
                        None => self.queue_audits(&mut audits),
                    }
                }
                Action::Expire { call_id, after } => {
                    self.deadlines.get_or_insert_with(DelayQueue::new).insert(call_id, after);
                }
                Action::Output { call_id, output, failed } => {
                    self.queue_audits(&mut audits);
                    let event_id = events::event_id();
                    let frame = events::function_call_output(&event_id, &call_id, &output);
                    // Recorded whether or not the upstream's queue took it: a send that fails (it
                    // timed out on an upstream that stopped reading, or the upstream is gone)
                    // queued nothing, and the resume that follows sends every unacknowledged
                    // output to the new upstream, once; so the model gets exactly one output per
                    // call, never none (CONTRACT §9). Without a resume the session closes anyway.
                    self.send_upstream(Message::text(frame.clone())).await;
                    self.gate.on_output_sent(failed);
                    self.unacknowledged_outputs.insert(call_id, PendingOutput { event_id, frame });
                }
            }
        }
        self.queue_audits(&mut audits);
    }

    /// The upstream answered one of voxgate's frames with an `error`: if the frame was an output
    /// (say its `call_id` is unknown there), that output will never be acknowledged. It is no
    /// longer pending: a resume does not send it again, and it no longer keeps the session from
    /// being quiet enough to recycle. True when `event_id` was an output's.
    pub(super) fn on_output_refused(&mut self, event_id: &str) -> bool {
        let refused = self.unacknowledged_outputs.iter().find(|(_, o)| o.event_id == event_id).map(|(c, _)| c.clone());
        let Some(call_id) = refused else { return false };
        tracing::warn!(parent: &self.span, "the realtime service refused a tool output");
        self.unacknowledged_outputs.remove(&call_id);
        // The gate's count of outputs on their way: this one has arrived, as a refusal.
        self.gate.on_output_acknowledged();
        true
    }

    /// Hand records to the audit writer as one job; their acknowledgements come back to the loop.
    fn queue_audits(&mut self, audits: &mut Vec<(Box<crate::audit::AuditRecord>, Option<String>)>) {
        let (records, gates): (Vec<_>, Vec<_>) = audits.drain(..).unzip();
        for (ack, gates) in self.deps.audit.record_all(records).into_iter().zip(gates) {
            self.audit_acks.push(async move { (gates, ack.await) }.boxed());
        }
    }

    /// Metrics, the tool span and its log line for an audit record about to be written.
    fn observe(&mut self, record: &crate::audit::AuditRecord) {
        if record.event == AuditEvent::CallStarted {
            let span = crate::telemetry::tool_span(&self.span, self.deps.metrics.tool_label(&record.tool), &record.call_id);
            self.tool_spans.insert(record.call_id.clone(), span);
        }
        let Some(counted) = super::calls::observe::count(&self.deps.metrics, record) else { return };
        if let Some(span) = self.tool_spans.remove(&record.call_id) {
            let c = counted;
            crate::telemetry::record_tool_outcome(&span, c.status, c.confirmation, c.error_code, c.duration);
        }
    }

    /// Run the call in its own task; a calculator is first tried right here, and its result is
    /// returned when it needed nothing to wait for (see [`INLINE`]).
    fn spawn_tool(
        &mut self,
        call_id: String,
        tool: std::sync::Arc<crate::tools::registry::RegisteredTool>,
        args: serde_json::Value,
    ) -> Option<Result<ToolOutput, ToolError>> {
        let inline = INLINE.contains(&tool.spec().category);
        let span = self
            .tool_spans
            .get(&call_id)
            .cloned()
            .unwrap_or_else(|| crate::telemetry::tool_span(&self.span, self.deps.metrics.tool_label(tool.name()), &call_id));
        let job = ToolJob {
            tool,
            args,
            ctx: CallContext {
                session_id: self.info.id.clone(),
                call_id: call_id.clone(),
                principal: self.info.principal.clone(),
            },
            span,
        };
        let progress = self.info.wants_events.then(|| {
            let (events, _) = self.progress.get_or_insert_with(|| mpsc::channel(PROGRESS_QUEUE));
            let events = events.clone();
            crate::tools::progress::ProgressSink::new(call_id.clone(), move |event| {
                // Advisory: dropped when the session has not taken the previous ones yet.
                let _ = events.try_send(event);
            })
        });
        let run = crate::tools::progress::scope(progress, job.run());
        let handle = if inline {
            // A panic fails only this call, as it would in a task of its own.
            let mut run = Box::pin(std::panic::AssertUnwindSafe(run).catch_unwind());
            match run.as_mut().now_or_never() {
                Some(finished) => return Some(finished.unwrap_or_else(|_| Err(tool_panicked(&self.span)))),
                None => {
                    let span = self.span.clone();
                    self.tool_tasks.spawn(run.map(move |finished| finished.unwrap_or_else(|_| Err(tool_panicked(&span)))))
                }
            }
        } else {
            self.tool_tasks.spawn(run)
        };
        self.task_calls.insert(handle.id(), call_id);
        None
    }

    pub(super) async fn handle_tool_finished(&mut self, joined: Result<(tokio::task::Id, Result<ToolOutput, ToolError>), tokio::task::JoinError>) {
        let (id, result) = match joined {
            Ok((id, result)) => (id, result),
            Err(err) => {
                if err.is_panic() {
                    tracing::error!(parent: &self.span, "a tool task panicked");
                }
                (err.id(), Err(ToolError::Internal))
            }
        };
        let Some(call_id) = self.task_calls.remove(&id) else { return };
        let actions = self.tool_finished(&call_id, result);
        self.perform(actions).await;
    }

    /// A tool's result, from its task or answered inline, goes to the call table. What the call
    /// reported was queued before it ended; it goes to the client now, so that no turn of the loop
    /// can send the call's end (once audited) ahead of it.
    fn tool_finished(&mut self, call_id: &str, result: Result<ToolOutput, ToolError>) -> Vec<Action> {
        self.pass_on_progress();
        self.calls.on_tool_finished(call_id, result)
    }

    /// Hand the client the progress events the tools have queued.
    pub(super) fn pass_on_progress(&mut self) {
        let Some((_, events)) = &mut self.progress else { return };
        while let Ok(event) = events.try_recv() {
            // Advisory: dropped when the client's queue is full.
            let _ = self.to_client.try_send(Message::text(event));
        }
    }

    pub(super) async fn handle_audited(&mut self, gated: Option<String>, result: Result<(), AuditError>) {
        if let Err(err) = &result {
            tracing::error!(parent: &self.span, error = %err, "audit record could not be written");
            self.deps.metrics.audit_error();
        }
        if let Some(call_id) = gated {
            // `fail_closed`: nothing the call produced is released without its record.
            let actions = match result {
                Err(_) if self.deps.audit.on_error() == crate::config::AuditOnError::FailClosed => self.calls.on_audit_failed(&call_id),
                _ => self.calls.on_audited(&call_id),
            };
            self.perform(actions).await;
        }
    }
}
