//! The session task: one `select!` over client frames, upstream frames, tool completions, audit
//! flushes, confirmation deadlines and timers. Each arm is a call to a named handler; the frame
//! handlers live in `client_frames.rs` and `upstream_frames.rs`, the call table's actions in
//! `tool_actions.rs`, resuming on a new upstream in `resume/`.
//!
//! Two rules keep the loop honest on a bad day. It never freezes: every wait on a peer is bounded
//! (a send the upstream does not take within `upstream.send_timeout_ms` ends the session, the
//! upstream is pinged and a missing pong ends it, closing is bounded by the drain timeout plus a
//! grace). It never spins: a timer is armed only when its firing can change state (the speech
//! grace only while nothing else holds the response gate shut, the close deadline only while calls
//! run or are approved), so an idle session sleeps until a frame or a real deadline.

use std::collections::{HashMap, HashSet};
use std::task::Poll;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, Sink, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::time::DelayQueue;

use super::deadlines::{Deadlines, Due};
use super::gated::Gated;
use super::calls::CallTable;
use super::closing::{CLOSE_GRACE, CloseStep, Closing, close_step};
use super::outbox::{FrameResult, Outbox, PeerIo};
use super::pace::FramePace;
use super::resume::{Connect, Reason, Resume};
use super::turns::ResponseGate;
use super::{SessionDeps, SessionInfo, SessionOutcome};
use crate::audit::AuditError;
use crate::protocol::server::ToolChoice;
use crate::protocol::voxgate as events;
use crate::telemetry::metrics::FrameCounters;
use crate::tools::{ToolError, ToolOutput};
use crate::upstream::UpstreamConn;

type AuditAck = BoxFuture<'static, (Option<String>, Result<(), AuditError>)>;

/// Which peer a burst of frames came from.
#[derive(Clone, Copy)]
enum Peer {
    Client,
    Upstream,
}

/// Frames still read from an upstream whose write side failed, at most.
const TAKE_IN_AT_MOST: usize = 256;

/// Frames already received from a peer that one turn handles after the one that woke it, at
/// most. A bare relay (`StreamExt::forward`) reads until its socket has nothing more and then
/// flushes once; so does the session, for up to this many frames, so that a burst (a peer
/// catching up after a stall, many frames in one TCP segment) costs one write, not one per frame,
/// and timers and tool completions still get a turn.
const READY_BATCH: usize = 32;

/// A call's output on its way to the model, until the upstream acknowledges its item (or refuses
/// it).
pub(super) struct PendingOutput {
    /// The frame's `event_id`: an upstream `error` naming it refuses the output.
    pub event_id: String,
    pub frame: String,
}

pub(super) struct Bridge {
    pub info: SessionInfo,
    pub deps: SessionDeps,
    pub to_client: Outbox,
    pub to_upstream: Outbox,
    /// Tool progress events for the client, from the tool tasks; created with the first tool
    /// task that can report progress.
    pub progress: Option<(mpsc::Sender<String>, mpsc::Receiver<String>)>,
    pub calls: CallTable,
    pub gate: ResponseGate,
    pub frames: FrameCounters,
    pub span: tracing::Span,
    /// Names of the client's own tools (from its `session.update` and `response.create`s).
    pub client_tools: super::client_frames::ClientTools,
    /// Server-owned function-call items: item id → call id.
    pub owned_items: HashMap<String, String>,
    /// Call ids and item ids of the client's own function calls whose items are announced and not
    /// done: an arguments event that names no tool is forwarded only for one of these.
    pub client_calls: HashSet<String>,
    /// Server-owned calls seen so far: call id → tool name.
    pub owned_calls: HashMap<String, String>,
    /// The server tools are in the upstream session: voxgate sent its own injection, or the
    /// upstream accepted (`session.updated`) a client update they were merged into.
    pub injected: bool,
    /// A client `session.update` the server tools were merged into before they were in the
    /// session, forwarded and not yet accepted: its `event_id` (voxgate's own when the client gave
    /// none). The upstream rejects an update as a whole: an `error` naming it means voxgate
    /// injects them itself.
    pub merged_update: Option<String>,
    /// The client's own ids of the `session.update`s forwarded under voxgate's (see
    /// [`super::update_ids`]).
    pub update_ids: super::update_ids::UpdateIds,
    /// The session's `tool_choice`, as the upstream's last `session.created`/`.updated` that
    /// carried one: voxgate's own `response.create` must not inherit a forced one
    /// (`events::response_create`).
    pub tool_choice: ToolChoice,
    pub tool_tasks: JoinSet<Result<ToolOutput, ToolError>>,
    pub task_calls: HashMap<tokio::task::Id, String>,
    /// Confirmation deadlines, and the wait of a call held until its item ends (calls/settle.rs);
    /// created on the first, as an empty timer wheel is ≈ 6 KiB and most sessions never make a
    /// server call.
    pub deadlines: Option<DelayQueue<String>>,
    pub audit_acks: FuturesUnordered<AuditAck>,
    pub closing: Option<Closing>,
    pub last_activity: Instant,
    /// The tracing span of each call not yet finished.
    pub tool_spans: HashMap<String, tracing::Span>,
    pub started_at: Instant,
    /// A send to the client timed out: nothing more is sent to it and the session closes (1008).
    pub client_stalled: bool,
    /// A send to the upstream timed out: nothing more is sent to it and the session closes.
    pub upstream_stalled: bool,
    /// When voxgate sent the upstream a ping no pong has answered yet.
    pub upstream_ping_since: Option<Instant>,
    /// Outputs due to the upstream whose item it has not acknowledged yet, queued or not: call id
    /// → the output (sent again on a new upstream if the old one went away before acknowledging it).
    pub unacknowledged_outputs: HashMap<String, PendingOutput>,
    /// The conversation log and the state of a resume (sessions that outlive their upstream).
    pub resume: Resume,
    /// The client frame-rate ceiling, when configured.
    pub pace: Option<FramePace>,
    /// This session's token (drain or admin kill): also ends a send blocked on the upstream.
    pub cancel: CancellationToken,
}

impl Bridge {
    pub(super) async fn run<C>(
        info: SessionInfo,
        span: tracing::Span,
        client: C,
        upstream: UpstreamConn,
        deps: SessionDeps,
        cancel: CancellationToken,
        reconnect: Option<Connect>,
    ) -> SessionOutcome
    where
        C: Stream<Item = Result<Message, tungstenite::Error>> + Sink<Message, Error = tungstenite::Error> + Send + Unpin + 'static,
    {
        let calls = CallTable::new(
            info.id.clone(),
            info.principal.clone(),
            info.user.clone(),
            info.wants_events,
            deps.settings.confirmation_timeout,
            deps.registry.clone(),
        )
        .with_origin(info.origin.clone())
        .with_audit(deps.audit.clone());
        let mut bridge = Bridge {
            frames: deps.metrics.frame_counters(),
            // Each socket is read only when it has something (or may have more): a frame from one
            // peer does not poll the other's socket (see `gated.rs`, `outbox.rs`).
            to_client: Outbox::new(Box::pin(client)),
            to_upstream: Outbox::new(upstream.socket),
            calls,
            gate: ResponseGate::default(),
            span,
            client_tools: Default::default(),
            owned_items: HashMap::new(),
            client_calls: HashSet::new(),
            owned_calls: HashMap::new(),
            injected: false,
            merged_update: None,
            update_ids: Default::default(),
            tool_choice: ToolChoice::default(),
            progress: None,
            tool_tasks: JoinSet::new(),
            task_calls: HashMap::new(),
            deadlines: None,
            audit_acks: FuturesUnordered::new(),
            closing: None,
            last_activity: Instant::now(),
            tool_spans: HashMap::new(),
            started_at: Instant::now(),
            client_stalled: false,
            upstream_stalled: false,
            upstream_ping_since: None,
            unacknowledged_outputs: HashMap::new(),
            resume: Resume::new(deps.settings.resume.clone(), reconnect),
            pace: deps.settings.max_client_frames_per_s.map(|limit| FramePace::new(limit, Instant::now())),
            cancel: cancel.clone(),
            info,
            deps,
        };
        let mut client_open = true;
        let mut upstream_open = true;
        // A session ends with the token that admitted it (a fresh token opens a new one).
        let auth_expires = bridge.info.principal.expires_at.map(|exp| {
            let now_unix = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            Instant::now() + Duration::from_secs(exp.saturating_sub(now_unix))
        });
        // Every deadline behind one timer kept across turns (deadlines.rs). With pings off there
        // is no periodic work at all.
        let mut deadlines = Deadlines::new(Instant::now(), bridge.deps.settings.ping_interval, auth_expires);
        // Read here, not behind the shared settings on every turn (a pointer chase to a cold line).
        let idle_timeout = bridge.deps.settings.idle_timeout;
        // One cancellation waiter for the session's life, not one registered and dropped per turn.
        // Polled only when the token wakes it, not on every frame (see `gated.rs`).
        let mut cancelled = Gated::new(Box::pin(cancel.cancelled()));
        // Read once after each turn's wait (see the end of the loop) for the checks that follow
        // it; the next turn's deadlines are set from the same reading, as no wait comes between.
        let mut now = Instant::now();

        loop {
            bridge.frames.loop_turn();
            if bridge.client_stalled && bridge.closing.is_none() {
                bridge.begin_close(SessionOutcome::SlowClient, false).await;
            }
            if bridge.upstream_stalled && bridge.closing.is_none() {
                bridge.upstream_gone("the realtime service stopped reading").await;
            }
            if bridge.resume.overflowed() {
                bridge.give_up_resume().await;
            }
            if let Some(closing) = &bridge.closing {
                let step = close_step(
                    Instant::now(),
                    closing.deadline,
                    bridge.calls.unfinished(),
                    bridge.calls.running(),
                    !bridge.audit_acks.is_empty(),
                );
                match step {
                    CloseStep::Done => break,
                    CloseStep::Wait => {}
                    CloseStep::Abandon => bridge.abandon_running().await,
                    CloseStep::End { abandon } => {
                        if abandon {
                            bridge.abandon_running().await;
                        }
                        tracing::warn!(parent: &bridge.span, "session outlived its close deadline; ending it");
                        break;
                    }
                }
            }
            // Armed only while firing it changes something: running calls are abandoned at the
            // deadline; after that, only the hard end of the grace is left to wait for.
            deadlines.closing = bridge.closing.as_ref().map(|c| {
                if bridge.calls.running() > 0 { c.deadline } else { c.deadline + CLOSE_GRACE }
            });
            deadlines.gate = bridge.gate.wake_at();
            // Armed only until it passes (the age, or the end of a grace that keeps the moment from
            // being quiet): after that the quiet moment is checked on each turn.
            deadlines.age = bridge.recycle_wake_at().filter(|at| *at > now);
            // Armed at the deadline the last activity gave when it was armed; activity since then
            // only moves the deadline, which is looked at when this one passes (not every frame).
            if let (Some(idle), None) = (idle_timeout, deadlines.idle) {
                deadlines.idle = Some(bridge.last_activity + idle);
            }
            deadlines.arm(bridge.closing.is_some());
            let reading_upstream = upstream_open && !bridge.resume.in_gap();
            tokio::select! {
                _ = &mut cancelled, if bridge.closing.is_none() => {
                    let outcome = if bridge.deps.drain.is_cancelled() { SessionOutcome::Drained } else { SessionOutcome::Killed };
                    bridge.begin_close(outcome, true).await;
                }
                // One arm per peer, reading and writing its socket: a socket that had no room for
                // everything queued is written as soon as it has (a failure is noticed below, as a
                // closed outbox).
                io = bridge.to_client.next_io(client_open), if client_open || bridge.to_client.has_work() => {
                    if let PeerIo::Frame(frame) = io {
                        client_open = bridge.handle_burst(Peer::Client, frame).await;
                    }
                }
                io = bridge.to_upstream.next_io(reading_upstream), if reading_upstream || bridge.to_upstream.has_work() => {
                    if let PeerIo::Frame(frame) = io {
                        upstream_open = bridge.handle_burst(Peer::Upstream, frame).await;
                    }
                }
                connected = bridge.resume.next_connection(), if bridge.resume.connecting() && bridge.closing.is_none() => {
                    if bridge.on_connection(connected).await {
                        upstream_open = true;
                    }
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
                // The close deadline and the upstream's age are looked at on every turn.
                due = deadlines.due(), if deadlines.armed() => bridge.on_due(due).await,
                Some(event) = next_progress(&mut bridge.progress), if bridge.progress.is_some() => {
                    // Progress is advisory: dropped when the client's queue is full.
                    let _ = bridge.to_client.try_send(Message::text(event));
                }
            }
            now = Instant::now();
            bridge.request_response_if_due(now).await;
            bridge.recycle_if_due(now).await;
            // What this turn queued goes out now, like a bare relay writing what it just read.
            bridge.to_client.drive_now();
            bridge.to_upstream.drive_now();
            if bridge.closing.is_none() && (bridge.to_client.is_closed() || !client_open) {
                // The client is gone: nobody can confirm or hear anything more.
                let frame = close_frame(CloseCode::Away, "client went away");
                bridge.begin_close_with(SessionOutcome::ClientClosed, None, Some(frame)).await;
            }
            if bridge.closing.is_none() && !bridge.resume.in_gap() && (bridge.to_upstream.is_closed() || !upstream_open) {
                if upstream_open {
                    // Only the write failed: what the upstream sent before it went (an answer, the
                    // acknowledgement of an update) is already here and still the client's.
                    upstream_open = bridge.take_in_what_arrived().await;
                }
                if bridge.closing.is_none() && !bridge.resume.in_gap() {
                    let frame = close_frame(CloseCode::Error, "the realtime service closed the session");
                    bridge.upstream_lost(Reason::UpstreamClosed, Some(frame)).await;
                }
            }
            if bridge.closing.is_some() {
                // Nothing more is forwarded: a stalled peer must not hold the close up.
                client_open = false;
                upstream_open = false;
            }
        }
        // Boxed: closing both sockets is the largest state the session ever awaits (it holds the
        // bridge itself and two bounded closes), and inline it would size the task's allocation,
        // and so every session's memory, for the whole session (docs/performance-history.md, twelfth pass).
        Box::pin(bridge.finish()).await
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

    /// Deadlines came due (the close deadline and the upstream's age are looked at every turn).
    async fn on_due(&mut self, due: Due) {
        let now = Instant::now();
        if due.gate {
            self.gate.on_tick(now);
        }
        // Activity may have moved the idle deadline since it was armed; the next turn re-arms it.
        let idle = self.deps.settings.idle_timeout.is_some_and(|idle| now >= self.last_activity + idle);
        if due.idle && idle && self.closing.is_none() {
            self.begin_close(SessionOutcome::IdleTimeout, true).await;
        }
        if due.auth && self.closing.is_none() {
            self.begin_close(SessionOutcome::AuthExpired, true).await;
        }
        if due.ping {
            self.frames.flush();
            self.ping().await;
        }
    }

    /// Handle the upstream frames that are already received, without waiting for more (and at
    /// most [`TAKE_IN_AT_MOST`]: a broken connection sends nothing new); false once the upstream's
    /// stream has ended.
    async fn take_in_what_arrived(&mut self) -> bool {
        for _ in 0..TAKE_IN_AT_MOST {
            // With the task's waker, as in `handle_burst`: the gated stream keeps it registered.
            match futures::poll!(self.to_upstream.next_frame()) {
                Poll::Pending => return true,
                Poll::Ready(None) => return false,
                Poll::Ready(frame) => {
                    if !self.handle_upstream_frame(frame).await {
                        return false;
                    }
                }
            }
        }
        true
    }

    /// Send `response.create` if the gate says the model should now answer with our outputs.
    async fn request_response_if_due(&mut self, now: Instant) {
        if self.closing.is_some() || self.resume.in_gap() {
            return;
        }
        if let Some(event_id) = self.gate.try_request(now, events::event_id) {
            let forced = self.tool_choice == ToolChoice::Forced;
            self.send_upstream(Message::text(events::response_create(&event_id, forced))).await;
        }
    }

    /// Handle the frame that woke the turn and then the frames already received behind it (at
    /// most [`READY_BATCH`]), so that what they queue goes out together at the turn's end. Stops
    /// once the session is closing, a peer stalled, the upstream failed or is being replaced: the
    /// loop's next turn handles each. False when that peer's side has ended.
    async fn handle_burst(&mut self, from: Peer, first: Option<FrameResult>) -> bool {
        let mut frame = first;
        let mut left = READY_BATCH;
        // Frames handled together arrived together: one clock reading for the burst.
        let arrived = Instant::now();
        loop {
            self.note_activity(&frame, arrived);
            let open = match from {
                Peer::Client => self.handle_client_frame(frame).await,
                Peer::Upstream => self.handle_upstream_frame(frame).await,
            };
            // A failed upstream too: each frame more would be kept past the queue's byte budget.
            let forwarding = self.closing.is_none()
                && !self.client_stalled
                && !self.upstream_stalled
                && !self.to_upstream.is_closed()
                && !self.resume.in_gap();
            if !open || left == 0 || !forwarding {
                return open;
            }
            // Polled with the task's own waker (not `now_or_never`'s no-op one), which the gated
            // stream then keeps registered for the next wake-up.
            let source = match from {
                Peer::Client => &mut self.to_client,
                Peer::Upstream => &mut self.to_upstream,
            };
            let Poll::Ready(next) = futures::poll!(source.next_frame()) else { return true };
            left -= 1;
            frame = next;
        }
    }

    /// A frame in either direction keeps the session from idling out; keep-alive traffic (our
    /// pings' pongs) does not.
    fn note_activity(&mut self, frame: &Option<FrameResult>, arrived: Instant) {
        if !matches!(frame, Some(Ok(Message::Ping(_) | Message::Pong(_)))) {
            self.last_activity = arrived;
        }
    }
}

/// The `&'static` form of a CONTRACT error code (metrics labels are static).
pub(super) fn close_frame(code: CloseCode, reason: &str) -> CloseFrame {
    CloseFrame { code, reason: reason.to_string().into() }
}

async fn next_deadline(deadlines: &mut Option<DelayQueue<String>>) -> Option<tokio_util::time::delay_queue::Expired<String>> {
    match deadlines {
        Some(deadlines) => deadlines.next().await,
        None => std::future::pending().await,
    }
}

async fn next_progress(progress: &mut Option<(mpsc::Sender<String>, mpsc::Receiver<String>)>) -> Option<String> {
    match progress {
        // The bridge holds a sender, so this never ends.
        Some((_, events)) => events.recv().await,
        None => std::future::pending().await,
    }
}
