//! The holding buffer: what voxgate would have sent upstream while there was no upstream (client
//! frames, outputs of calls finishing in the gap), kept in order and released after the restore;
//! first in it, what the old upstream's queue had and it never took, aging from when it was sent
//! as far as that is known (a stall's start).
//!
//! Bounded two ways. Audio (`input_audio_buffer.append`) older than `upstream.resume_audio_ms`
//! is stale for a voice conversation and is dropped, oldest first, with its duration counted
//! (at the session's input format's byte rate: 48 bytes a millisecond for PCM16 at 24 kHz, the
//! Realtime default, 8 for G.711). Everything held together
//! is capped at [`MAX_HELD_BYTES`]: audio is dropped first; if the other frames alone exceed the
//! cap the resume gives up, as dropping a control frame would silently change the conversation.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::time::Duration;

use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

/// Upper bound of everything held during one gap.
pub(crate) const MAX_HELD_BYTES: usize = 8 * 1024 * 1024;

/// The buffer is over its cap with nothing left it may drop.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("too much was sent while the realtime service was away")]
pub(crate) struct Overflow;

struct HeldFrame {
    message: Message,
    at: Instant,
    /// Duration of the audio it carries, for audio appends.
    audio_ms: Option<u64>,
    /// The old upstream's queue had it (never taken): see [`Released`].
    untaken: bool,
}

/// A frame released after the gap. `untaken`: it was in the old upstream's queue when the gap
/// began, not sent during the gap; a restore holds some of those already (the configuration),
/// while the old upstream, if the session goes back to it, needs every one.
pub(crate) struct Released {
    pub(crate) message: Message,
    pub(crate) untaken: bool,
}

pub(crate) struct Held {
    frames: VecDeque<HeldFrame>,
    bytes: usize,
    audio_window: Duration,
    /// The session's input audio, bytes a millisecond (at least 1).
    audio_bytes_per_ms: usize,
    audio_dropped_ms: u64,
}

impl Held {
    pub(crate) fn new(audio_window: Duration, audio_bytes_per_ms: usize) -> Self {
        Self { frames: VecDeque::new(), bytes: 0, audio_window, audio_bytes_per_ms: audio_bytes_per_ms.max(1), audio_dropped_ms: 0 }
    }

    /// Audio held from now on is in a format of `audio_bytes_per_ms` (a `session.update` held in
    /// the gap changed it); what is held already keeps its duration.
    pub(crate) fn set_audio_rate(&mut self, audio_bytes_per_ms: usize) {
        self.audio_bytes_per_ms = audio_bytes_per_ms.max(1);
    }

    pub(crate) fn push(&mut self, message: Message, now: Instant) -> Result<(), Overflow> {
        self.push_frame(message, now, now, false)
    }

    /// Hold a frame the old upstream's queue had, never taken (see [`Released`]), sent at `at`
    /// (or earlier): its audio ages from then.
    pub(crate) fn push_untaken(&mut self, message: Message, at: Instant, now: Instant) -> Result<(), Overflow> {
        self.push_frame(message, at, now, true)
    }

    fn push_frame(&mut self, message: Message, at: Instant, now: Instant, untaken: bool) -> Result<(), Overflow> {
        let audio_ms = audio_ms(&message, self.audio_bytes_per_ms);
        self.bytes += message.len();
        self.frames.push_back(HeldFrame { message, at, audio_ms, untaken });
        self.drop_stale_audio(now);
        while self.bytes > MAX_HELD_BYTES {
            if !self.drop_oldest_audio() {
                return Err(Overflow);
            }
        }
        Ok(())
    }

    /// Everything still held, in order, and the audio dropped over the gap (ms).
    pub(crate) fn release(mut self, now: Instant) -> (Vec<Released>, u64) {
        self.drop_stale_audio(now);
        (self.frames.into_iter().map(|f| Released { message: f.message, untaken: f.untaken }).collect(), self.audio_dropped_ms)
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }

    fn drop_stale_audio(&mut self, now: Instant) {
        let stale = |f: &HeldFrame| f.audio_ms.is_some() && now.duration_since(f.at) > self.audio_window;
        if !self.frames.iter().any(stale) {
            return;
        }
        let mut kept = VecDeque::with_capacity(self.frames.len());
        for frame in self.frames.drain(..) {
            if stale(&frame) {
                self.bytes -= frame.message.len();
                self.audio_dropped_ms += frame.audio_ms.unwrap_or_default();
            } else {
                kept.push_back(frame);
            }
        }
        self.frames = kept;
    }

    fn drop_oldest_audio(&mut self) -> bool {
        let Some(index) = self.frames.iter().position(|f| f.audio_ms.is_some()) else { return false };
        if let Some(frame) = self.frames.remove(index) {
            self.bytes -= frame.message.len();
            self.audio_dropped_ms += frame.audio_ms.unwrap_or_default();
        }
        true
    }
}

/// The duration of an `input_audio_buffer.append`, from its base64 length and the input's bytes a
/// millisecond; `None` for any other frame.
fn audio_ms(message: &Message, bytes_per_ms: usize) -> Option<u64> {
    // `Cow`, not `&str`: a string with escapes cannot be borrowed, and base64 is full of `/`,
    // which some encoders (PHP's `json_encode`) write as `\/`; with `&str` such an append would
    // fail to parse and be held as a control frame, never aged out nor counted.
    #[derive(serde::Deserialize)]
    struct Append<'a> {
        #[serde(borrow)]
        r#type: Cow<'a, str>,
        #[serde(borrow)]
        audio: Option<Cow<'a, str>>,
    }
    let Message::Text(text) = message else { return None };
    let append: Append<'_> = serde_json::from_str(text.as_str()).ok()?;
    (append.r#type == "input_audio_buffer.append").then(|| (append.audio.unwrap_or_default().len() * 3 / 4 / bytes_per_ms) as u64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// PCM16 at 24 kHz, bytes a millisecond.
    const PCM16: usize = 48;

    /// 100 ms of PCM16 24 kHz audio, base64: 4800 bytes → 6400 characters.
    fn audio(tag: usize) -> Message {
        Message::text(json!({"type": "input_audio_buffer.append", "event_id": format!("a{tag}"), "audio": "A".repeat(6400)}).to_string())
    }

    fn text_of(message: &Message) -> serde_json::Value {
        serde_json::from_str(message.to_text().unwrap()).unwrap()
    }

    #[test]
    fn frames_come_out_in_order_and_stale_audio_is_dropped_and_counted() {
        let start = Instant::now();
        let mut held = Held::new(Duration::from_millis(1000), PCM16);
        held.push(audio(0), start).unwrap();
        held.push(Message::text(r#"{"type":"conversation.item.create","event_id":"c"}"#), start).unwrap();
        held.push(audio(1), start + Duration::from_millis(900)).unwrap();
        held.push(audio(2), start + Duration::from_millis(1500)).unwrap();
        assert_eq!(held.len(), 3, "the first audio is past the window at 1.5 s");
        let (frames, dropped_ms) = held.release(start + Duration::from_millis(1600));
        let ids: Vec<String> = frames.iter().map(|f| text_of(&f.message)["event_id"].as_str().unwrap().to_string()).collect();
        assert_eq!(ids, ["c", "a1", "a2"], "non-audio frames are never dropped for age");
        assert_eq!(dropped_ms, 100);
    }

    #[test]
    fn the_byte_cap_drops_audio_first_then_gives_up() {
        let now = Instant::now();
        let mut held = Held::new(Duration::from_secs(3600), PCM16);
        for i in 0..(MAX_HELD_BYTES / 6400 + 10) {
            held.push(audio(i), now).unwrap();
        }
        let (frames, dropped_ms) = Held::release(held, now);
        assert!(frames.iter().map(|f| f.message.len()).sum::<usize>() <= MAX_HELD_BYTES);
        assert!(dropped_ms >= 1000);

        let mut held = Held::new(Duration::from_secs(3600), PCM16);
        let big = Message::text(format!(r#"{{"type":"session.update","x":"{}"}}"#, "x".repeat(MAX_HELD_BYTES)));
        assert_eq!(held.push(big, now), Err(Overflow));
    }

    #[test]
    fn only_audio_appends_have_a_duration() {
        assert_eq!(audio_ms(&audio(0), PCM16), Some(100));
        assert_eq!(audio_ms(&audio(0), 8), Some(600), "the same bytes are 600 ms of G.711");
        // PHP's json_encode escapes every `/` of the base64: serde cannot borrow that string.
        let escaped = format!(r#"{{"type":"input_audio_buffer.append","audio":"{}"}}"#, r"AAA\/".repeat(1600));
        assert_eq!(audio_ms(&Message::text(escaped), PCM16), Some(100));
        assert_eq!(audio_ms(&Message::text(r#"{"type":"input_audio_buffer.commit"}"#), PCM16), None);
        assert_eq!(audio_ms(&Message::text("not json"), PCM16), None);
        assert_eq!(audio_ms(&Message::Binary(vec![1, 2].into()), PCM16), None);
    }
}
