//! How a session ends: parked calls are declined, running ones may finish until the close
//! deadline (`server.drain_timeout_ms`), and what still runs then, or was approved and is still
//! waiting for its approval record, is abandoned with its `call_finished` handed to the audit
//! writer, so no call ends without a finish record, even when the writer stops answering. The
//! session then waits at most [`CLOSE_GRACE`] more for acknowledgements.

use std::time::Duration;

use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::SessionOutcome;
use super::bridge::{Bridge, close_frame};
use crate::protocol::voxgate as events;

/// After the close deadline, how long audit acknowledgements may still take before the session
/// ends anyway (the records are already with the writer; only the wait is given up).
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(2);

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

/// What a closing session does on this turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CloseStep {
    /// Every call is finished and every record acknowledged: the session ends.
    Done,
    /// Calls may still finish, acknowledgements still come in.
    Wait,
    /// The deadline passed with calls still running or being approved: they are abandoned.
    Abandon,
    /// The grace after the deadline is over too: the session ends, after abandoning what is
    /// left (`abandon`), so no call ends without its `call_finished` handed to the writer.
    End { abandon: bool },
}

/// The close decision, apart from the loop: `unfinished` calls in all, `abandonable` of them
/// running or approved, `acks_pending` audit acknowledgements still awaited.
pub(super) fn close_step(now: Instant, deadline: Instant, unfinished: usize, abandonable: usize, acks_pending: bool) -> CloseStep {
    if unfinished == 0 && !acks_pending {
        return CloseStep::Done;
    }
    if now >= deadline + CLOSE_GRACE {
        // The loop may first wake here (an acknowledgement that never comes): what is still
        // running or being approved is abandoned before the session ends, never left unfinished.
        return CloseStep::End { abandon: abandonable > 0 };
    }
    if now >= deadline && abandonable > 0 {
        return CloseStep::Abandon;
    }
    CloseStep::Wait
}

impl Bridge {
    /// Start closing: decline parked calls, tell the client, let running calls finish.
    pub(super) async fn begin_close(&mut self, outcome: SessionOutcome, notify: bool) {
        let reason = match outcome {
            SessionOutcome::Drained => "service restart",
            SessionOutcome::Killed => "ended by an administrator",
            SessionOutcome::IdleTimeout => "idle timeout",
            SessionOutcome::AuthExpired => "authorisation expired",
            SessionOutcome::SlowClient => "client too slow",
            _ => "session ended",
        };
        if notify && self.info.wants_events {
            // Only a drain sends the client elsewhere; a kill or an expiry must not be undone by it.
            let reconnect = outcome == SessionOutcome::Drained;
            let _ = self.to_client.try_send(Message::text(events::session_closing(reason, reconnect)));
        }
        let code = match outcome {
            SessionOutcome::Drained => CloseCode::Restart,
            SessionOutcome::SlowClient | SessionOutcome::AuthExpired => CloseCode::Policy,
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
        self.calls.forget_held();
        let actions = self.calls.close_parked();
        self.perform(actions).await;
    }

    /// The close deadline passed: calls still running (or approved and not yet flushed) fail as
    /// timed out, and their `call_finished` records go to the audit writer now.
    pub(super) async fn abandon_running(&mut self) {
        // A task that ended before the deadline, its result waiting in the set for the loop's
        // next look (the deadline was seen first, at the top of the turn), is not abandoned: its
        // result is taken, as it would have been a moment earlier. Abandoned, a calendar event
        // that was created would be recorded, and told to the model, as timed out.
        while let Some(joined) = self.tool_tasks.try_join_next_with_id() {
            self.handle_tool_finished(joined).await;
        }
        // What the calls reported so far goes out before their end; what an aborted call still
        // reports (an MCP call's last progress, flushed as its route ends) goes nowhere: the
        // queue is dropped with its receiver (the next call to report makes a new one).
        self.pass_on_progress();
        self.progress = None;
        let actions = self.calls.abandon_running();
        self.tool_tasks.abort_all();
        self.perform(actions).await;
    }
}
