//! A loop-level test harness: a real session loop between two in-memory WebSocket pairs (a
//! "browser" and a "model" end the tests drive), under tokio's paused clock, with the loop's turn
//! counter (`voxgate_session_loop_turns_total`) read back to prove the loop sleeps when it has
//! nothing to do. The freeze, spin and gate cases of the session loop are driven here; the
//! protocol guards too, since they are cheapest to reach this way.
//!
//! The audit writer is a long-lived `spawn_blocking` task, and tokio never auto-advances a paused
//! clock while one runs; so the harness runs its own clock task that moves virtual time forward
//! [`CLOCK_SPEEDUP`] times faster than real time. The audit file is real I/O, which a loaded machine
//! can slow down; tied to real time, virtual timeouts stay generous for it, while minutes of
//! session time still pass in seconds.
//!
//! The tests: [`bounds`] (the loop never freezes, never spins, the response gate never blocks
//! tool results), [`guards`] (what a hostile peer cannot do), [`batching`] (a burst costs a
//! few turns, not one per frame), [`closing`] (no call ends without its finish record) and
//! [`progress`] (a call's progress goes out before its end).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use super::{SessionDeps, SessionInfo, SessionOutcome, SessionSettings};
use crate::audit::AuditWriter;
use crate::config::{AuditConfig, Config};
use crate::policy::Principal;
use crate::policy::rate_limit::LocalLimiter;
use crate::telemetry::metrics::Metrics;
use crate::tools::registry::ToolRegistry;
use crate::tools::{CallContext, Category, Risk, Tool, ToolError, ToolOutput, ToolSpec};
use crate::upstream::UpstreamConn;

mod batching;
mod bounds;
mod closing;
mod guards;
mod interrupted;
mod progress;
mod responses;

pub(super) const TOOL: &str = "calculate_medical_score";

/// A response the server starts on its own (server VAD).
static VAD_RESPONSE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
    || json!({"type": "response.created", "event_id": "e", "response": {"id": "resp_vad"}}),
);

/// Virtual time passes this many times faster than real time.
const CLOCK_SPEEDUP: u32 = 10;

/// Drive the paused clock (see the module doc); time stops when the handle is dropped.
fn run_clock() -> AbortOnDropHandle<()> {
    AbortOnDropHandle::new(tokio::spawn(async {
        let tick = Duration::from_millis(1);
        loop {
            // A real millisecond, slept off the runtime's thread so the tasks under test run.
            let _ = tokio::task::spawn_blocking(move || std::thread::sleep(tick)).await;
            tokio::time::advance(tick * CLOCK_SPEEDUP).await;
        }
    }))
}

/// Answers `{"ok": true}` at once.
struct Quick {
    spec: ToolSpec,
}

#[async_trait::async_trait]
impl Tool for Quick {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(&self, _args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::new(json!({"ok": true})))
    }
}

fn quick_tool() -> Arc<dyn Tool> {
    Arc::new(Quick {
        spec: ToolSpec {
            name: TOOL,
            description: "test tool".into(),
            parameters: json!({"type": "object", "additionalProperties": false, "properties": {}}),
            category: Category::Calculation,
            phi: false,
            risk: Risk::Low,
            requires_confirmation: false,
            third_party: false,
            rate_limit_per_minute: 1000,
            timeout: Duration::from_secs(5),
        },
    })
}

pub(super) struct Harness {
    pub(super) browser: WebSocketStream<DuplexStream>,
    pub(super) model: WebSocketStream<DuplexStream>,
    pub(super) metrics: Metrics,
    /// How often the session polled its upstream's stream.
    pub(super) upstream_polls: Arc<AtomicUsize>,
    cancel: CancellationToken,
    session: JoinHandle<SessionOutcome>,
    _audit: (tempfile::TempDir, AuditWriter),
    _clock: AbortOnDropHandle<()>,
}

/// `upstream_buffer`: bytes the in-memory upstream socket holds before a writer blocks (small to
/// model an upstream that stops reading).
async fn start(configure: impl FnOnce(&mut Config), upstream_buffer: usize) -> Harness {
    start_with(configure, upstream_buffer, None, Vec::new()).await
}

/// [`start`] with a connector for resumes (`upstream.resume` is off unless `configure` sets it,
/// and without a connector a session cannot resume anyway).
pub(super) async fn start_with(
    configure: impl FnOnce(&mut Config),
    upstream_buffer: usize,
    reconnect: Option<super::resume::Connect>,
    extra_tools: Vec<Arc<dyn Tool>>,
) -> Harness {
    let mut harness = launch(configure, upstream_buffer, reconnect, extra_tools).await;
    harness.model_sends(json!({"type": "session.created", "event_id": "e0", "session": {"id": "sess_1", "tools": []}})).await;
    harness.model_expects("session.update").await;
    harness.browser_expects("voxgate.session.ready").await;
    harness
}

/// [`start_with`] up to the running session, before the model has said anything (no
/// `session.created` yet).
pub(super) async fn launch(
    configure: impl FnOnce(&mut Config),
    upstream_buffer: usize,
    reconnect: Option<super::resume::Connect>,
    extra_tools: Vec<Arc<dyn Tool>>,
) -> Harness {
    let clock = run_clock();
    let mut config = Config::default();
    config.server.ping_interval_ms = 0;
    config.server.idle_timeout_ms = 0;
    config.upstream.resume = false;
    configure(&mut config);
    let dir = tempfile::tempdir().unwrap();
    let audit_config = AuditConfig {
        path: dir.path().join("audit.jsonl"),
        rotate_bytes: 0,
        ..AuditConfig::default()
    };
    let (audit, writer) = crate::audit::open(&audit_config, Default::default()).await.unwrap();
    let metrics = Metrics::new();
    let deps = session_deps(&config, audit, metrics.clone(), extra_tools);
    let (browser, proxy_client) = pair(1 << 20).await;
    let (proxy_upstream, model) = pair(upstream_buffer).await;
    let upstream_polls = Arc::new(AtomicUsize::new(0));
    let upstream = UpstreamConn::new(CountingReads { socket: proxy_upstream, reads: upstream_polls.clone() }, Duration::ZERO);
    let info = SessionInfo {
        id: "vgs_harness".into(),
        principal: Principal::new("dr.test", vec!["clinician".into()]),
        user: "u_test".into(),
        wants_events: true,
        model: "test".into(),
        origin: Default::default(),
    };
    let cancel = CancellationToken::new();
    let session = tokio::spawn(super::run(
        info,
        tracing::Span::none(),
        proxy_client,
        upstream,
        deps,
        cancel.clone(),
        reconnect,
    ));
    Harness {
        browser,
        model,
        metrics,
        upstream_polls,
        cancel,
        session,
        _audit: (dir, writer),
        _clock: clock,
    }
}

fn session_deps(
    config: &Config,
    audit: crate::audit::AuditHandle,
    metrics: Metrics,
    extra_tools: Vec<Arc<dyn Tool>>,
) -> SessionDeps {
    let tools = std::iter::once(quick_tool()).chain(extra_tools).collect();
    SessionDeps {
        registry: Arc::new(ToolRegistry::from_tools(tools, &config.tools).unwrap()),
        audit,
        metrics,
        limiter: Arc::new(LocalLimiter::new()),
        settings: Arc::new(SessionSettings::from_config(config)),
        drain: CancellationToken::new(),
    }
}

pub(super) fn upstream_conn(ws: WebSocketStream<DuplexStream>) -> UpstreamConn {
    UpstreamConn::new(ws, Duration::ZERO)
}

/// A socket that counts the polls of its reading side (`Harness::upstream_polls`).
struct CountingReads {
    socket: WebSocketStream<DuplexStream>,
    reads: Arc<AtomicUsize>,
}

impl futures::Stream for CountingReads {
    type Item = Result<Message, tungstenite::Error>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.socket.poll_next_unpin(cx)
    }
}

impl futures::Sink<Message> for CountingReads {
    type Error = tungstenite::Error;
    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.socket.poll_ready_unpin(cx)
    }
    fn start_send(mut self: Pin<&mut Self>, item: Message) -> Result<(), Self::Error> {
        self.socket.start_send_unpin(item)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.socket.poll_flush_unpin(cx)
    }
    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.socket.poll_close_unpin(cx)
    }
}

pub(super) async fn pair(buffer: usize) -> (WebSocketStream<DuplexStream>, WebSocketStream<DuplexStream>) {
    let (a, b) = tokio::io::duplex(buffer);
    let a = WebSocketStream::from_raw_socket(a, Role::Client, None).await;
    let b = WebSocketStream::from_raw_socket(b, Role::Server, None).await;
    (a, b)
}

pub(super) async fn expect(ws: &mut WebSocketStream<DuplexStream>, kind: &str) -> Value {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Text(text))) => {
                    let value: Value = serde_json::from_str(&text).unwrap();
                    if value["type"] == kind {
                        return value;
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("socket ended waiting for {kind}: {other:?}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {kind}"))
}

impl Harness {
    /// The session's audit log.
    pub(super) fn audit_path(&self) -> std::path::PathBuf {
        self._audit.0.path().join("audit.jsonl")
    }

    pub(super) async fn model_sends(&mut self, event: Value) {
        self.model
            .send(Message::text(event.to_string()))
            .await
            .unwrap();
    }

    pub(super) async fn browser_sends(&mut self, event: Value) {
        self.browser
            .send(Message::text(event.to_string()))
            .await
            .unwrap();
    }

    /// Voxgate sent the model nothing more: a marker from the browser is the next frame it gets.
    /// `what` names what was not to be sent.
    pub(super) async fn model_gets_nothing_from_voxgate(&mut self, what: &str) {
        self.browser_sends(json!({"type": "input_audio_buffer.clear"})).await;
        let next = loop {
            match self.model.next().await {
                Some(Ok(Message::Text(text))) => break serde_json::from_str::<Value>(&text).unwrap(),
                Some(Ok(_)) => {}
                other => panic!("model socket ended: {other:?}"),
            }
        };
        assert_eq!(next["type"], "input_audio_buffer.clear", "{what}: {next}");
    }

    pub(super) async fn model_expects(&mut self, kind: &str) -> Value {
        expect(&mut self.model, kind).await
    }

    pub(super) async fn browser_expects(&mut self, kind: &str) -> Value {
        expect(&mut self.browser, kind).await
    }

    /// The model calls the server tool; returns once voxgate has sent the output (its item's end
    /// never comes: the call is accepted after `calls::settle::SETTLE_WAIT`).
    pub(super) async fn tool_call(&mut self, call_id: &str) -> Value {
        self.model_calls(call_id, TOOL).await;
        let output = self.model_expects("conversation.item.create").await;
        assert_eq!(output["item"]["call_id"], call_id);
        output
    }

    /// The model calls tool `name` (no arguments) in response `r1`.
    pub(super) async fn model_calls(&mut self, call_id: &str, name: &str) {
        self.model_sends(json!({"type": "response.function_call_arguments.done", "event_id": format!("e_{call_id}"),
            "response_id": "r1", "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id,
            "name": name, "arguments": "{}"}))
        .await;
    }

    /// The user speaks while the model calls the tool; the output goes out during the speech.
    async fn call_while_the_user_speaks(&mut self, call_id: &str) {
        self.model_sends(json!({"type": "input_audio_buffer.speech_started", "event_id": "e", "audio_start_ms": 0, "item_id": "u1"}))
            .await;
        self.tool_call(call_id).await;
        self.model_sends(json!({"type": "input_audio_buffer.speech_stopped", "event_id": "e", "audio_end_ms": 900, "item_id": "u1"}))
            .await;
    }

    /// The model acknowledges voxgate's output item (GA: `conversation.item.added`).
    pub(super) async fn acknowledge(&mut self, call_id: &str) {
        self.model_sends(json!({"type": "conversation.item.added", "event_id": "e_ack", "previous_item_id": null,
            "item": {"id": format!("item_{call_id}"), "type": "function_call_output", "call_id": call_id, "output": "{}"}}))
        .await;
    }

    fn turns(&self) -> u64 {
        let rendered = self.metrics.render();
        rendered
            .lines()
            .find_map(|l| l.strip_prefix("voxgate_session_loop_turns_total "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_default()
    }

    pub(super) async fn ends_within(self, limit: Duration) -> SessionOutcome {
        let Harness {
            session,
            browser,
            model,
            ..
        } = self;
        // The peers stay open (not read) while the session ends on its own.
        let outcome = tokio::time::timeout(limit, session).await;
        drop((browser, model));
        outcome.expect("the session did not end in time").unwrap()
    }
}

// --- freeze ---

/// The close code a peer receives (skipping other frames).
pub(super) async fn close_code(ws: &mut WebSocketStream<DuplexStream>) -> Option<u16> {
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => {}
                _ => return None,
            }
        }
    })
    .await
    .expect("no close frame")
}
