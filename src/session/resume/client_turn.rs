//! What the client has under way that the upstream has not taken up yet: its last
//! `response.create` with no `response.created` after it, push-to-talk audio not yet committed,
//! and a push-to-talk commit with no `response.created` after it (the `response.create` that
//! follows a commit may come in a later read than the commit: a recycle in between would close
//! the old upstream before its item for the committed audio was read, and the new upstream would
//! answer without the question). A recycle for age waits for all three (it would cut the user's
//! turn), each for a while only; a resume sends the request again.

use std::time::Duration;

use serde_json::Value;
use tokio::time::Instant;

use crate::session::turns::REQUEST_ANSWER_TIMEOUT;

/// Push-to-talk audio not yet committed holds a due recycle off this long past its due time, at
/// most: a client that streams all the time and commits on its own VAD always has some, and a
/// stuck button never commits, yet the session must be recycled before the provider's cap cuts it
/// mid-turn anyway. Counted from the due time, not from the audio: such a client's audio is never
/// older than its last commit.
const PUSH_TO_TALK_HOLD: Duration = Duration::from_secs(15);

/// The client's last push-to-talk `input_audio_buffer.commit` that no `response.created` has
/// followed yet.
struct Commit {
    /// Its `event_id`: an upstream `error` naming it refused it (an empty buffer), and no response
    /// will follow it.
    event_id: Option<String>,
    /// When it went upstream.
    at: Instant,
}

/// The client's last `response.create` that no `response.created` has followed yet.
struct Request {
    frame: String,
    /// Its `event_id`: an upstream `error` naming it refused it, and it will never start.
    event_id: Option<String>,
    /// When it went upstream.
    at: Instant,
}

#[derive(Default)]
pub(super) struct ClientTurn {
    request: Option<Request>,
    /// The client switched turn detection off (`turn_detection: null`): it commits its turns itself.
    push_to_talk: bool,
    /// Client audio appended since its last `input_audio_buffer.commit` or `.clear`.
    audio_uncommitted: bool,
    commit: Option<Commit>,
}

impl ClientTurn {
    /// The client's `response.create` went to the live upstream.
    pub(super) fn requested(&mut self, frame: &str, event_id: Option<&str>) {
        self.request = Some(Request { frame: frame.to_string(), event_id: event_id.map(str::to_string), at: Instant::now() });
    }

    /// A response started (`response.created`): the user's turn is taken up.
    pub(super) fn started(&mut self) {
        self.request = None;
        self.commit = None;
    }

    /// The upstream answered the frame `event_id` with an `error`: if that was the request, it
    /// will never start, and is not sent again; if that was the request or the commit, no
    /// response follows the commit.
    pub(super) fn refused(&mut self, event_id: &str) {
        if self.request.as_ref().is_some_and(|r| r.event_id.as_deref() == Some(event_id)) {
            self.request = None;
            self.commit = None;
        }
        if self.commit.as_ref().is_some_and(|c| c.event_id.as_deref() == Some(event_id)) {
            self.commit = None;
        }
    }

    /// Is this frame the pending request?
    pub(super) fn is_request(&self, frame: &str) -> bool {
        self.request.as_ref().is_some_and(|r| r.frame == frame)
    }

    /// The pending request, no longer pending.
    pub(super) fn take_request(&mut self) -> Option<String> {
        self.request.take().map(|r| r.frame)
    }

    /// The client appended audio (`appended`), or cleared its buffer.
    pub(super) fn audio(&mut self, appended: bool) {
        self.audio_uncommitted = appended;
    }

    /// The client committed its buffer (`event_id`): in push-to-talk, its request for an answer
    /// is likely to follow.
    pub(super) fn committed(&mut self, event_id: Option<&str>) {
        self.audio_uncommitted = false;
        if self.push_to_talk {
            self.commit = Some(Commit { event_id: event_id.map(str::to_string), at: Instant::now() });
        }
    }

    /// voxgate sent this `session.update` upstream.
    pub(super) fn session_update(&mut self, frame: &[u8]) {
        if let Some(detecting) = turn_detection(frame) {
            self.push_to_talk = !detecting;
        }
    }

    /// The client may be in the middle of a turn the upstream has not taken up, which a recycle
    /// due at `due` would cut: push-to-talk audio appended since its last commit or clear (until
    /// [`PUSH_TO_TALK_HOLD`] past `due`), or a request or push-to-talk commit no response has
    /// followed yet (for [`REQUEST_ANSWER_TIMEOUT`] at most: one refused without an `event_id` to
    /// name it, or a commit no request follows, must not hold the recycle off for good).
    pub(super) fn open(&self, now: Instant, due: Instant) -> bool {
        self.audio_hold_ends(due).is_some_and(|at| now < at) || self.request_expires().is_some_and(|at| now < at)
    }

    /// When push-to-talk audio not yet committed stops holding a recycle due at `due`.
    pub(super) fn audio_hold_ends(&self, due: Instant) -> Option<Instant> {
        (self.push_to_talk && self.audio_uncommitted).then(|| due + PUSH_TO_TALK_HOLD)
    }

    /// When the pending request and push-to-talk commit stop holding the recycle off.
    pub(super) fn request_expires(&self) -> Option<Instant> {
        let request = self.request.as_ref().map(|r| r.at + REQUEST_ANSWER_TIMEOUT);
        request.max(self.commit.as_ref().map(|c| c.at + REQUEST_ANSWER_TIMEOUT))
    }
}

/// What a `session.update` says of turn detection: `Some(false)` when it switches it off
/// (`turn_detection: null`, under `audio.input` on GA or at the top on the beta), `Some(true)`
/// when it sets one, `None` when it says nothing of it.
fn turn_detection(frame: &[u8]) -> Option<bool> {
    let update: Value = serde_json::from_slice(frame).ok()?;
    let session = update.get("session")?;
    let detection = session.get("turn_detection").or_else(|| session.get("audio")?.get("input")?.get("turn_detection"))?;
    Some(!detection.is_null())
}

#[cfg(test)]
mod tests {
    use super::turn_detection;

    #[test]
    fn turn_detection_is_read_where_each_protocol_puts_it() {
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}"#), Some(false));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"turn_detection":{"type":"server_vad"}}}"#), Some(true));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"turn_detection":null}}"#), Some(false));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"audio":{"output":{"voice":"marin"}}}}"#), None);
    }
}
