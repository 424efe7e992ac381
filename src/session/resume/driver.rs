//! The session loop's side of a resume. The loop calls in at four points: the upstream is lost
//! ([`Bridge::upstream_lost`]), a connection attempt ended ([`Bridge::on_connection`]), the
//! session is old and quiet ([`Bridge::recycle_if_due`]), the held frames overflowed
//! ([`Bridge::give_up_resume`]).
//!
//! Order on a new upstream: the restore (session configuration, then the logged items), then the
//! outputs the old upstream never acknowledged and the client's `response.create` it never
//! started, then everything held during the gap, so nothing
//! the client sent after the drop reaches the model before the conversation it belongs to.
//! Tool calls are untouched by all this: a parked call stays parked, a call finishing in the gap
//! has its output held like a client frame and delivered once; the response gate forgets the old
//! upstream's response and speech state, so a `response.create` that was due goes out after.

use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::{Outcome, Reason};
use crate::protocol::voxgate as events;
use crate::session::SessionOutcome;
use crate::session::bridge::{Bridge, close_frame};
use crate::session::outbox::Outbox;
use crate::upstream::{UpstreamConn, UpstreamError};

/// How long the old upstream gets to take its close frame.
const OLD_UPSTREAM_CLOSE: std::time::Duration = std::time::Duration::from_secs(2);

impl Bridge {
    /// The upstream is gone (`reason`): resume if possible, otherwise close the session as
    /// before, with `client_close` for the client.
    pub(crate) async fn upstream_lost(&mut self, reason: Reason, client_close: Option<CloseFrame>) {
        if self.closing.is_some() || self.resume.in_gap() {
            return;
        }
        if !self.resume.enabled() {
            let outcome = if reason == Reason::UpstreamError { SessionOutcome::UpstreamError } else { SessionOutcome::UpstreamClosed };
            self.begin_close_with(outcome, client_close, None).await;
            return;
        }
        self.start_gap(reason).await;
    }

    async fn start_gap(&mut self, reason: Reason) {
        let span = tracing::info_span!(
            target: "voxgate::upstream",
            parent: &self.span,
            "voxgate.upstream_resume",
            reason = reason.as_str(),
            outcome = tracing::field::Empty,
            items_restored = tracing::field::Empty,
        );
        let lost_outputs = self.unacknowledged_outputs.values().map(|o| o.frame.clone()).collect();
        self.upstream_ping_since = None;
        self.upstream_stalled = false;
        self.gate.on_upstream_replaced();
        if !self.resume.begin_gap(reason, lost_outputs, span) {
            // The upstream went away again soon after a restore that used the last attempt: one
            // more would only repeat the connect-restore-close cycle (`SETTLED_AFTER`).
            tracing::warn!(parent: &self.span, reason = reason.as_str(), "upstream gone again soon after the last resume; no attempts left");
            self.give_up_resume().await;
            return;
        }
        tracing::info!(parent: &self.span, reason = reason.as_str(), "upstream gone; resuming the session");
        self.send_client_event(events::session_resuming(reason.as_str())).await;
    }

    /// Recycle the upstream session once it is past its age and the conversation is quiet: no
    /// response, no user speech, no running call, no output on its way.
    pub(crate) async fn recycle_if_due(&mut self, now: tokio::time::Instant) {
        let due = self.resume.age_deadline().is_some_and(|at| now >= at);
        let quiet = self.gate.is_quiet() && self.calls.running() == 0 && self.unacknowledged_outputs.is_empty();
        if due && quiet && self.closing.is_none() {
            self.start_gap(Reason::MaxAge).await;
        }
    }

    /// A connection attempt ended. True on success: the new upstream is the session's, for the
    /// loop to read from.
    pub(crate) async fn on_connection(&mut self, result: Result<UpstreamConn, UpstreamError>) -> bool {
        match result {
            Ok(conn) => {
                self.restore_on(conn).await;
                true
            }
            Err(err) => {
                self.deps.metrics.upstream_connect_failed(err.reason());
                tracing::warn!(parent: &self.span, reason = err.reason(), "resume: connection attempt failed");
                if !self.resume.retry() {
                    self.give_up_resume().await;
                }
                false
            }
        }
    }

    async fn restore_on(&mut self, conn: UpstreamConn) {
        self.deps.metrics.upstream_connected(conn.connect_time);
        let old = std::mem::replace(&mut self.to_upstream, Outbox::new(conn.socket));
        // The old upstream (still open when recycled for age) is told goodbye, off the loop.
        tokio::spawn(old.close(Some(close_frame(CloseCode::Normal, "session recycled")), OLD_UPSTREAM_CLOSE));
        let Some(gap) = self.resume.end_gap() else { return };
        let server_tools = self.allowed_tool_definitions();
        let restore = self.resume.restore(gap.attempt, self.deps.settings.protocol, &server_tools);
        for frame in restore.frames {
            self.send_upstream(Message::text(frame)).await;
        }
        for output in gap.lost_outputs {
            self.send_upstream(Message::text(output)).await;
        }
        if let Some(request) = self.resume.take_client_request() {
            self.send_upstream(Message::text(request)).await;
        }
        let (held, audio_dropped_ms) = gap.held.release(tokio::time::Instant::now());
        for message in held {
            self.send_upstream(message).await;
        }
        let items = restore.item_ids.len();
        let items_dropped = restore.items_dropped;
        gap.span.record("outcome", Outcome::Resumed.as_str());
        gap.span.record("items_restored", items);
        self.deps.metrics.upstream_resume(gap.reason.as_str(), Outcome::Resumed.as_str());
        tracing::info!(parent: &self.span, reason = gap.reason.as_str(), items, items_dropped, audio_dropped_ms, "session resumed on a new upstream");
        self.send_client_event(events::session_resumed(gap.reason.as_str(), items, audio_dropped_ms)).await;
    }

    /// The resume failed: the session closes as it would have without one (1011 for the client).
    pub(crate) async fn give_up_resume(&mut self) {
        let Some(gap) = self.resume.end_gap() else { return };
        gap.span.record("outcome", Outcome::Failed.as_str());
        self.deps.metrics.upstream_resume(gap.reason.as_str(), Outcome::Failed.as_str());
        tracing::warn!(parent: &self.span, reason = gap.reason.as_str(), "resume failed; closing the session");
        let outcome = if gap.reason == Reason::UpstreamError { SessionOutcome::UpstreamError } else { SessionOutcome::UpstreamClosed };
        let frame = close_frame(CloseCode::Error, "the realtime service went away and the session could not be resumed");
        self.begin_close_with(outcome, Some(frame), None).await;
    }

    /// Where `send_upstream` puts a frame during a gap.
    pub(crate) fn hold_for_upstream(&mut self, message: Message) -> bool {
        self.resume.hold(message);
        true
    }
}
