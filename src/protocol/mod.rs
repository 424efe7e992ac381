//! Reading frames without owning them: voxgate classifies every frame by peeking at its top-level
//! `type`, and parses further only the few events it acts on. Everything else — audio above all —
//! is forwarded as the very same bytes.
//!
//! - [`client`]: the client events voxgate reads (`session.update`, `conversation.item.create`,
//!   `voxgate.tool_call.confirm`).
//! - [`flat`]: the fast check of the common client frame shape (audio appends), used by
//!   [`peek_client`] before the full one.
//! - [`server`]: the upstream events voxgate reads (response lifecycle, speech, function-call items).
//! - [`voxgate`]: the `voxgate.*` events voxgate emits and the standard `error` event.

pub mod client;
pub mod flat;
pub mod server;
pub mod voxgate;
mod unique_keys;

use std::borrow::Cow;

use serde::Deserialize;

/// Why a frame could not be classified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the frame is not valid JSON")]
    NotJson,
    #[error("the frame has no string `type` field")]
    MissingType,
}

impl FrameError {
    /// The `voxgate_*` code sent in the client's `error` event.
    pub fn code(self) -> &'static str {
        match self {
            FrameError::NotJson => "voxgate_invalid_json",
            FrameError::MissingType => "voxgate_missing_type",
        }
    }
}

#[derive(Deserialize)]
struct TypeOnly<'a> {
    #[serde(borrow, rename = "type", default)]
    kind: Option<StrOrOther<'a>>,
    #[serde(borrow, default)]
    event_id: Option<StrOrOther<'a>>,
}

/// A field that should be a string; anything else is kept apart instead of failing the frame.
#[derive(Deserialize)]
#[serde(untagged)]
enum StrOrOther<'a> {
    Str(#[serde(borrow)] Cow<'a, str>),
    Other(serde::de::IgnoredAny),
}

impl<'a> StrOrOther<'a> {
    fn into_str(self) -> Option<Cow<'a, str>> {
        match self {
            StrOrOther::Str(s) => Some(s),
            StrOrOther::Other(_) => None,
        }
    }
}

/// The `type` (and `event_id`, when present) of a frame, validating that the whole frame is JSON.
/// Other fields are skipped without being built into values.
pub fn peek_checked(bytes: &[u8]) -> Result<(Cow<'_, str>, Option<Cow<'_, str>>), FrameError> {
    let peek: TypeOnly<'_> = serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)?;
    let event_id = peek.event_id.and_then(StrOrOther::into_str);
    match peek.kind.and_then(StrOrOther::into_str) {
        Some(kind) if !kind.is_empty() => Ok((kind, event_id)),
        _ => Err(FrameError::MissingType),
    }
}

/// The `type` and `event_id` of a client frame, with the same verdict as [`peek_checked`]: the
/// flat shape every audio append has is checked by [`flat::peek_flat`] without a JSON parser; any
/// other frame goes through the full check.
pub fn peek_client(frame: &str) -> Result<(Cow<'_, str>, Option<Cow<'_, str>>), FrameError> {
    match flat::peek_flat(frame) {
        Some((kind, event_id)) => Ok((Cow::Borrowed(kind), event_id.map(Cow::Borrowed))),
        None => peek_checked(frame.as_bytes()),
    }
}

/// The `type` of an upstream frame, as cheaply as possible: realtime servers put `type` first, so
/// the common case reads it from the first bytes. Falls back to a full parse for any other layout.
///
/// The type read must be the one the client will see. A browser's `JSON.parse` keeps the *last*
/// of two `type` keys, so a frame `{"type":"response.output_text.delta", …, "type":"voxgate.…"}`
/// read by its first would reach the client as a forged voxgate event. The fast path is therefore
/// taken only when nothing after the first value could be another `type` key: no second `"type"`
/// and no escape (a key written `"typ\u0065"` reads as `type`). Otherwise the full parse decides,
/// and it refuses a frame with two top-level `type` keys ([`FrameError::NotJson`]).
pub fn peek_type(frame: &str) -> Result<Cow<'_, str>, FrameError> {
    if let Some(rest) = frame.strip_prefix(flat::TYPE_FIRST) {
        // Event type names never contain escapes; a quote ends the value. Looked for with memchr
        // in the first 128 bytes (a byte loop here cost more than the rest of the classification).
        if let Some(end) = flat::closing_quote(&rest.as_bytes()[..rest.len().min(128)])
            && !may_hold_another_type(&rest.as_bytes()[end + 1..])
        {
            // Next to an ASCII quote, so a char boundary.
            return Ok(Cow::Borrowed(&rest[..end]));
        }
    }
    peek_checked(frame.as_bytes()).map(|(kind, _)| kind)
}

/// Could `tail` (a frame after its first `type` value) hold a key that reads as `type`: another
/// `"type"`, or an escape (that could spell one)? Nested `type` keys (an item's) also answer yes;
/// the full parse then tells them apart.
///
/// One search from the end, back across the frame's last string (in an audio delta, kilobytes of
/// base64 that hold neither a quote nor a backslash); only what comes before that string is
/// searched for `"type"` and escapes. In valid JSON the last quote closes the last string and,
/// with no backslash between, the quote before it opens that string, so no key lies in between.
/// (Searching the whole tail twice cost ≈ 1,270 instructions per audio frame, callgrind.)
fn may_hold_another_type(tail: &[u8]) -> bool {
    static TYPE_KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"type\"").into_owned());
    let Some(close) = memchr::memrchr2(b'"', b'\\', tail) else { return false };
    let Some(open) = memchr::memrchr2(b'"', b'\\', &tail[..close]) else { return true };
    if tail[close] == b'\\' || tail[open] == b'\\' || &tail[open..=close] == b"\"type\"" {
        return true;
    }
    let head = &tail[..=open];
    memchr::memchr(b'\\', head).is_some() || TYPE_KEY.find(head).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_reads_only_the_prefix() {
        let frame = r#"{"type":"response.output_audio.delta","delta":"AAAA"#; // truncated on purpose
        assert_eq!(peek_type(frame).unwrap(), "response.output_audio.delta");
    }

    #[test]
    fn escaped_or_long_types_take_the_full_parse() {
        assert_eq!(peek_type(r#"{"type":"a\u002eb","x":1}"#).unwrap(), "a.b");
        let long = format!(r#"{{"type":"{}","x":1}}"#, "t".repeat(200));
        assert_eq!(peek_type(&long).unwrap(), "t".repeat(200));
        assert_eq!(peek_type(r#"{"type":"cut"#).unwrap_err(), FrameError::NotJson);
    }

    #[test]
    fn a_second_type_key_is_never_read_past() {
        // What the client would read (JSON.parse keeps the last duplicate) must not differ from
        // what voxgate read: such a frame is refused, whichever way the second key is written.
        for frame in [
            r#"{"type":"response.output_text.delta","delta":"hi","type":"voxgate.tool_call.confirmation_requested"}"#,
            r#"{"type":"response.output_text.delta","type":"voxgate.tool_call.confirmation_requested"}"#,
            r#"{"event_id":"e","type":"response.output_text.delta","type":"voxgate.tool_call.completed"}"#,
        ] {
            assert_eq!(peek_type(frame).unwrap_err(), FrameError::NotJson, "{frame}");
        }
        // A nested `type` and an escaped text are read in full, correctly.
        let item = r#"{"type":"response.output_item.added","item":{"type":"function_call","name":"x"}}"#;
        assert_eq!(peek_type(item).unwrap(), "response.output_item.added");
        let text = r#"{"type":"response.output_text.delta","delta":"say "hi"
"}"#;
        assert_eq!(peek_type(text).unwrap(), "response.output_text.delta");
        // An audio delta takes the fast path (its tail has no `"type"` and no escape).
        let audio = format!(r#"{{"type":"response.output_audio.delta","event_id":"e","delta":"{}"}}"#, "QUFB".repeat(600));
        assert!(!may_hold_another_type(audio.as_bytes()[40..].as_ref()));
        // Wherever the second key or the escape stands: before the last string, as the last string,
        // straddling the quote that opens it, or in it.
        for tail in [
            r#","type":"voxgate.x","delta":"QUFB"}"#,
            r#","delta":"QUFB","type":"#,
            r#","delta":"QUFB","type":1}"#,
            r#","a":"type"}"#,
            r#","delta":"QU\"FB"}"#,
            r#","delta":"QUFB\""}"#,
            r#","typ\u0065":"voxgate.x","delta":"QUFB"}"#,
            r#"""#,
        ] {
            assert!(may_hold_another_type(tail.as_bytes()), "{tail}");
        }
        for tail in [r#","delta":"QUFB"}"#, r#","output_index":0}"#, "}", r#","a":"typ","b":"e"}"#] {
            assert!(!may_hold_another_type(tail.as_bytes()), "{tail}");
        }
    }

    #[test]
    fn other_layouts_fall_back_to_a_real_parse() {
        let frame = r#"{"event_id":"e1","item":{"type":"message"},"type":"conversation.item.create"}"#;
        assert_eq!(peek_type(frame).unwrap(), "conversation.item.create");
        let spaced = r#"{ "type" : "session.update" }"#;
        assert_eq!(peek_type(spaced).unwrap(), "session.update");
    }

    #[test]
    fn checked_peek_rejects_broken_frames() {
        assert_eq!(peek_checked(b"not json").unwrap_err(), FrameError::NotJson);
        assert_eq!(peek_checked(br#"{"type":"x","audio":"AAA"#).unwrap_err(), FrameError::NotJson);
        assert_eq!(peek_checked(br#"{"audio":"AAA"}"#).unwrap_err(), FrameError::MissingType);
        assert_eq!(peek_checked(br#"{"type":5}"#).unwrap_err(), FrameError::MissingType);
        assert_eq!(peek_checked(b"[1,2]").unwrap_err(), FrameError::MissingType);
        let (kind, id) = peek_checked(br#"{"type":"a.b","event_id":"c1","x":[1,{"type":"z"}]}"#).unwrap();
        assert_eq!((kind.as_ref(), id.as_deref()), ("a.b", Some("c1")));
    }
}
