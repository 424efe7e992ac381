//! A session: one task that owns everything about one browser ⇄ model conversation.
//!
//! [`run`] bridges a client WebSocket and an upstream connection. It forwards every frame it has no
//! business with as the same bytes, and owns the server tools: it injects their definitions, hides
//! their calls from the client, runs them through the [`calls`] state machine, and answers the
//! model. Its state lives in one task with no locks; shared things arrive in [`SessionDeps`].
//!
//! - [`calls`]: the sans-I/O tool-call state machine.
//! - [`turns`]: when voxgate may send `response.create`.
//! - [`outbox`]: a socket's send queue, bounded in bytes and written by the session task itself.
//! - `deadlines`: every deadline of a session behind one timer kept across loop turns.
//! - [`live`]: the registry of live sessions, for admission and the admin API.
//! - [`pace`]: the per-session ceiling on client frames per second.
//! - `peers`: bounded sends to the client and the upstream, events, pings.
//! - `tool_actions`: carrying out what the call table decided (audit, spawn, outputs).
//! - `closing`: how a session ends (parked calls declined, the rest abandoned at the deadline).
//! - [`resume`]: sessions that outlive their upstream (conversation log, restore, reconnect).

mod bridge;
mod deadlines;
pub(crate) mod gated;
pub mod calls;
mod client_frames;
mod closing;
pub mod live;
pub mod outbox;
mod pace;
mod peers;
mod tool_actions;
mod update_ids;
pub mod resume;
pub mod runner;
pub mod turns;
mod upstream_frames;
#[cfg(test)]
mod harness;

use std::sync::Arc;
use std::time::Duration;

use futures::{Sink, Stream};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_util::sync::CancellationToken;

use crate::audit::AuditHandle;
use crate::config::{Config, UpstreamProtocol};
use crate::policy::Principal;
use crate::policy::rate_limit::RateLimiter;
use crate::telemetry::metrics::Metrics;
use crate::tools::registry::ToolRegistry;
use crate::upstream::UpstreamConn;

/// Session settings taken from the config once.
#[derive(Debug, Clone)]
pub struct SessionSettings {
    pub confirmation_timeout: Duration,
    pub drain_timeout: Duration,
    pub client_send_timeout: Duration,
    pub max_frame_bytes: usize,
    pub idle_timeout: Option<Duration>,
    pub ping_interval: Option<Duration>,
    pub protocol: UpstreamProtocol,
    /// A frame the upstream has not taken within this time ends the session.
    pub upstream_send_timeout: Duration,
    /// Client frames per second accepted (`None` = no limit).
    pub max_client_frames_per_s: Option<u32>,
    /// Provider-hosted `mcp` tools may be given to the model.
    pub allow_hosted_mcp: bool,
    /// Sessions outlive their upstream (`None`: `upstream.resume = false`).
    pub resume: Option<resume::ResumeSettings>,
}

impl SessionSettings {
    pub fn from_config(config: &Config) -> Self {
        let nonzero = |ms: u64| (ms > 0).then(|| Duration::from_millis(ms));
        Self {
            confirmation_timeout: Duration::from_millis(config.tools.confirmation_timeout_ms),
            drain_timeout: Duration::from_millis(config.server.drain_timeout_ms),
            client_send_timeout: Duration::from_millis(config.server.client_send_timeout_ms),
            max_frame_bytes: config.server.max_frame_bytes,
            idle_timeout: nonzero(config.server.idle_timeout_ms),
            ping_interval: nonzero(config.server.ping_interval_ms),
            protocol: config.upstream.protocol,
            upstream_send_timeout: Duration::from_millis(config.upstream.send_timeout_ms),
            max_client_frames_per_s: (config.server.max_client_frames_per_s > 0).then_some(config.server.max_client_frames_per_s),
            allow_hosted_mcp: config.upstream.allow_hosted_mcp,
            resume: resume::ResumeSettings::from_config(&config.upstream),
        }
    }
}

/// What every session shares, passed explicitly (cheap clones).
#[derive(Clone)]
pub struct SessionDeps {
    pub registry: Arc<ToolRegistry>,
    pub audit: AuditHandle,
    pub metrics: Metrics,
    pub limiter: Arc<dyn RateLimiter>,
    pub settings: Arc<SessionSettings>,
    /// The process-wide drain token (a session's own token is a child of it).
    pub drain: CancellationToken,
}

/// Who and what this session is.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub id: String,
    pub principal: Principal,
    /// Keyed hash of `principal.sub`: what logs and audit carry.
    pub user: String,
    /// The client asked for `voxgate.*` events (and so can confirm calls).
    pub wants_events: bool,
    pub model: String,
    /// The client's address and user agent, for the audit log.
    pub origin: crate::audit::Origin,
}

/// How a session ended (the `outcome` label of `voxgate_sessions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    ClientClosed,
    UpstreamClosed,
    ClientError,
    UpstreamError,
    SlowClient,
    IdleTimeout,
    Drained,
    Killed,
    /// The token that admitted the session expired.
    AuthExpired,
}

impl SessionOutcome {
    /// Every outcome: the series `voxgate_sessions_total` has at zero from the start.
    pub const ALL: [SessionOutcome; 9] = [
        SessionOutcome::ClientClosed,
        SessionOutcome::UpstreamClosed,
        SessionOutcome::ClientError,
        SessionOutcome::UpstreamError,
        SessionOutcome::SlowClient,
        SessionOutcome::IdleTimeout,
        SessionOutcome::Drained,
        SessionOutcome::Killed,
        SessionOutcome::AuthExpired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SessionOutcome::ClientClosed => "client_closed",
            SessionOutcome::UpstreamClosed => "upstream_closed",
            SessionOutcome::ClientError => "client_error",
            SessionOutcome::UpstreamError => "upstream_error",
            SessionOutcome::SlowClient => "slow_client",
            SessionOutcome::IdleTimeout => "idle_timeout",
            SessionOutcome::Drained => "drained",
            SessionOutcome::Killed => "killed",
            SessionOutcome::AuthExpired => "auth_expired",
        }
    }
}

/// Run a session to its end inside `span` (see `telemetry::session_span`). `cancel` is this
/// session's token: cancelled by the process drain or by an administrator. `reconnect` opens a new
/// upstream like `upstream` for a resume (`None`: the session ends with its upstream).
///
/// Not an `async fn` of its own: it hands back the bridge's future as it is, as another layer
/// would keep a second copy of every argument beside it for the session's life.
pub fn run<C>(
    info: SessionInfo,
    span: tracing::Span,
    client: C,
    upstream: UpstreamConn,
    deps: SessionDeps,
    cancel: CancellationToken,
    reconnect: Option<resume::Connect>,
) -> impl Future<Output = SessionOutcome> + Send
where
    C: Stream<Item = Result<Message, tungstenite::Error>> + Sink<Message, Error = tungstenite::Error> + Send + Unpin + 'static,
{
    bridge::Bridge::run(info, span, client, upstream, deps, cancel, reconnect)
}

#[cfg(test)]
mod outcome_tests {
    use super::SessionOutcome;

    /// Every outcome is in the first scrape at zero, so `rate()` and ratios over outcomes have both
    /// sides from the start (docs/operations.md).
    #[test]
    fn every_outcome_is_scraped_from_the_start() {
        let scrape = crate::telemetry::metrics::Metrics::new().render();
        for outcome in SessionOutcome::ALL {
            let series = format!("voxgate_sessions_total{{outcome=\"{}\"}} 0", outcome.as_str());
            assert!(scrape.contains(&series), "{series} missing");
        }
    }
}
