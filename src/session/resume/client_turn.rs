//! What the client has under way that the upstream has not taken up yet: its last
//! `response.create` with no `response.created` after it, push-to-talk audio not yet committed,
//! and a push-to-talk commit with no `response.created` after it (the `response.create` that
//! follows a commit may come in a later read than the commit: a recycle in between would close
//! the old upstream before its item for the committed audio was read, and the new upstream would
//! answer without the question). A recycle for age waits for all three (it would cut the user's
//! turn), each for a while only; a resume sends the request again.
//!
//! It waits too, with input transcription on, for the transcripts the live upstream owes for the
//! user's audio items: an audio item comes with `transcript: null`, its text only in
//! `…transcription.completed`, which may come after `response.done`, and the restore carries an
//! audio turn only as its text (a recycle at `response.done` would restore the answer without
//! the question). Until the transcript, a `…transcription.failed`, or [`TRANSCRIPT_WAIT`].

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

/// A user audio item holds a due recycle off this long at most, from when the upstream reported
/// it, waiting for its transcript: transcription normally takes a second or two; one that never
/// reports must not hold the recycle off for good.
const TRANSCRIPT_WAIT: Duration = Duration::from_secs(15);

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
    /// The session has input transcription on (`transcription`, or `input_audio_transcription` on
    /// the beta, set to an object): the upstream sends a transcript for each user audio item.
    transcribing: bool,
    /// User audio items of the live upstream whose transcript has not come yet, and when the
    /// upstream reported each (only while transcribing; expired ones go at the next).
    transcripts: Vec<(String, Instant)>,
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
        let Some(session) = session_of(frame) else { return };
        if let Some(detecting) = turn_detection(&session) {
            self.push_to_talk = !detecting;
        }
        if let Some(transcribing) = transcription(&session) {
            self.transcribing = transcribing;
        }
    }

    /// The live upstream reported user audio item `item_id` without its transcript: with
    /// transcription on, one is owed.
    pub(super) fn transcript_owed(&mut self, item_id: String) {
        if self.transcribing {
            let now = Instant::now();
            self.transcripts.retain(|(_, at)| now < *at + TRANSCRIPT_WAIT);
            self.transcripts.push((item_id, now));
        }
    }

    /// Item `item_id`'s transcript came (or its transcription failed, or the item is gone).
    pub(super) fn transcript_settled(&mut self, item_id: &str) {
        self.transcripts.retain(|(id, _)| id != item_id);
    }

    /// A new upstream is the session's: the old one's transcripts will never come.
    pub(super) fn upstream_replaced(&mut self) {
        self.transcripts.clear();
    }

    /// The client may be in the middle of a turn the upstream has not taken up, which a recycle
    /// due at `due` would cut: push-to-talk audio appended since its last commit or clear (until
    /// [`PUSH_TO_TALK_HOLD`] past `due`), or a request or push-to-talk commit no response has
    /// followed yet (for [`REQUEST_ANSWER_TIMEOUT`] at most: one refused without an `event_id` to
    /// name it, or a commit no request follows, must not hold the recycle off for good), or a
    /// transcript the upstream owes (for [`TRANSCRIPT_WAIT`] at most).
    pub(super) fn open(&self, now: Instant, due: Instant) -> bool {
        [self.audio_hold_ends(due), self.request_expires(), self.transcripts_expire(due)].into_iter().flatten().any(|at| now < at)
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

    /// When the transcripts owed stop holding off a recycle due at `due`: [`TRANSCRIPT_WAIT`] after
    /// the latest item, and never later than that past `due`. Items whose transcript never comes
    /// (audio items the client created itself, an update the upstream refused) may follow one
    /// another for good, and must not keep the session from ever recycling.
    pub(super) fn transcripts_expire(&self, due: Instant) -> Option<Instant> {
        self.transcripts.iter().map(|(_, at)| *at + TRANSCRIPT_WAIT).max().map(|end| end.min(due + TRANSCRIPT_WAIT))
    }
}

/// The `session` of a `session.update`.
fn session_of(frame: &[u8]) -> Option<Value> {
    let mut update: Value = serde_json::from_slice(frame).ok()?;
    Some(update.get_mut("session")?.take())
}

/// What a `session.update`'s `session` says of turn detection: `Some(false)` when it switches it
/// off (`turn_detection: null`, under `audio.input` on GA or at the top on the beta), `Some(true)`
/// when it sets one, `None` when it says nothing of it.
fn turn_detection(session: &Value) -> Option<bool> {
    let detection = session.get("turn_detection").or_else(|| session.get("audio")?.get("input")?.get("turn_detection"))?;
    Some(!detection.is_null())
}

/// What a `session.update`'s `session` says of input transcription: `Some(true)` when it sets one
/// (`transcription` under `audio.input` on GA, `input_audio_transcription` on the beta),
/// `Some(false)` when it switches it off (`null`), `None` when it says nothing of it.
fn transcription(session: &Value) -> Option<bool> {
    let setting = session.get("input_audio_transcription").or_else(|| session.get("audio")?.get("input")?.get("transcription"))?;
    Some(setting.is_object())
}

#[cfg(test)]
mod tests {
    use super::{session_of, transcription};

    fn turn_detection(frame: &[u8]) -> Option<bool> {
        super::turn_detection(&session_of(frame)?)
    }

    #[test]
    fn turn_detection_is_read_where_each_protocol_puts_it() {
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}"#), Some(false));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"turn_detection":{"type":"server_vad"}}}"#), Some(true));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"turn_detection":null}}"#), Some(false));
        assert_eq!(turn_detection(br#"{"type":"session.update","session":{"audio":{"output":{"voice":"marin"}}}}"#), None);
    }

    #[test]
    fn transcription_is_read_where_each_protocol_puts_it() {
        let read = |frame: &[u8]| transcription(&session_of(frame)?);
        assert_eq!(read(br#"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe"}}}}}"#), Some(true));
        assert_eq!(read(br#"{"type":"session.update","session":{"type":"realtime","audio":{"input":{"transcription":null}}}}"#), Some(false));
        assert_eq!(read(br#"{"type":"session.update","session":{"input_audio_transcription":{"model":"whisper-1"}}}"#), Some(true));
        assert_eq!(read(br#"{"type":"session.update","session":{"audio":{"input":{"turn_detection":null}}}}"#), None);
    }
}
