//! Typed Prometheus handles: every metric name of CONTRACT §6 (and the operator extras) lives here,
//! registered once in [`Metrics::new`] and rendered for `GET /metrics` by [`Metrics::render`].
//!
//! Label values are `&'static str` (codes, outcomes, directions: fixed sets written in the code) or
//! a tool name mapped onto the tools this process knows ([`KNOWN_TOOLS`] and the MCP tools its
//! configuration allows, [`Metrics::with_tools`]), so no user or model text can ever become a label.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry, Unit};

pub use super::frame_counters::{FLUSH_EVERY, FrameCounters};
use crate::session::SessionOutcome;
use crate::tools::KNOWN_TOOLS;

/// Content type of [`Metrics::render`]: the classic Prometheus text format (CONTRACT §2), read by
/// every Prometheus, `promtool check metrics` and text parser.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Content type of [`Metrics::render_openmetrics`], for a scraper that asks for OpenMetrics.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A tool's label on metrics and spans: the name of a tool this process knows, or [`OTHER_TOOL`].
/// Made only by [`Metrics::tool_label`], so a name the model made up (which may hold patient
/// data) cannot reach a series or a trace by mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLabel(&'static str);

impl ToolLabel {
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// Label value used for a tool name this process does not know (a model inventing a tool name must
/// not create a series, nor put its text into one).
pub const OTHER_TOOL: &str = "other";

/// Tool-call durations: 1 ms (calculators) to 30 s (the default tool timeout).
const TOOL_DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// Upstream WebSocket connect (DNS + TCP + TLS + upgrade): 10 ms to 10 s (the connect timeout).
const CONNECT_BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// One audit group commit (write + fdatasync): 0.1 ms (a fast SSD) to 2.5 s (a disk in trouble).
const AUDIT_COMMIT_BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Series created at zero on start (with every `SessionOutcome`) so every CONTRACT name is in the
/// first scrape and ratios and `rate()` have both sides from the beginning. Other label values
/// appear on first use.
const TOOL_STATUSES: [&str; 4] = ["completed", "failed", "declined", "expired"];
const CONFIRMATION_DECISIONS: [&str; 3] = ["approved", "declined", "expired"];
const AUDIT_EVENTS: [&str; 2] = ["call_started", "call_finished"];

type Labels1 = [(&'static str, &'static str); 1];
type Labels2 = [(&'static str, &'static str); 2];
type HistogramFamily = Family<Labels1, Histogram, fn() -> Histogram>;

fn tool_duration_histogram() -> Histogram {
    Histogram::new(TOOL_DURATION_BUCKETS)
}

/// The process-wide metrics. Cloning is an `Arc` bump; hand clones to the server and sessions.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    /// Owns the descriptors; the handles below share their atomics with it.
    registry: Registry,
    sessions_active: Gauge,
    sessions_total: Family<Labels1, Counter>,
    tool_calls_total: Family<Labels2, Counter>,
    tool_errors_total: Family<Labels2, Counter>,
    tool_duration: HistogramFamily,
    tool_confirmations_total: Family<Labels2, Counter>,
    /// Resolved once so a session's flush needs no label lookup (see [`FrameCounters`]).
    frames_client_to_upstream: Counter,
    frames_upstream_to_client: Counter,
    upstream_connect: Histogram,
    upstream_connect_failures_total: Family<Labels1, Counter>,
    /// Upstream sessions replaced by a resume, by `reason` and `outcome` (CONTRACT §9).
    upstream_resumes_total: Family<Labels2, Counter>,
    rate_limited_total: Family<Labels1, Counter>,
    redis_fallback_total: Family<Labels1, Counter>,
    phi_blocked_total: Family<Labels1, Counter>,
    client_errors_total: Family<Labels1, Counter>,
    audit_records_total: Family<Labels1, Counter>,
    audit_errors_total: Counter,
    /// Every server tool answer waits for one of these (the record must be durable first).
    audit_commit: Histogram,
    /// How long the commit under way has been running (0: none); a hung disk shows here while the
    /// histogram, observed only when a commit returns, sees nothing.
    audit_commit_running: Gauge<f64, AtomicU64>,
    http_rejections_total: Family<Labels1, Counter>,
    /// 1 while Redis answers (cluster registry, caps), 0 when it is down or not configured.
    redis_up: Gauge,
    instance_id_conflict: Gauge,
    /// `voxgate_instance_info{instance_id} 1`: joins this target's series to its instance name.
    instance_info: Family<[(&'static str, String); 1], Gauge>,
    /// Connections and sessions on each session thread (`thread` is its index): the load the
    /// accept loop places by, so an uneven spread shows.
    session_thread_load: Family<[(&'static str, String); 1], Gauge>,
    /// Turns of every session loop: a rate far above the frame rate means a loop is spinning.
    session_loop_turns_total: Counter,
    /// Upstream frames dropped as forged: a `voxgate.` type, two `type` keys, or no readable one.
    upstream_forged_events_total: Counter,
    /// Audit streams found holding another epoch of the log (the mirror moved to a new key).
    audit_stream_epochs_total: Counter,
    /// Audit lines a mirror catch-up did not send: it started `maxlen` lines below the last one.
    audit_stream_skipped_lines_total: Counter,
    /// The tool label values: [`KNOWN_TOOLS`], then the configured MCP tools.
    tools: Vec<&'static str>,
}

/// Keeps `voxgate_sessions_active` raised while alive; dropping it lowers the gauge, so a session
/// that ends by panic or cancellation is still not counted as active forever.
#[derive(Debug)]
#[must_use = "the session counts as active only while this guard lives"]
pub struct ActiveSession {
    gauge: Gauge,
}

impl Drop for ActiveSession {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// Registers `metric` and hands back the handle that shares its atomics.
fn register<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// [`register`] with the `seconds` unit, which the encoder appends to the name.
fn register_seconds<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    r.register_with_unit(name, help, Unit::Seconds, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

// === impl Metrics ===

impl Metrics {
    /// The built-in tools' labels only.
    pub fn new() -> Self {
        Self::with_tools(&[])
    }

    /// `mcp_tools`: the model-facing names of the MCP tools the configuration allows
    /// ([`crate::mcp::tool_names`]). A set the operator wrote, so each may be a label, and each
    /// gets its series at zero like a built-in tool.
    // A table: every name, its help and its type, one metric per entry.
    #[rustfmt::skip]
    pub fn with_tools(mcp_tools: &[&'static str]) -> Self {
        let mut r = Registry::default();
        let frames: Family<Labels1, Counter> = register(&mut r, "voxgate_frames",
            "WebSocket frames relayed, by direction", Family::default());
        // Counter names are registered without `_total`: the encoder appends it.
        let inner = Inner {
            sessions_active: register(&mut r, "voxgate_sessions_active",
                "Voice sessions currently open", Gauge::default()),
            sessions_total: register(&mut r, "voxgate_sessions",
                "Voice sessions ended, by outcome (client_closed, upstream_error, drained, ...)",
                Family::default()),
            tool_calls_total: register(&mut r, "voxgate_tool_calls",
                "Server tool calls finished, by tool and status (completed, failed, declined, expired)",
                Family::default()),
            tool_errors_total: register(&mut r, "voxgate_tool_errors",
                "Failed server tool calls, by tool and error code", Family::default()),
            tool_duration: register_seconds(&mut r, "voxgate_tool_duration",
                "Server tool call duration from start of execution to result, by tool",
                Family::new_with_constructor(tool_duration_histogram)),
            tool_confirmations_total: register(&mut r, "voxgate_tool_confirmations",
                "Confirmation outcomes of calls that needed one, by tool and decision",
                Family::default()),
            frames_client_to_upstream:
                frames.get_or_create_owned(&[("direction", "client_to_upstream")]),
            frames_upstream_to_client:
                frames.get_or_create_owned(&[("direction", "upstream_to_client")]),
            upstream_connect: register_seconds(&mut r, "voxgate_upstream_connect",
                "Time to open the upstream realtime WebSocket (successful connects)",
                Histogram::new(CONNECT_BUCKETS)),
            upstream_connect_failures_total: register(&mut r, "voxgate_upstream_connect_failures",
                "Upstream connects that failed, by reason", Family::default()),
            upstream_resumes_total: register(&mut r, "voxgate_upstream_resumes",
                "Upstream sessions replaced by a resume, by reason and outcome", Family::default()),
            rate_limited_total: register(&mut r, "voxgate_rate_limited",
                "Tool calls refused by the rate limiter, by tool", Family::default()),
            redis_fallback_total: register(&mut r, "voxgate_redis_fallback",
                "Operations served locally because Redis was unavailable, by component",
                Family::default()),
            phi_blocked_total: register(&mut r, "voxgate_phi_blocked",
                "Tool calls blocked by PHI screening, by tool", Family::default()),
            client_errors_total: register(&mut r, "voxgate_client_errors",
                "Bad client frames answered with an error event, by voxgate_* code",
                Family::default()),
            audit_records_total: register(&mut r, "voxgate_audit_records",
                "Audit records written and flushed, by event", Family::default()),
            audit_errors_total: register(&mut r, "voxgate_audit_errors",
                "Audit writes that failed", Counter::default()),
            audit_commit: register_seconds(&mut r, "voxgate_audit_commit",
                "Time to write and fdatasync one group of audit records (tool answers wait for it)",
                Histogram::new(AUDIT_COMMIT_BUCKETS)),
            audit_commit_running: register_seconds(&mut r, "voxgate_audit_commit_running",
                "How long the audit group commit under way has been running, 0 when none is (past 5 s the instance is not ready)",
                Gauge::default()),
            http_rejections_total: register(&mut r, "voxgate_http_rejections",
                "HTTP requests refused before a session started, by reason", Family::default()),
            redis_up: register(&mut r, "voxgate_redis_up",
                "1 while Redis answers, 0 when it is down or not configured", Gauge::default()),
            instance_id_conflict: register(&mut r, "voxgate_instance_id_conflict",
                "1 while another running instance claims this one's server.instance_id (with Redis)", Gauge::default()),
            instance_info: register(&mut r, "voxgate_instance_info",
                "This instance's server.instance_id", Family::default()),
            session_thread_load: register(&mut r, "voxgate_session_thread_connections",
                "Client connections and sessions running on each session thread, by thread index", Family::default()),
            session_loop_turns_total: register(&mut r, "voxgate_session_loop_turns",
                "Turns of the session loops (each wakes on a frame, a completion or a due timer)",
                Counter::default()),
            upstream_forged_events_total: register(&mut r, "voxgate_upstream_forged_events",
                "Upstream frames dropped as forged (a voxgate.* type, two type keys, or none readable)", Counter::default()),
            audit_stream_epochs_total: register(&mut r, "voxgate_audit_stream_epochs",
                "Audit streams found holding another epoch of the log; the mirror moved to a new stream key", Counter::default()),
            audit_stream_skipped_lines_total: register(&mut r, "voxgate_audit_stream_skipped_lines",
                "Audit lines never sent to the Redis stream: a catch-up after more missed lines than the stream keeps started that many below the last", Counter::default()),
            registry: r,
            tools: KNOWN_TOOLS.iter().chain(mcp_tools).copied().collect(),
        };
        inner.prefill();
        Self { inner: Arc::new(inner) }
    }

    /// The whole registry in the Prometheus text format, served with [`CONTENT_TYPE`].
    pub fn render(&self) -> String {
        super::exposition::openmetrics_to_prometheus(&self.render_openmetrics())
    }

    /// The whole registry in OpenMetrics text (ends with `# EOF`), served with
    /// [`OPENMETRICS_CONTENT_TYPE`].
    pub fn render_openmetrics(&self) -> String {
        let mut body = String::with_capacity(16 * 1024);
        // Writing into a String cannot fail; an Err could only come from a broken encoder, and a
        // partial scrape is better than none.
        if encode(&mut body, &self.inner.registry).is_err() {
            tracing::warn!("metrics encoding failed; serving a partial scrape");
        }
        body
    }

    /// Maps a tool name onto its label: a tool this process knows, or [`OTHER_TOOL`].
    pub fn tool_label(&self, name: &str) -> ToolLabel {
        ToolLabel(self.inner.tools.iter().copied().find(|known| *known == name).unwrap_or(OTHER_TOOL))
    }

    /// A session's frame and loop-turn counters (flushed into the shared ones, see [`FrameCounters`]).
    pub fn frame_counters(&self) -> FrameCounters {
        FrameCounters::new(
            self.inner.frames_client_to_upstream.clone(),
            self.inner.frames_upstream_to_client.clone(),
            self.inner.session_loop_turns_total.clone(),
        )
    }

    /// An upstream frame was dropped as forged (see the counter).
    pub fn upstream_forged_event(&self) {
        self.inner.upstream_forged_events_total.inc();
    }

    /// The audit mirror found its stream holding another epoch of the log and moved to a new key.
    pub fn audit_stream_epoch(&self) {
        self.inner.audit_stream_epochs_total.inc();
    }

    /// The audit mirror's catch-up left `lines` lines out of the stream (more were missed than it keeps).
    pub fn audit_stream_skipped_lines(&self, lines: u64) {
        self.inner.audit_stream_skipped_lines_total.inc_by(lines);
    }

    /// A session started: raises `voxgate_sessions_active` until the guard is dropped.
    pub fn session_started(&self) -> ActiveSession {
        self.inner.sessions_active.inc();
        ActiveSession {
            gauge: self.inner.sessions_active.clone(),
        }
    }

    /// A session ended with `outcome` (drop its [`ActiveSession`] too).
    pub fn session_ended(&self, outcome: &'static str) {
        self.inner
            .sessions_total
            .get_or_create(&[("outcome", outcome)])
            .inc();
    }

    /// A server tool call reached its terminal state. `duration` is observed for calls that ran
    /// (`Some`); declined or expired calls never executed and pass `None`.
    pub fn tool_call_finished(&self, tool: &str, status: &'static str, duration: Option<Duration>) {
        let tool = self.tool_label(tool).as_str();
        self.inner
            .tool_calls_total
            .get_or_create(&[("tool", tool), ("status", status)])
            .inc();
        if let Some(duration) = duration {
            self.inner
                .tool_duration
                .get_or_create(&[("tool", tool)])
                .observe(duration.as_secs_f64());
        }
    }

    /// A server tool call failed with `code` (a `ToolError::code()`).
    pub fn tool_error(&self, tool: &str, code: &'static str) {
        let tool = self.tool_label(tool).as_str();
        self.inner
            .tool_errors_total
            .get_or_create(&[("tool", tool), ("code", code)])
            .inc();
    }

    /// A call that needed confirmation was decided: approved, declined, expired, session_closed or
    /// client_cannot_confirm.
    pub fn tool_confirmation(&self, tool: &str, decision: &'static str) {
        let tool = self.tool_label(tool).as_str();
        self.inner
            .tool_confirmations_total
            .get_or_create(&[("tool", tool), ("decision", decision)])
            .inc();
    }

    pub fn upstream_connected(&self, elapsed: Duration) {
        self.inner.upstream_connect.observe(elapsed.as_secs_f64());
    }

    /// `reason`: [`crate::upstream::UpstreamError::reason`] (unauthorized, timeout, refused, …).
    pub fn upstream_connect_failed(&self, reason: &'static str) {
        self.inner
            .upstream_connect_failures_total
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// A resume ended: `reason` upstream_closed|upstream_error|max_age, `outcome` resumed|failed.
    pub fn upstream_resume(&self, reason: &'static str, outcome: &'static str) {
        self.inner
            .upstream_resumes_total
            .get_or_create(&[("reason", reason), ("outcome", outcome)])
            .inc();
    }

    pub fn rate_limited(&self, tool: &str) {
        self.inner
            .rate_limited_total
            .get_or_create(&[("tool", self.tool_label(tool).as_str())])
            .inc();
    }

    /// `component`: rate_limit, tickets, audit_stream.
    pub fn redis_fallback(&self, component: &'static str) {
        self.inner
            .redis_fallback_total
            .get_or_create(&[("component", component)])
            .inc();
    }

    pub fn phi_blocked(&self, tool: &str) {
        self.inner
            .phi_blocked_total
            .get_or_create(&[("tool", self.tool_label(tool).as_str())])
            .inc();
    }

    /// A bad client frame, by its `voxgate_*` error code.
    pub fn client_error(&self, code: &'static str) {
        self.inner
            .client_errors_total
            .get_or_create(&[("code", code)])
            .inc();
    }

    /// `event`: call_started, call_finished.
    pub fn audit_record(&self, event: &'static str) {
        self.inner
            .audit_records_total
            .get_or_create(&[("event", event)])
            .inc();
    }

    pub fn audit_error(&self) {
        self.inner.audit_errors_total.inc();
    }

    /// One group commit of the audit writer took `took` (write and fdatasync, failed or not).
    pub fn audit_commit(&self, took: Duration) {
        self.inner.audit_commit.observe(took.as_secs_f64());
    }

    /// The audit commit under way has been running for `running` (zero: none is).
    pub fn audit_commit_running(&self, running: Duration) {
        self.inner.audit_commit_running.set(running.as_secs_f64());
    }

    /// `reason`: origin, unauthorized, too_many_sessions, too_many_sessions_per_user, draining, ...
    pub fn http_rejection(&self, reason: &'static str) {
        self.inner
            .http_rejections_total
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    pub fn redis_up(&self, up: bool) {
        self.inner.redis_up.set(i64::from(up));
    }

    /// The gauge counting what runs on session thread `index` (the shards place by it).
    pub fn session_thread_load(&self, index: usize) -> Gauge {
        self.inner.session_thread_load.get_or_create_owned(&[("thread", index.to_string())])
    }

    pub fn instance_id_conflict(&self, conflict: bool) {
        self.inner.instance_id_conflict.set(i64::from(conflict));
    }

    /// Name this instance (`voxgate_instance_info{instance_id="…"} 1`).
    pub fn set_instance(&self, instance_id: &str) {
        self.inner.instance_info.get_or_create(&[("instance_id", instance_id.to_string())]).set(1);
    }
}

impl Inner {
    fn prefill(&self) {
        // `_owned`: creating the series is the point; the handle itself is not needed.
        for outcome in SessionOutcome::ALL {
            self.sessions_total
                .get_or_create_owned(&[("outcome", outcome.as_str())]);
        }
        for tool in self.tools.iter().copied() {
            for status in TOOL_STATUSES {
                self.tool_calls_total
                    .get_or_create_owned(&[("tool", tool), ("status", status)]);
            }
            for decision in CONFIRMATION_DECISIONS {
                self.tool_confirmations_total
                    .get_or_create_owned(&[("tool", tool), ("decision", decision)]);
            }
            self.tool_duration.get_or_create_owned(&[("tool", tool)]);
        }
        for event in AUDIT_EVENTS {
            self.audit_records_total
                .get_or_create_owned(&[("event", event)]);
        }
        // Alerted on (VoxgateUpstreamEventsUnreadable): a series that exists from the start lets
        // `increase()` see its first error.
        self.client_errors_total
            .get_or_create_owned(&[("code", crate::protocol::voxgate::codes::UPSTREAM_EVENT_UNREADABLE)]);
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
