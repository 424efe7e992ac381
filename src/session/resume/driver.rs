//! The session loop's side of a resume. The loop calls in at four points: the upstream is lost
//! ([`Bridge::upstream_lost`]), a connection attempt ended ([`Bridge::on_connection`]), the
//! session is old and quiet ([`Bridge::recycle_if_due`]), the held frames overflowed
//! ([`Bridge::give_up_resume`]).
//!
//! Order on a new upstream: the restore (session configuration, then the logged items), then the
//! outputs the old upstream never acknowledged and the client's `response.create` it never
//! started, then the client frames the old upstream never took (its queue, a send that timed out)
//! and everything held during the gap, in order, so nothing the client sent reaches the model
//! before the conversation it belongs to, and nothing is sent twice. A recycle for age that
//! cannot connect goes back to the old upstream with what was held, its whole queue and its
//! unanswered ping ([`Bridge::on_connection`]).
//! Tool calls are untouched by all this: a parked call stays parked, a call finishing in the gap
//! has its output held like a client frame and delivered once; the response gate forgets the old
//! upstream's response and speech state, so a `response.create` that was due goes out after.

use tokio::time::Instant;
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
        let untaken = self.to_upstream.take_unsent().into();
        // A stalled upstream took nothing while the send waited for it, nor did the loop read
        // anything meanwhile: what its queue holds is at least that old, and its audio may be
        // stale already (the held frames' window). Otherwise their age is not known: now.
        let now = Instant::now();
        let stalled_since = now.checked_sub(self.deps.settings.upstream_send_timeout).unwrap_or(now);
        let untaken_at = if self.upstream_stalled { stalled_since } else { now };
        let ping_since = self.upstream_ping_since.take();
        self.upstream_stalled = false;
        self.gate.on_upstream_replaced();
        if !self.resume.begin_gap(reason, lost_outputs, (untaken, untaken_at), ping_since, span) {
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
    /// response, no user speech (nor its grace, nor push-to-talk audio not yet committed), no
    /// client request (nor push-to-talk commit) not yet answered by a response, no transcript owed
    /// for the user's audio (with input transcription on), no running call, no output on its way.
    pub(crate) async fn recycle_if_due(&mut self, now: Instant) {
        let due = self.resume.age_deadline().is_some_and(|at| now >= at);
        // A stalled or failed upstream is lost, not recycled: the loop's next turn resumes it.
        if !due || self.closing.is_some() || self.upstream_stalled || self.to_upstream.is_closed() {
            return;
        }
        let quiet = self.gate.is_quiet(now)
            && !self.resume.client_turn_open(now)
            && self.calls.running() == 0
            && self.unacknowledged_outputs.is_empty();
        if quiet {
            self.start_gap(Reason::MaxAge).await;
        }
    }

    /// When time alone may let the recycle happen: the upstream's age, or, when later, the end of
    /// the speech grace, of the wait for the client's request (or commit) to be answered or for a
    /// transcript owed, or of the hold for its push-to-talk audio. Anything else that holds it off ends with an event,
    /// which gives the loop a turn.
    pub(crate) fn recycle_wake_at(&self) -> Option<Instant> {
        let at = self.resume.age_deadline()?;
        Some([self.gate.speech_grace_until(), self.resume.client_turn_expires()].into_iter().flatten().fold(at, Instant::max))
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
                tracing::warn!(parent: &self.span, reason = err.reason(), detail = err.detail(), "resume: connection attempt failed");
                if self.resume.gap_reason() == Some(Reason::MaxAge) {
                    self.recycle_later().await;
                } else if !self.resume.retry() {
                    self.give_up_resume().await;
                }
                false
            }
        }
    }

    /// A recycle for age could not connect. It was planned, and the old upstream still works: the
    /// session goes on there, with what was held for it in the meantime, in order, and the
    /// recycle is tried again later (closing a healthy session would be worse than an old one).
    /// The old upstream's connection is whole: its outbox was kept, and it is read again. It gets
    /// back every frame its queue had (a `session.update` included: there is no restore to carry
    /// it), and the ping it had not answered still counts, so an upstream that died meanwhile is
    /// found however often the recycle is retried.
    async fn recycle_later(&mut self) {
        let Some(gap) = self.resume.postpone_recycle() else { return };
        gap.span.record("outcome", "postponed");
        self.upstream_ping_since = gap.ping_since;
        let (held, audio_dropped_ms) = gap.held.release(Instant::now());
        for frame in held {
            self.resume.note_released(&frame.message, frame.untaken);
            self.rearm_client_request(&frame.message);
            self.send_upstream(frame.message).await;
        }
        tracing::info!(parent: &self.span, audio_dropped_ms, "recycle postponed: no new upstream; the session goes on on its old one");
        // The client was told of a resume: the session goes on, with nothing restored.
        self.send_client_event(events::session_resumed(gap.reason.as_str(), 0, audio_dropped_ms)).await;
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
        // A recycle began with no request pending: one still kept was refused unnamed (or never
        // answered) by a healthy upstream, and will not start.
        let request = self.resume.take_client_request().filter(|_| gap.reason != Reason::MaxAge);
        if let Some(request) = request {
            let request = Message::text(request);
            // Pending on the new upstream, like every client frame released below: lost with it
            // before it answers (a flapping upstream), it goes to the next one too.
            self.resume.note_released(&request, true);
            self.rearm_client_request(&request);
            self.send_upstream(request).await;
        }
        let (held, audio_dropped_ms) = gap.held.release(Instant::now());
        for frame in held.into_iter().filter(|f| !f.untaken || is_client_frame(&f.message)) {
            self.resume.note_released(&frame.message, frame.untaken);
            self.rearm_client_request(&frame.message);
            self.send_upstream(frame.message).await;
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

    /// A client `response.create` released after a gap is sent now: the response gate waits for
    /// its answer from now, as when the client sent it. Its wait from the client's send may have
    /// run out during a long gap, and voxgate's own request for a tool result would then follow the
    /// client's at once: two responses, the result answered twice.
    fn rearm_client_request(&mut self, message: &Message) {
        let Message::Text(text) = message else { return };
        // voxgate's own request (its prefix; a stand-in's is the client's) is the gate's to track.
        if let Ok((kind, event_id)) = crate::protocol::peek_client(text.as_str())
            && kind == "response.create"
            && !event_id.as_deref().is_some_and(events::is_own_event_id)
        {
            self.gate.on_client_request(event_id.as_deref(), Instant::now());
        }
    }

    /// The new upstream refused part of the restore (`configuration`: its `session.update`;
    /// `code` an identifier or nothing). A refused item is a gap in the model's memory of the
    /// conversation and is only logged. A refused configuration leaves the new upstream session
    /// on its defaults, without voxgate's tools: they are injected again (they are voxgate's to
    /// keep), and the client is told that its own settings (instructions, voice, turn detection)
    /// are gone, to send them again.
    pub(crate) async fn on_restore_refused(&mut self, configuration: bool, code: Option<&str>) {
        let what = if configuration { "configuration" } else { "item" };
        tracing::warn!(parent: &self.span, code, what, "resume: the new upstream refused part of the restore");
        if configuration {
            self.resume.configuration_refused();
            self.send_tool_injection().await;
            let message = "The realtime service refused the session configuration restored after a resume: the session goes on with the service's defaults and voxgate's tools. Send session.update again.";
            self.client_error(events::codes::RESUME_CONFIGURATION_REFUSED, message, None).await;
        }
    }

    /// Where `send_upstream` puts a frame during a gap.
    pub(crate) fn hold_for_upstream(&mut self, message: Message) -> bool {
        self.resume.hold(message);
        true
    }
}

/// Is a frame the old upstream never took the client's, to be carried to a new upstream? Not
/// voxgate's own (its `event_id` prefix): the restore sends the configuration again, unacknowledged
/// outputs go with it, and the gate asks for its response again. Not a `session.update` either:
/// the restore's configuration holds it. Pings are voxgate's; binary frames never go upstream.
fn is_client_frame(message: &Message) -> bool {
    let Message::Text(text) = message else { return false };
    match crate::protocol::peek_client(text.as_str()) {
        Ok((kind, event_id)) => kind != "session.update" && !event_id.is_some_and(|id| events::is_own_event_id(&id)),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client request voxgate sent with a stand-in id is the client's: a resume carries it to the
    /// new upstream if the old one never took it (it was taken for one of voxgate's own and lost).
    #[test]
    fn a_request_with_a_stand_in_id_is_the_clients() {
        let request = |id: &str| Message::text(format!(r#"{{"type":"response.create","event_id":"{id}"}}"#));
        assert!(is_client_frame(&request(&events::stand_in_event_id())));
        assert!(is_client_frame(&request("c1")));
        assert!(!is_client_frame(&request(&events::event_id())));
    }
}
