//! The restore plan: a pure function from (effective session configuration, conversation log) to
//! the frames a fresh upstream session needs, in the order they must be sent.
//!
//! First one `session.update` with the effective configuration (what the client's updates set,
//! merged with voxgate's tool injection), then one `conversation.item.create` per logged item,
//! oldest first. Each item keeps the id the old session gave it, so the new upstream's echoes of
//! the restore (`conversation.item.created/added/done`) are recognised and kept from the client.
//! Every frame carries an event id starting with [`RESTORE_EVENT_PREFIX`]: an `error` about the
//! restore is voxgate's business, not the client's.
//!
//! What is skipped: messages with no text (an audio turn whose transcript never came) and an
//! output whose call was dropped from the log (a server refuses an output for an unknown call).

use std::collections::HashSet;

use serde_json::{Map, Value, json};

use super::log::{ConversationLog, Entry};
use crate::config::UpstreamProtocol;

/// Event-id prefix of the restore's frames (inside voxgate's own prefix).
pub(crate) const RESTORE_EVENT_PREFIX: &str = "voxgate_restore_";

pub(crate) struct Restore {
    /// Frames to send, in order.
    pub frames: Vec<String>,
    /// Item ids restored (their echoes are not forwarded to the client).
    pub item_ids: HashSet<String>,
    /// The event id of the `session.update` among the frames, if there is one (its
    /// `session.updated` is not forwarded; an `error` naming it says the upstream refused it).
    pub session_event_id: Option<String>,
    /// Items the log dropped to stay within its bounds (the oldest), over the session's life.
    pub items_dropped: usize,
}

/// The effective session configuration: every `session.update` voxgate sent upstream that the
/// upstream accepted (or had not answered when it went away: `resume/updates.rs`), merged
/// field by field at every depth (see [`merge_into`]), less voxgate's own tool definitions. Kept
/// as JSON text, parsed only to merge (once or twice a session) and to restore: as a parsed
/// `Value` the ≈ 14 KB configuration with its tool schemas cost every idle session ≈ 100 KiB, as
/// text ≈ 18 KiB. The server tools are the same for every session of a user, so they are not
/// kept at all: the restore puts them back.
#[derive(Debug, Default)]
pub(crate) struct EffectiveSession(Option<Box<str>>);

impl EffectiveSession {
    fn parsed(&self) -> Map<String, Value> {
        self.0.as_deref().and_then(|text| serde_json::from_str(text).ok()).unwrap_or_default()
    }

    /// Merge an accepted update into the configuration, as the server does (see [`merge_into`]).
    pub(crate) fn merge(&mut self, update: SessionUpdate) {
        let mut merged = self.parsed();
        merge_into(&mut merged, update.parsed());
        self.0 = Some(Value::Object(merged).to_string().into_boxed_str());
    }

    /// Bytes of the client's audio a millisecond, in the input format this configuration with
    /// `pending` merged over it sets (GA `audio.input.format`, beta `input_audio_format`): G.711
    /// (`audio/pcmu`, `audio/pcma`, `g711_ulaw`, `g711_alaw`) is 8 kHz at one byte a sample,
    /// PCM16 two bytes a sample at its rate, 24 kHz unless another is given (the Realtime
    /// default). Parsed once for all.
    pub(crate) fn input_audio_bytes_per_ms<'a>(&self, pending: impl IntoIterator<Item = &'a SessionUpdate>) -> usize {
        const PCM16_24KHZ: usize = 48;
        // A rate past any audio's (a client's typo, or worse) is not believed.
        const MAX_PCM_RATE: u64 = 384_000;
        let mut session = self.parsed();
        for update in pending {
            merge_into(&mut session, update.parsed());
        }
        let format = session.get("audio").and_then(|audio| audio.pointer("/input/format"));
        let name = match format {
            Some(format) => format.get("type").and_then(Value::as_str),
            None => session.get("input_audio_format").and_then(Value::as_str),
        };
        match name {
            Some("audio/pcmu" | "audio/pcma" | "g711_ulaw" | "g711_alaw") => 8,
            _ => match format.and_then(|f| f.get("rate")).and_then(Value::as_u64) {
                // Two bytes a sample; a rate under 1 kHz is nonsense, kept from dividing by zero.
                Some(rate) if (1000..=MAX_PCM_RATE).contains(&rate) => (rate as usize * 2) / 1000,
                _ => PCM16_24KHZ,
            },
        }
    }
}

/// `server_tools`: the definitions voxgate injects for this user, put back into `tools`.
pub(crate) fn plan(session: &EffectiveSession, log: &ConversationLog, protocol: UpstreamProtocol, server_tools: &[Value]) -> Restore {
    let mut frames = Vec::with_capacity(log.len() + 1);
    let mut serial = 0usize;
    let mut event_id = || {
        serial += 1;
        format!("{RESTORE_EVENT_PREFIX}{serial}")
    };
    let mut session = session.parsed();
    if let Some(Value::Array(tools)) = session.get_mut("tools") {
        tools.extend(server_tools.iter().cloned());
    }
    let mut session_event_id = None;
    if !session.is_empty() {
        if protocol == UpstreamProtocol::Ga {
            session.entry("type").or_insert_with(|| json!("realtime"));
        }
        let id = event_id();
        frames.push(json!({"type": "session.update", "event_id": id, "session": session}).to_string());
        session_event_id = Some(id);
    }
    let assistant_part = match protocol {
        UpstreamProtocol::Ga => "output_text",
        UpstreamProtocol::Beta => "text",
    };
    let mut calls = HashSet::new();
    let mut item_ids = HashSet::new();
    for logged in log.items() {
        let item = match &logged.entry {
            Entry::User(text) if !text.is_empty() => {
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
            }
            Entry::Assistant(text) if !text.is_empty() => {
                json!({"type": "message", "role": "assistant", "content": [{"type": assistant_part, "text": text}]})
            }
            // A call whose arguments never finished was not run and gets no output.
            Entry::Call { call_id, name, arguments, complete: true } => {
                calls.insert(call_id.as_str());
                json!({"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments})
            }
            Entry::Output { call_id, output } if calls.contains(call_id.as_str()) => {
                json!({"type": "function_call_output", "call_id": call_id, "output": output})
            }
            _ => continue,
        };
        let mut item = item;
        item["id"] = json!(logged.id);
        item_ids.insert(logged.id.clone());
        frames.push(json!({"type": "conversation.item.create", "event_id": event_id(), "item": item}).to_string());
    }
    Restore { frames, item_ids, session_event_id, items_dropped: log.dropped() }
}

/// The `session` of a `session.update` frame voxgate sent, less voxgate's own tool definitions
/// (the restore puts them back; see [`EffectiveSession`]), kept as text until the upstream answers
/// it: merged into the effective configuration once accepted ([`EffectiveSession::merge`]),
/// dropped if refused.
#[derive(Debug)]
pub(crate) struct SessionUpdate {
    /// The frame's `event_id`: an upstream `error` naming it refuses the update.
    pub event_id: Option<String>,
    session: Box<str>,
}

impl SessionUpdate {
    /// Bytes it holds.
    pub(crate) fn len(&self) -> usize {
        self.session.len()
    }

    fn parsed(&self) -> Map<String, Value> {
        serde_json::from_str(&self.session).unwrap_or_default()
    }

    /// `None` when the frame is not a JSON object. One without a `session` object changes nothing
    /// but is answered all the same (an empty update keeps its place among the answers).
    pub(crate) fn read(frame: &[u8], is_server_tool: impl Fn(&str) -> bool) -> Option<Self> {
        let Ok(Value::Object(mut update)) = serde_json::from_slice::<Value>(frame) else { return None };
        let event_id = update.get("event_id").and_then(Value::as_str).map(str::to_string);
        let mut session = match update.remove("session") {
            Some(Value::Object(session)) => session,
            _ => Map::new(),
        };
        // An update's tools replace the old ones whole (see `merge_into`), so leaving voxgate's
        // out of the update leaves them out of the merged configuration.
        if let Some(Value::Array(tools)) = session.get_mut("tools") {
            tools.retain(|tool| !tool["name"].as_str().is_some_and(&is_server_tool));
        }
        Some(Self { event_id, session: Value::Object(session).to_string().into_boxed_str() })
    }
}

/// Read and merge at once, as if the upstream had accepted the update.
#[cfg(test)]
pub(crate) fn merge_session_update(effective: &mut EffectiveSession, frame: &[u8], is_server_tool: impl Fn(&str) -> bool) {
    if let Some(update) = SessionUpdate::read(frame, is_server_tool) {
        effective.merge(update);
    }
}

/// Only the fields an update names change, at any depth: the server keeps
/// `audio.input.format` when an update sets only `audio.output.voice`, so a shallow merge would
/// restore a g711 or push-to-talk session as PCM16 with server VAD. A value that is not an object
/// on both sides replaces the old one: `null` clears (`turn_detection: null` is push-to-talk),
/// arrays such as `tools` replace whole. An object whose `type` changes is another variant
/// (`server_vad` to `semantic_vad`, `audio/pcm` to `audio/pcmu`) and replaces the old one too:
/// the old variant's fields would make the server refuse the restore's update.
fn merge_into(old: &mut Map<String, Value>, update: Map<String, Value>) {
    for (key, value) in update {
        match (old.get_mut(&key), value) {
            (Some(Value::Object(old)), Value::Object(new)) if same_variant(old, &new) => merge_into(old, new),
            (_, value) => {
                old.insert(key, value);
            }
        }
    }
}

/// Both objects are of one variant, or at least one names none.
fn same_variant(old: &Map<String, Value>, new: &Map<String, Value>) -> bool {
    match (old.get("type"), new.get("type")) {
        (Some(old), Some(new)) => old == new,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(restore: &Restore) -> Vec<Value> {
        restore.frames.iter().map(|f| serde_json::from_str(f).unwrap()).collect()
    }

    fn log_of(events: &[Value]) -> ConversationLog {
        let mut log = ConversationLog::new(100, 100_000);
        for event in events {
            log.observe(event["type"].as_str().unwrap(), event.to_string().as_bytes());
        }
        log
    }

    fn item(value: Value) -> Value {
        json!({"type": "conversation.item.done", "item": value})
    }

    #[test]
    fn the_session_then_every_item_in_order_with_its_old_id() {
        let mut session = EffectiveSession::default();
        merge_session_update(&mut session, br#"{"type":"session.update","session":{"tools":[{"name":"t"},{"name":"server"}],"type":"realtime"}}"#, |n| n == "server");
        merge_session_update(&mut session, br#"{"type":"session.update","session":{"instructions":"Be brief.","voice":"marin"}}"#, |n| n == "server");
        assert!(!session.0.as_deref().unwrap().contains("server"), "server tools are not kept");
        let log = log_of(&[
            item(json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": "Dose?"}]})),
            item(json!({"id": "f1", "type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"})),
            item(json!({"id": "o1", "type": "function_call_output", "call_id": "c1", "output": "{\"ok\":1}"})),
            item(json!({"id": "a1", "type": "message", "role": "assistant", "content": [{"type": "output_audio", "transcript": "5 mg."}]})),
        ]);
        let restore = plan(&session, &log, UpstreamProtocol::Ga, &[json!({"name": "server", "type": "function"})]);
        let frames = parsed(&restore);
        assert_eq!(frames.len(), 5);
        assert_eq!(frames[0]["type"], "session.update");
        let tools = json!([{"name": "t"}, {"name": "server", "type": "function"}]);
        assert_eq!(frames[0]["session"], json!({"tools": tools, "type": "realtime", "instructions": "Be brief.", "voice": "marin"}));
        let items: Vec<&Value> = frames[1..].iter().map(|f| &f["item"]).collect();
        assert_eq!(items[0], &json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Dose?"}]}));
        assert_eq!(items[1], &json!({"id": "f1", "type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"}));
        assert_eq!(items[2], &json!({"id": "o1", "type": "function_call_output", "call_id": "c1", "output": "{\"ok\":1}"}));
        assert_eq!(items[3], &json!({"id": "a1", "type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "5 mg."}]}));
        assert!(frames.iter().all(|f| f["event_id"].as_str().unwrap().starts_with(RESTORE_EVENT_PREFIX)));
        assert_eq!(restore.item_ids.len(), 4);
        assert_eq!(restore.session_event_id.as_deref(), Some("voxgate_restore_1"));
    }

    #[test]
    fn the_input_audio_rate_follows_the_configured_format() {
        let rate = |update: Value| {
            let mut session = EffectiveSession::default();
            merge_session_update(&mut session, json!({"type": "session.update", "session": update}).to_string().as_bytes(), |_| false);
            session.input_audio_bytes_per_ms([])
        };
        assert_eq!(EffectiveSession::default().input_audio_bytes_per_ms([]), 48, "PCM16 at 24 kHz by default");
        assert_eq!(rate(json!({"instructions": "x"})), 48);
        assert_eq!(rate(json!({"audio": {"input": {"format": {"type": "audio/pcmu"}}}})), 8);
        assert_eq!(rate(json!({"audio": {"input": {"format": {"type": "audio/pcma"}}}})), 8);
        assert_eq!(rate(json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000}}}})), 48);
        assert_eq!(rate(json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})), 32);
        assert_eq!(rate(json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": u64::MAX}}}})), 48);
        assert_eq!(rate(json!({"input_audio_format": "g711_ulaw"})), 8);
        assert_eq!(rate(json!({"input_audio_format": "pcm16"})), 48);
    }

    /// The server merges nested objects: an update of the output voice keeps the formats and the
    /// push-to-talk set before. A null clears, arrays replace whole, and an object whose `type`
    /// changes (another variant: server VAD to semantic VAD) replaces the old one.
    #[test]
    fn nested_objects_merge_as_the_server_merges_them() {
        let mut session = EffectiveSession::default();
        let update = |session: &mut EffectiveSession, value: Value| {
            merge_session_update(session, json!({"type": "session.update", "session": value}).to_string().as_bytes(), |n| n == "server");
        };
        update(&mut session, json!({"audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "server_vad", "silence_duration_ms": 500}, "noise_reduction": {"type": "near_field"}},
            "output": {"format": {"type": "audio/pcmu"}}}, "tools": [{"name": "a"}, {"name": "b"}]}));
        update(&mut session, json!({"audio": {"input": {"turn_detection": null, "noise_reduction": {"type": "far_field"}}}}));
        update(&mut session, json!({"audio": {"output": {"voice": "marin"}}, "tools": [{"name": "c"}, {"name": "server"}]}));
        assert_eq!(
            Value::Object(session.parsed()),
            json!({"audio": {"input": {"format": {"type": "audio/pcmu"}, "turn_detection": null, "noise_reduction": {"type": "far_field"}},
                "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"}}, "tools": [{"name": "c"}]})
        );
        update(&mut session, json!({"audio": {"input": {"turn_detection": {"type": "server_vad", "silence_duration_ms": 500}}}}));
        update(&mut session, json!({"audio": {"input": {"turn_detection": {"type": "semantic_vad", "eagerness": "low"}, "format": {"type": "audio/pcm", "rate": 24000}}}}));
        update(&mut session, json!({"audio": {"input": {"turn_detection": {"silence_duration_ms": 300}}}}));
        let merged = Value::Object(session.parsed());
        assert_eq!(merged["audio"]["input"]["turn_detection"], json!({"type": "semantic_vad", "eagerness": "low", "silence_duration_ms": 300}));
        assert_eq!(merged["audio"]["input"]["format"], json!({"type": "audio/pcm", "rate": 24000}));
    }

    #[test]
    fn beta_assistant_text_and_a_missing_type_for_ga() {
        let log = log_of(&[item(json!({"id": "a1", "type": "message", "role": "assistant", "content": [{"type": "text", "text": "Hi"}]}))]);
        let beta = parsed(&plan(&EffectiveSession::default(), &log, UpstreamProtocol::Beta, &[]));
        assert_eq!(beta.len(), 1, "no session.update without a configuration");
        assert_eq!(beta[0]["item"]["content"][0]["type"], "text");
        let mut session = EffectiveSession::default();
        merge_session_update(&mut session, br#"{"type":"session.update","session":{"voice":"marin"}}"#, |_| false);
        let ga = parsed(&plan(&session, &log, UpstreamProtocol::Ga, &[json!({"name": "server"})]));
        assert!(ga[0]["session"].get("tools").is_none(), "no tools are added to an update that set none");
        assert_eq!(ga[0]["session"]["type"], "realtime");
    }

    #[test]
    fn empty_messages_and_outputs_of_dropped_calls_are_skipped() {
        let log = log_of(&[
            item(json!({"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": null}]})),
            item(json!({"id": "o1", "type": "function_call_output", "call_id": "gone", "output": "{}"})),
        ]);
        let restore = plan(&EffectiveSession::default(), &log, UpstreamProtocol::Ga, &[]);
        assert!(restore.frames.is_empty());
        assert!(restore.item_ids.is_empty());
    }
}
