//! When voxgate may ask the model to speak: the `response.create` sequencing of CONTRACT §4, as a
//! small sans-I/O gate.
//!
//! voxgate sends `response.create` only when outputs it added are not yet covered by a response,
//! no response is in progress, the user is not speaking, and its previous request has been
//! answered. Several outputs ready together share one request. A request the upstream refuses
//! because a response is active (a race with server VAD) is retried after that response.

use std::time::Duration;

use tokio::time::Instant;

/// After the user stops speaking, give server VAD this long to start its own response (which then
/// covers our outputs) before voxgate asks for one.
pub const AFTER_SPEECH_GRACE: Duration = Duration::from_millis(700);

#[derive(Debug, Default)]
pub struct ResponseGate {
    response_active: bool,
    user_speaking: bool,
    /// Outputs voxgate added that no response has started after yet.
    uncovered: usize,
    /// Outputs added while voxgate's own request was pending: the response it starts was created
    /// before they arrived, so it does not cover them.
    after_request: usize,
    /// voxgate's last request and how many outputs it was for, in case the upstream refuses it
    /// (even after a response started: that response may have begun before our outputs arrived).
    last_request: Option<(String, usize)>,
    /// voxgate's `response.create` whose `response.created` has not arrived yet.
    pending_request: Option<String>,
    /// Do not request before this instant (speech grace).
    not_before: Option<Instant>,
}

impl ResponseGate {
    pub fn on_output_sent(&mut self) {
        if self.pending_request.is_some() {
            self.after_request += 1;
        } else {
            self.uncovered += 1;
        }
    }

    pub fn on_response_created(&mut self) {
        self.response_active = true;
        // A response that starts after our outputs were added has them in context; outputs sent
        // after our own pending request reach the server after the response it starts.
        self.uncovered = if self.pending_request.is_some() { self.after_request } else { 0 };
        self.after_request = 0;
        self.pending_request = None;
    }

    pub fn on_response_done(&mut self) {
        self.response_active = false;
    }

    pub fn on_speech_started(&mut self) {
        self.user_speaking = true;
    }

    pub fn on_speech_stopped(&mut self, now: Instant) {
        self.user_speaking = false;
        self.not_before = Some(now + AFTER_SPEECH_GRACE);
    }

    /// The upstream refused voxgate's request (`conversation_already_has_active_response`): a
    /// response is running that may not have our outputs; ask again after it.
    pub fn on_request_refused(&mut self, event_id: &str) -> bool {
        match self.last_request.take() {
            Some((id, count)) if id == event_id => {
                if self.pending_request.as_deref() == Some(event_id) {
                    self.pending_request = None;
                    self.uncovered += self.after_request;
                    self.after_request = 0;
                }
                self.uncovered += count;
                self.response_active = true;
                true
            }
            other => {
                self.last_request = other;
                false
            }
        }
    }

    /// The instant the gate may open later on its own (speech grace), if it is waiting for time.
    pub fn wake_at(&self) -> Option<Instant> {
        if self.uncovered > 0 { self.not_before } else { None }
    }

    /// Should voxgate send `response.create` now? If so, the caller sends it with `event_id`.
    pub fn try_request(&mut self, now: Instant, event_id: impl FnOnce() -> String) -> Option<String> {
        if self.uncovered == 0 || self.response_active || self.user_speaking || self.pending_request.is_some() {
            return None;
        }
        if self.not_before.is_some_and(|t| now < t) {
            return None;
        }
        self.not_before = None;
        let id = event_id();
        self.last_request = Some((id.clone(), self.uncovered));
        self.uncovered = 0;
        self.pending_request = Some(id.clone());
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> String {
        "voxgate_r".into()
    }

    #[test]
    fn one_request_for_a_batch_and_none_while_active() {
        let now = Instant::now();
        let mut gate = ResponseGate::default();
        assert!(gate.try_request(now, id).is_none(), "nothing to answer");
        gate.on_response_created();
        gate.on_output_sent();
        gate.on_output_sent();
        assert!(gate.try_request(now, id).is_none(), "a response is active");
        gate.on_response_done();
        assert_eq!(gate.try_request(now, id).as_deref(), Some("voxgate_r"));
        gate.on_output_sent();
        assert!(gate.try_request(now, id).is_none(), "our request is still pending");
        gate.on_response_created();
        assert!(gate.try_request(now, id).is_none(), "a response is active");
        gate.on_response_done();
        assert!(gate.try_request(now, id).is_some(), "the output sent after our request needs its own turn");
        gate.on_response_created();
        gate.on_response_done();
        assert!(gate.try_request(now, id).is_none(), "covered");
    }

    #[test]
    fn never_over_a_speaking_user_and_waits_for_vad_after_speech() {
        let now = Instant::now();
        let mut gate = ResponseGate::default();
        gate.on_speech_started();
        gate.on_output_sent();
        assert!(gate.try_request(now, id).is_none());
        gate.on_speech_stopped(now);
        assert!(gate.try_request(now, id).is_none(), "grace for server VAD");
        assert_eq!(gate.wake_at(), Some(now + AFTER_SPEECH_GRACE));
        assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_some());
    }

    #[test]
    fn vad_response_covers_outputs() {
        let now = Instant::now();
        let mut gate = ResponseGate::default();
        gate.on_speech_started();
        gate.on_output_sent();
        gate.on_speech_stopped(now);
        gate.on_response_created();
        gate.on_response_done();
        assert!(gate.try_request(now + AFTER_SPEECH_GRACE, id).is_none());
    }

    #[test]
    fn refused_request_is_retried_after_the_active_response() {
        let now = Instant::now();
        let mut gate = ResponseGate::default();
        gate.on_output_sent();
        let sent = gate.try_request(now, id).unwrap();
        // Server VAD started a response just before our request arrived: it may have missed the
        // output, so the refused request is retried after it.
        gate.on_response_created();
        assert!(gate.on_request_refused(&sent));
        gate.on_response_done();
        assert!(gate.try_request(now, id).is_some(), "retried after the racing response");

        let mut gate = ResponseGate::default();
        gate.on_output_sent();
        let sent = gate.try_request(now, id).unwrap();
        assert!(gate.on_request_refused(&sent));
        assert!(gate.try_request(now, id).is_none(), "still active");
        gate.on_response_done();
        assert!(gate.try_request(now, id).is_some(), "retried");
        assert!(!gate.on_request_refused("someone_else"));
    }
}
