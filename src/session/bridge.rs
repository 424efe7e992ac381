//! The session task: one `select!` over client frames, upstream frames, tool completions, audit
//! flushes, confirmation deadlines and timers. Each arm is a call to a named handler; the frame
//! handlers live in `client_frames.rs` and `upstream_frames.rs`.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Sink, Stream, StreamExt};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

use super::calls::{Action, CallTable};
use super::outbox::Outbox;
use super::runner::ToolJob;
use super::turns::ResponseGate;
use super::{SessionDeps, SessionInfo, SessionOutcome};
use crate::audit::{AuditError, AuditEvent};
use crate::protocol::voxgate as events;
use crate::telemetry::metrics::FrameCounters;
use crate::tools::{CallContext, ToolError, ToolOutput};
use crate::upstream::UpstreamConn;

type AuditAck = BoxFuture<'static, (Option<String>, Result<(), AuditError>)>;

/// How the session is ending.
pub(super) struct Closing {
    pub outcome: SessionOutcome,
    /// Close frame for the client (none when the client is already gone).
    pub client_close: Option<CloseFrame>,
    /// Close frame for the upstream.
    pub upstream_close: Option<CloseFrame>,
    /// Running calls may finish until then.
    pub deadline: Instant,
}

pub(super) struct Bridge {
    pub info: SessionInfo,
    pub deps: SessionDeps,
    pub to_client: Outbox,
    pub to_upstream: Outbox,
    pub calls: CallTable,
    pub gate: ResponseGate,
    pub frames: FrameCounters,
    pub span: tracing::Span,
    /// Names of the client's own tools (from its `session.update`).
    pub client_tools: HashSet<String>,
    /// Server-owned function-call items: item id → call id.
    pub owned_items: HashMap<String, String>,
    /// Server-owned calls seen so far: call id → tool name.
    pub owned_calls: HashMap<String, String>,
    /// voxgate has sent its own tool injection.
    pub injected: bool,
    pub tool_tasks: JoinSet<Result<ToolOutput, ToolError>>,
    pub task_calls: HashMap<tokio::task::Id, String>,
    /// Confirmation deadlines; created on the first one, as an empty timer wheel is ≈ 6 KiB and
    /// most sessions never park a call.
    pub deadlines: Option<DelayQueue<String>>,
    pub audit_acks: FuturesUnordered<AuditAck>,
    pub closing: Option<Closing>,
    pub last_activity: Instant,
    /// The tracing span of each call not yet finished.
    pub tool_spans: HashMap<String, tracing::Span>,
    pub started_at: Instant,
    /// A send to the client timed out: nothing more is sent to it and the session closes (1008).
    pub client_stalled: bool,
}

impl Bridge {
    pub(super) async fn run<C>(
        info: SessionInfo,
        span: tracing::Span,
        client: C,
        upstream: UpstreamConn,
        deps: SessionDeps,
        cancel: CancellationToken,
    ) -> SessionOutcome
    where
        C: Stream<Item = Result<Message, tungstenite::Error>> + Sink<Message> + Send + Unpin + 'static,
    {
        let (client_sink, mut client_rx) = client.split();
        let UpstreamConn { sink: upstream_sink, stream: mut upstream_rx, .. } = upstream;
        let calls = CallTable::new(
            info.id.clone(),
            info.principal.clone(),
            info.user.clone(),
            info.wants_events,
            deps.settings.confirmation_timeout,
            deps.registry.clone(),
        );
        let mut bridge = Bridge {
            frames: deps.metrics.frame_counters(),
            to_client: Outbox::spawn(client_sink),
            to_upstream: Outbox::spawn(upstream_sink),
            calls,
            gate: ResponseGate::default(),
            span,
            client_tools: HashSet::new(),
            owned_items: HashMap::new(),
            owned_calls: HashMap::new(),
            injected: false,
            tool_tasks: JoinSet::new(),
            task_calls: HashMap::new(),
            deadlines: None,
            audit_acks: FuturesUnordered::new(),
            closing: None,
            last_activity: Instant::now(),
            tool_spans: HashMap::new(),
            started_at: Instant::now(),
            client_stalled: false,
            info,
            deps,
        };
        let ping_every = bridge.deps.settings.ping_interval.unwrap_or(Duration::from_secs(3600));
        let mut housekeeping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        let mut client_open = true;
        let mut upstream_open = true;

        loop {
            if bridge.client_stalled && bridge.closing.is_none() {
                bridge.begin_close(SessionOutcome::SlowClient, false).await;
            }
            if let Some(closing) = &bridge.closing {
                let done = bridge.calls.unfinished() == 0 && bridge.audit_acks.is_empty();
                if done {
                    break;
                }
                if Instant::now() >= closing.deadline && bridge.calls.running() > 0 {
                    let actions = bridge.calls.abandon_running();
                    bridge.tool_tasks.abort_all();
                    bridge.perform(actions).await;
                }
            }
            let closing_deadline = bridge.closing.as_ref().map(|c| c.deadline);
            let gate_wake = bridge.gate.wake_at();
            tokio::select! {
                _ = cancel.cancelled(), if bridge.closing.is_none() => {
                    let outcome = if bridge.deps.drain.is_cancelled() { SessionOutcome::Drained } else { SessionOutcome::Killed };
                    bridge.begin_close(outcome, true).await;
                }
                frame = client_rx.next(), if client_open => {
                    bridge.note_activity(&frame);
                    client_open = bridge.handle_client_frame(frame).await;
                }
                frame = upstream_rx.next(), if upstream_open => {
                    bridge.note_activity(&frame);
                    upstream_open = bridge.handle_upstream_frame(frame).await;
                }
                Some(joined) = bridge.tool_tasks.join_next_with_id(), if !bridge.tool_tasks.is_empty() => {
                    bridge.handle_tool_finished(joined).await;
                }
                Some(expired) = next_deadline(&mut bridge.deadlines), if bridge.deadlines.as_ref().is_some_and(|d| !d.is_empty()) => {
                    let actions = bridge.calls.on_expired(expired.get_ref());
                    bridge.perform(actions).await;
                }
                Some((gated, result)) = bridge.audit_acks.next(), if !bridge.audit_acks.is_empty() => {
                    bridge.handle_audited(gated, result).await;
                    // Results flushed together are answered together: one response.create.
                    while let Some(Some((gated, result))) = bridge.audit_acks.next().now_or_never() {
                        bridge.handle_audited(gated, result).await;
                    }
                }
                _ = sleep_until_opt(gate_wake), if gate_wake.is_some() => {}
                _ = sleep_until_opt(closing_deadline), if closing_deadline.is_some() => {}
                _ = housekeeping.tick() => bridge.housekeeping().await,
            }
            bridge.request_response_if_due().await;
            if bridge.closing.is_none() && (bridge.to_client.is_closed() || !client_open) {
                // The client is gone: nobody can confirm or hear anything more.
                let frame = close_frame(CloseCode::Away, "client went away");
                bridge.begin_close_with(SessionOutcome::ClientClosed, None, Some(frame)).await;
            }
            if bridge.closing.is_none() && (bridge.to_upstream.is_closed() || !upstream_open) {
                let frame = close_frame(CloseCode::Error, "the realtime service closed the session");
                bridge.begin_close_with(SessionOutcome::UpstreamClosed, Some(frame), None).await;
            }
        }
        bridge.finish().await
    }

    /// Start closing: decline parked calls, tell the client, let running calls finish.
    pub(super) async fn begin_close(&mut self, outcome: SessionOutcome, notify: bool) {
        let reason = match outcome {
            SessionOutcome::Drained => "service restart",
            SessionOutcome::Killed => "ended by an administrator",
            SessionOutcome::IdleTimeout => "idle timeout",
            SessionOutcome::SlowClient => "client too slow",
            _ => "session ended",
        };
        if notify && self.info.wants_events {
            let _ = self.to_client.try_send(Message::text(events::session_closing(reason)));
        }
        let code = match outcome {
            SessionOutcome::Drained => CloseCode::Restart,
            SessionOutcome::SlowClient => CloseCode::Policy,
            _ => CloseCode::Normal,
        };
        let frame = close_frame(code, reason);
        self.begin_close_with(outcome, Some(frame.clone()), Some(frame)).await;
    }

    pub(super) async fn begin_close_with(
        &mut self,
        outcome: SessionOutcome,
        client_close: Option<CloseFrame>,
        upstream_close: Option<CloseFrame>,
    ) {
        if self.closing.is_some() {
            return;
        }
        self.closing = Some(Closing {
            outcome,
            client_close,
            upstream_close,
            deadline: Instant::now() + self.deps.settings.drain_timeout,
        });
        let actions = self.calls.close_parked();
        self.perform(actions).await;
    }

    async fn finish(self) -> SessionOutcome {
        let Bridge { to_client, to_upstream, closing, span, started_at, .. } = self;
        let (outcome, client_close, upstream_close) = match closing {
            Some(c) => (c.outcome, c.client_close, c.upstream_close),
            None => (SessionOutcome::ClientClosed, None, None),
        };
        let within = Duration::from_secs(2);
        tokio::join!(to_client.close(client_close, within), to_upstream.close(upstream_close, within));
        crate::telemetry::record_session_outcome(&span, outcome.as_str(), started_at.elapsed());
        outcome
    }

    /// Perform what the call table decided, in order.
    pub(super) async fn perform(&mut self, actions: Vec<Action>) {
        for action in actions {
            match action {
                Action::Client(event) => self.send_client_event(event).await,
                Action::Audit { record, gates } => {
                    self.observe(&record);
                    let ack = self.deps.audit.record(record);
                    self.audit_acks.push(async move { (gates, ack.await) }.boxed());
                }
                Action::Spawn { call_id, tool, args } => self.spawn_tool(call_id, tool, args),
                Action::Expire { call_id, after } => {
                    self.deadlines.get_or_insert_with(DelayQueue::new).insert(call_id, after);
                }
                Action::Output { call_id, output } => {
                    let frame = events::function_call_output(&call_id, &output);
                    if self.to_upstream.send(Message::text(frame)).await.is_ok() {
                        self.gate.on_output_sent();
                    }
                }
            }
        }
    }

    /// Metrics, the tool span and its log line for an audit record about to be written.
    fn observe(&mut self, record: &crate::audit::AuditRecord) {
        let metrics = &self.deps.metrics;
        if record.event == AuditEvent::CallStarted {
            metrics.audit_record("call_started");
            let span = crate::telemetry::tool_span(&self.span, &record.tool, &record.call_id);
            self.tool_spans.insert(record.call_id.clone(), span);
            return;
        }
        metrics.audit_record("call_finished");
        let status = record.status.map(|s| s.as_str()).unwrap_or("failed");
        let confirmation = record.confirmation.map(|c| c.as_str()).unwrap_or("not_required");
        let error_code = record.error_code.as_deref().and_then(static_code);
        let ran = matches!(status, "completed" | "failed") && error_code.is_none_or(|c| !matches!(c, "unknown_tool" | "invalid_arguments" | "permission_denied"));
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
        if let Some(span) = self.tool_spans.remove(&record.call_id) {
            crate::telemetry::record_tool_outcome(&span, status, confirmation, error_code, duration);
        }
    }

    fn spawn_tool(&mut self, call_id: String, tool: std::sync::Arc<crate::tools::registry::RegisteredTool>, args: serde_json::Value) {
        let span = self
            .tool_spans
            .get(&call_id)
            .cloned()
            .unwrap_or_else(|| crate::telemetry::tool_span(&self.span, tool.name(), &call_id));
        let job = ToolJob {
            tool,
            args,
            ctx: CallContext {
                session_id: self.info.id.clone(),
                call_id: call_id.clone(),
                principal: self.info.principal.clone(),
            },
            user: self.info.user.clone(),
            limiter: self.deps.limiter.clone(),
            span,
        };
        let progress = self.info.wants_events.then(|| crate::tools::progress::ProgressSink::new(call_id.clone(), self.to_client.sender()));
        let handle = self.tool_tasks.spawn(crate::tools::progress::scope(progress, job.run()));
        self.task_calls.insert(handle.id(), call_id);
    }

    async fn handle_tool_finished(&mut self, joined: Result<(tokio::task::Id, Result<ToolOutput, ToolError>), tokio::task::JoinError>) {
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
        let actions = self.calls.on_tool_finished(&call_id, result);
        self.perform(actions).await;
    }

    async fn handle_audited(&mut self, gated: Option<String>, result: Result<(), AuditError>) {
        if let Err(err) = &result {
            // The result still goes out: the tool has run, and hiding it would lose data.
            tracing::error!(parent: &self.span, error = %err, "audit record could not be written");
            self.deps.metrics.audit_error();
        }
        if let Some(call_id) = gated {
            let actions = self.calls.on_audited(&call_id);
            self.perform(actions).await;
        }
    }

    /// Send `response.create` if the gate says the model should now answer with our outputs.
    async fn request_response_if_due(&mut self) {
        if self.closing.is_some() {
            return;
        }
        if let Some(event_id) = self.gate.try_request(Instant::now(), events::event_id) {
            let _ = self.to_upstream.send(Message::text(events::response_create(&event_id))).await;
        }
    }

    /// A frame in either direction keeps the session from idling out; keep-alive traffic (our
    /// pings' pongs) does not.
    fn note_activity(&mut self, frame: &Option<Result<Message, tungstenite::Error>>) {
        if !matches!(frame, Some(Ok(Message::Ping(_) | Message::Pong(_)))) {
            self.last_activity = Instant::now();
        }
    }

    async fn housekeeping(&mut self) {
        if self.deps.settings.ping_interval.is_some() {
            let _ = self.to_client.try_send(Message::Ping(Default::default()));
        }
        if let Some(idle) = self.deps.settings.idle_timeout {
            if self.closing.is_none() && self.last_activity.elapsed() >= idle {
                self.begin_close(SessionOutcome::IdleTimeout, true).await;
            }
        }
    }

    /// Send a `voxgate.*` event, if this client asked for them.
    pub(super) async fn send_client_event(&mut self, event: String) {
        if self.info.wants_events {
            self.send_client(Message::text(event)).await;
        }
    }

    /// Send a frame to the client; a client that stops reading for too long is closed (1008).
    pub(super) async fn send_client(&mut self, message: Message) {
        if self.client_stalled {
            return;
        }
        let timeout = self.deps.settings.client_send_timeout;
        if tokio::time::timeout(timeout, self.to_client.send(message)).await.is_err() {
            // The loop closes the session (1008) at its next turn; closing from here would
            // recurse through `begin_close`, which itself sends to the client.
            tracing::warn!(parent: &self.span, "client is not reading; closing the session");
            self.client_stalled = true;
        }
    }

    /// Send a frame upstream (waits while the upstream's queue is full: backpressure).
    pub(super) async fn send_upstream(&mut self, message: Message) {
        let _ = self.to_upstream.send(message).await;
    }

    /// The standard `error` event to the client.
    pub(super) async fn client_error(&mut self, code: &'static str, message: &str, event_id: Option<&str>) {
        self.deps.metrics.client_error(code);
        self.send_client(Message::text(events::error_event(code, message, event_id))).await;
    }
}

/// The `&'static` form of a CONTRACT error code (metrics labels are static).
fn static_code(code: &str) -> Option<&'static str> {
    const CODES: [&str; 8] = [
        "unknown_tool", "invalid_arguments", "permission_denied", "rate_limited",
        "phi_blocked", "timeout", "backend_error", "internal_error",
    ];
    CODES.iter().copied().find(|c| *c == code)
}

pub(super) fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame { code, reason: reason.to_string().into() }
}

async fn next_deadline(deadlines: &mut Option<DelayQueue<String>>) -> Option<tokio_util::time::delay_queue::Expired<String>> {
    match deadlines {
        Some(deadlines) => deadlines.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
