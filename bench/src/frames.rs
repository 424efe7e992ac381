//! The frames the bench sends and how it reads them back without parsing the audio.
//!
//! Every audio frame carries its own identity: the first 12 bytes of the PCM are overwritten with
//! the session's sequence number (u32) and the send time in microseconds since the run's epoch
//! (u64). 12 bytes are exactly 16 base64 characters, so the stamp can be written straight into a
//! pre-encoded base64 template without re-encoding the rest — the load generator stays cheap — and
//! the echo copies it back untouched, so the client needs no table of in-flight frames.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// `input_audio_buffer.append` up to the start of the base64 audio.
const APPEND_PREFIX: &str = r#"{"type":"input_audio_buffer.append","audio":""#;
/// `response.output_audio.delta` up to the start of the base64 audio (the echo's answer).
pub const DELTA_PREFIX: &str = r#"{"type":"response.output_audio.delta","event_id":"evt_bench","response_id":"resp_bench","item_id":"item_bench","output_index":0,"content_index":0,"delta":""#;
const STAMP_BYTES: usize = 12;
const STAMP_CHARS: usize = 16;

/// A ready-to-send append frame, re-stamped for every send.
#[derive(Clone)]
pub struct AppendTemplate {
    text: String,
}

impl AppendTemplate {
    /// `audio_bytes` of PCM16 (a 440 Hz tone; the content only has to look like audio).
    pub fn new(audio_bytes: usize) -> Self {
        let samples = audio_bytes.div_ceil(2).max(STAMP_BYTES / 2);
        let mut pcm = Vec::with_capacity(samples * 2);
        for i in 0..samples {
            let phase = i as f64 * 440.0 * std::f64::consts::TAU / 24_000.0;
            let sample = (phase.sin() * 8_000.0) as i16;
            pcm.extend_from_slice(&sample.to_le_bytes());
        }
        pcm.truncate(audio_bytes.max(STAMP_BYTES));
        let mut text = String::with_capacity(APPEND_PREFIX.len() + pcm.len() * 4 / 3 + 8);
        text.push_str(APPEND_PREFIX);
        STANDARD.encode_string(&pcm, &mut text);
        text.push_str("\"}");
        Self { text }
    }

    /// The frame for `seq` sent at `t_us`.
    pub fn stamped(&self, seq: u32, t_us: u64) -> String {
        let mut text = self.text.clone();
        let stamp = encode_stamp(seq, t_us);
        // SAFETY-free: base64 output is ASCII, so replacing ASCII bytes keeps the String valid UTF-8.
        text.replace_range(APPEND_PREFIX.len()..APPEND_PREFIX.len() + STAMP_CHARS, &stamp);
        text
    }

    pub fn len(&self) -> usize {
        self.text.len()
    }
}

fn encode_stamp(seq: u32, t_us: u64) -> String {
    let mut raw = [0u8; STAMP_BYTES];
    raw[..4].copy_from_slice(&seq.to_le_bytes());
    raw[4..].copy_from_slice(&t_us.to_le_bytes());
    STANDARD.encode(raw)
}

/// The (seq, send time) stamped at the start of a base64 audio string.
pub fn decode_stamp(audio_b64: &[u8]) -> Option<(u32, u64)> {
    let head = audio_b64.get(..STAMP_CHARS)?;
    let mut raw = [0u8; STAMP_BYTES];
    let n = STANDARD.decode_slice(head, &mut raw).ok()?;
    if n != STAMP_BYTES {
        return None;
    }
    let seq = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
    let mut t = [0u8; 8];
    t.copy_from_slice(&raw[4..]);
    Some((seq, u64::from_le_bytes(t)))
}

/// The `type` of a frame whose `type` comes first (every frame the bench and the echo build, and
/// what voxgate forwards as-is); `None` for any other layout, which callers then parse properly.
pub fn fast_type(bytes: &[u8]) -> Option<&str> {
    let rest = bytes.strip_prefix(br#"{"type":""#)?;
    let end = memchr::memchr(b'"', rest.get(..rest.len().min(96))?)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// The string value of the first `"<key>":"…"` in a frame, found by search rather than by parsing
/// (base64 and the event names never contain escapes).
pub fn string_field<'a>(bytes: &'a [u8], key: &str) -> Option<&'a [u8]> {
    let needle = format!("\"{key}\":\"");
    let start = memchr::memmem::find(bytes, needle.as_bytes())? + needle.len();
    let len = memchr::memchr(b'"', &bytes[start..])?;
    Some(&bytes[start..start + len])
}

/// The echo's answer to one append: the same audio as a `response.output_audio.delta`.
pub fn echo_delta(append: &[u8]) -> Option<String> {
    let audio = string_field(append, "audio")?;
    let audio = std::str::from_utf8(audio).ok()?;
    let mut out = String::with_capacity(DELTA_PREFIX.len() + audio.len() + 2);
    out.push_str(DELTA_PREFIX);
    out.push_str(audio);
    out.push_str("\"}");
    Some(out)
}

/// The stamp of an audio delta, as the client reads it.
pub fn delta_stamp(frame: &[u8]) -> Option<(u32, u64)> {
    decode_stamp(string_field(frame, "delta")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_survives_the_echo() {
        let template = AppendTemplate::new(1920);
        let frame = template.stamped(7, 123_456_789);
        assert_eq!(frame.len(), template.len());
        assert_eq!(fast_type(frame.as_bytes()), Some("input_audio_buffer.append"));
        let delta = echo_delta(frame.as_bytes()).unwrap();
        assert_eq!(fast_type(delta.as_bytes()), Some("response.output_audio.delta"));
        assert_eq!(delta_stamp(delta.as_bytes()), Some((7, 123_456_789)));
        let parsed: serde_json::Value = serde_json::from_str(&delta).unwrap();
        assert_eq!(parsed["delta"].as_str().unwrap().len(), 2560);
    }

    #[test]
    fn other_layouts_are_left_to_a_real_parse() {
        assert_eq!(fast_type(br#"{"event_id":"e","type":"session.update"}"#), None);
        assert_eq!(string_field(br#"{"a":"b","call_id":"c1"}"#, "call_id"), Some(&b"c1"[..]));
        assert_eq!(delta_stamp(br#"{"type":"x","delta":"AA"}"#), None);
    }
}
