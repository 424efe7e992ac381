//! The fast way to read a client frame's `type`: most client frames are
//! `input_audio_buffer.append` written by `JSON.stringify`, i.e. one flat object of plain string
//! fields with `type` first and no whitespace. [`peek_flat`] recognises exactly that shape and
//! proves it is JSON while looking for nothing but the two closing quotes of each string (SIMD
//! `memchr`) and control characters (a loop the compiler vectorises), without building anything.
//!
//! Anything else — whitespace, escapes, nested values, numbers, a repeated `type` or `event_id` —
//! is not judged here: the caller falls back to the full check ([`super::peek_checked`]), so the
//! verdict on every frame (valid or an `error` event) is the same as before, only cheaper for the
//! common shape. A repeated `type` in particular must never pass: a peer whose JSON parser keeps
//! the last duplicate would read another event than the one voxgate classified.

/// How a frame starts when its `type` comes first and without whitespace, as realtime servers and
/// `JSON.stringify` write it.
pub(super) const TYPE_FIRST: &str = "{\"type\":\"";

/// `type` and `event_id` of a frame of the shape `{"type":"…"(,"key":"value")*}` whose strings
/// hold no escapes and no control characters; `None` for any other shape (not necessarily bad).
pub fn peek_flat(frame: &str) -> Option<(&str, Option<&str>)> {
    let rest = frame.strip_prefix(TYPE_FIRST)?;
    let (kind, mut rest) = plain_string(rest)?;
    if kind.is_empty() {
        return None;
    }
    let mut event_id = None;
    loop {
        if rest == "}" {
            return Some((kind, event_id));
        }
        rest = rest.strip_prefix(",\"")?;
        let (key, after_key) = plain_string(rest)?;
        let after_colon = after_key.strip_prefix(":\"")?;
        let (value, after_value) = plain_string(after_colon)?;
        match key {
            // Duplicates are the full parser's to refuse (see the module doc).
            "type" => return None,
            "event_id" if event_id.is_some() => return None,
            "event_id" => event_id = Some(value),
            _ => {}
        }
        rest = after_value;
    }
}

/// Where the string whose opening quote is already consumed ends (its closing quote); `None` when
/// an escape comes first or there is no quote.
pub(super) fn closing_quote(bytes: &[u8]) -> Option<usize> {
    let end = memchr::memchr2(b'"', b'\\', bytes)?;
    (bytes[end] == b'"').then_some(end)
}

/// The body of a string whose opening quote is already consumed, and what follows its closing
/// quote; `None` when it holds an escape or a control character (valid JSON needs those handled).
fn plain_string(s: &str) -> Option<(&str, &str)> {
    let bytes = s.as_bytes();
    let end = closing_quote(bytes)?;
    // A control character is a byte below 0x20, so the body holds one exactly when its smallest
    // byte is one. A minimum over the whole slice (no early exit) compiles to one vector `min` per
    // 16 bytes: half the instructions of a per-byte comparison folded into a flag (callgrind,
    // docs/performance-history.md, seventeenth pass).
    let smallest = bytes[..end].iter().fold(u8::MAX, |low, &b| low.min(b));
    if smallest < 0x20 {
        return None;
    }
    // Both cuts are next to an ASCII quote, so they are char boundaries.
    Some((&s[..end], &s[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::peek_checked;

    #[test]
    fn reads_the_browser_shape() {
        let frame = r#"{"type":"input_audio_buffer.append","audio":"AAAA/+9=","event_id":"e1"}"#;
        assert_eq!(peek_flat(frame), Some(("input_audio_buffer.append", Some("e1"))));
        assert_eq!(peek_flat(r#"{"type":"input_audio_buffer.commit"}"#), Some(("input_audio_buffer.commit", None)));
        assert_eq!(peek_flat(r#"{"type":"x","audio":"é ü"}"#), Some(("x", None)));
        // Space and DEL are not control characters to JSON.
        assert_eq!(peek_flat("{\"type\":\"x\",\"a\":\" \u{7f}\"}"), Some(("x", None)));
    }

    #[test]
    fn every_other_shape_goes_to_the_full_check() {
        for frame in [
            r#"{"type":"a","type":"session.update"}"#,
            r#"{"type":"a","event_id":"1","event_id":"2"}"#,
            r#"{"type":"a","\u0074ype":"session.update"}"#,
            r#"{"type":"a","audio":"AA\"AA"}"#,
            "{\"type\":\"a\",\"audio\":\"A\nA\"}",
            "{\"type\":\"a\",\"audio\":\"AA\u{1f}\"}",
            "{\"type\":\"a\u{0}\"}",
            r#"{"type":"a","n":1}"#,
            r#"{"type":"a","o":{"type":"b"}}"#,
            r#"{"type":"a", "audio":"A"}"#,
            r#"{"type":"a","audio":"A"} "#,
            r#"{"type":"a","audio":"A"}}"#,
            r#"{"type":"a","audio":"A""#,
            r#"{"type":"a","audio":"A","#,
            r#"{"type":"a","audio"}"#,
            r#"{"type":""}"#,
            r#"{"audio":"A","type":"a"}"#,
            r#"{ "type":"a"}"#,
        ] {
            assert_eq!(peek_flat(frame), None, "{frame}");
        }
    }

    #[test]
    fn agrees_with_the_full_check_whenever_it_answers() {
        let frames = [
            r#"{"type":"input_audio_buffer.append","audio":"AAAA"}"#,
            r#"{"type":"a.b","event_id":"c1","x":"y"}"#,
            r#"{"type":"a","x":"1","x":"2"}"#,
            r#"{"type":"voxgate.tool_call.confirm","call_id":"c"}"#,
        ];
        for frame in frames {
            let (kind, id) = peek_flat(frame).unwrap();
            let (full_kind, full_id) = peek_checked(frame.as_bytes()).unwrap();
            assert_eq!((kind, id), (full_kind.as_ref(), full_id.as_deref()), "{frame}");
        }
    }
}
