//! Sending to the two peers: the session's bounded sends (a peer that stops reading ends the
//! session instead of freezing it), its `voxgate.*` and `error` events to the client, and the
//! pings that find an upstream gone silent.

use std::time::Duration;

use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::bridge::{Bridge, close_frame};
use super::resume::Reason;
use crate::protocol::voxgate as events;

/// An upstream ping unanswered for this long means the upstream is gone. Generous, so a busy
/// server is not mistaken for a dead one; checked on the ping tick.
const UPSTREAM_PONG_TIMEOUT: Duration = Duration::from_secs(30);

impl Bridge {
    /// Ping both peers. An upstream that leaves a ping unanswered for [`UPSTREAM_PONG_TIMEOUT`]
    /// is gone (half-open TCP, a stalled proxy): nothing else would notice, as it may simply have
    /// nothing to say.
    pub(super) async fn ping(&mut self) {
        if self.closing.is_some() {
            return;
        }
        let now = Instant::now();
        let _ = self.to_client.try_send(Message::Ping(Default::default()));
        if self.resume.in_gap() {
            return;
        }
        match self.upstream_ping_since {
            Some(since) if now.duration_since(since) >= UPSTREAM_PONG_TIMEOUT => {
                self.upstream_gone("the realtime service stopped answering pings").await;
            }
            Some(_) => {}
            None => {
                // A full queue is a stall the bounded send catches.
                if let Ok(true) = self.to_upstream.try_send(Message::Ping(Default::default())) {
                    self.upstream_ping_since = Some(now);
                }
            }
        }
    }

    /// The upstream is unusable: resume, or close the session (the client gets 1011).
    pub(super) async fn upstream_gone(&mut self, why: &'static str) {
        tracing::warn!(parent: &self.span, why, "upstream unusable");
        let frame = close_frame(CloseCode::Error, "the realtime service is not responding");
        self.upstream_lost(Reason::UpstreamError, Some(frame)).await;
    }

    /// Send a `voxgate.*` event, if this client asked for them.
    pub(super) async fn send_client_event(&mut self, event: String) {
        if let Some(waits) = self.try_send_client_event(event) {
            self.send_client(waits).await;
        }
    }

    /// Queue a voxgate event for the client if that needs no wait; the frame comes back when the
    /// client's queue is full (then [`Self::send_client`] waits for room, bounded).
    pub(super) fn try_send_client_event(&mut self, event: String) -> Option<Message> {
        if !self.info.wants_events || self.client_stalled {
            return None;
        }
        self.to_client.try_send_or_return(Message::text(event)).ok().flatten()
    }

    /// Send a frame to the client; a client that stops reading for too long is closed (1008).
    pub(super) async fn send_client(&mut self, message: Message) {
        if self.client_stalled {
            return;
        }
        // Room in the queue (the common case) needs no timer; a closed queue is noticed by the loop.
        let Ok(Some(message)) = self.to_client.try_send_or_return(message) else { return };
        let timeout = self.deps.settings.client_send_timeout;
        if tokio::time::timeout(timeout, self.to_client.send(message)).await.is_err() {
            // The loop closes the session (1008) at its next turn; closing from here would
            // recurse through `begin_close`, which itself sends to the client.
            tracing::warn!(parent: &self.span, "client is not reading; closing the session");
            self.client_stalled = true;
        }
    }

    /// Send a frame upstream, waiting while the upstream's queue is full (backpressure), but never
    /// longer than `upstream.send_timeout_ms`: an upstream that stops reading must not freeze the
    /// session. False when the frame was not queued. A frame the upstream did not take (its wait
    /// timed out, the upstream failed while it waited, or had stalled or failed already) is kept
    /// behind the queue, which a resume carries to the new upstream.
    pub(super) async fn send_upstream(&mut self, message: Message) -> bool {
        if self.resume.in_gap() {
            return self.hold_for_upstream(message);
        }
        if self.upstream_stalled || self.to_upstream.is_closed() {
            // Never taken: the loop resumes (or closes) at its next turn, and a resume carries it.
            self.keep_for_resume(message);
            return false;
        }
        // Room in the queue (the common case) needs no timer and no cancellation waiter.
        let message = match self.to_upstream.try_send_or_return(message) {
            Ok(None) => return true,
            Ok(Some(message)) => message,
            Err(_) => return false,
        };
        let timeout = self.deps.settings.upstream_send_timeout;
        let mut message = Some(message);
        let send = tokio::time::timeout(timeout, self.to_upstream.send_from(&mut message));
        let sent = tokio::select! {
            biased;
            sent = send => sent.map(|queued| queued.is_ok()),
            // An administrator or the drain wants the session gone: a frame that cannot be queued
            // at once is not waited for.
            () = self.cancel.cancelled() => return false,
        };
        // A frame not queued was never taken: the upstream failed while it waited for room, or
        // its wait timed out. It waits with the queue for a new upstream, in its place.
        if let Some(message) = message.take() {
            self.keep_for_resume(message);
        }
        match sent {
            Ok(queued) => queued,
            Err(_) => {
                // The loop resumes or closes the session at its next turn (as for a stalled
                // client).
                self.upstream_stalled = true;
                false
            }
        }
    }

    /// Keep a frame the upstream did not take behind its queue, for a resume to carry to the new
    /// upstream; without resuming the session closes and the frame has nowhere to go.
    fn keep_for_resume(&mut self, message: Message) {
        if self.resume.enabled() {
            self.to_upstream.keep_unsent(message);
        }
    }

    /// The standard `error` event to the client.
    pub(super) async fn client_error(&mut self, code: &'static str, message: &str, event_id: Option<&str>) {
        self.deps.metrics.client_error(code);
        self.send_client(Message::text(events::error_event(code, message, event_id))).await;
    }
}
