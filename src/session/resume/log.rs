//! The conversation log: what a new upstream session needs to continue the conversation, kept
//! in the session task and nowhere else.
//!
//! It is built only from what the upstream itself reports, so it holds exactly what the model
//! had in context: items from `conversation.item.created/added/done` and
//! `response.output_item.done`, the `output` of `response.done`, user transcripts from
//! `conversation.item.input_audio_transcription.completed`, and a call's whole arguments from
//! `response.function_call_arguments.done` (a call still streaming them is kept, marked
//! incomplete, and not restored). Each item is kept once, under its
//! item id, in the order it first appeared; a later event about the same item fills it in (an
//! audio turn's transcript arrives after the item, an assistant message's text with its `.done`);
//! `conversation.item.deleted` removes it. (A truncated assistant item keeps its whole transcript:
//! the text of what the model meant to say is the better context.) An item deleted or dropped
//! stays gone: a transcript or `.done` that comes for it later is not logged again (the last
//! [`GONE_KEPT`] such ids are remembered), or a resume would give the new upstream an item the
//! old one no longer had, out of its order.
//!
//! Audio is carried as text: a user's audio turn as its input transcript, an assistant's audio
//! as its output transcript. The model's own voice of past turns cannot be carried. A user's
//! audio item comes with `transcript: null`, and its transcript (when input transcription is on)
//! in `…transcription.completed`, which may come after the response to it: [`Transcript`] tells
//! the caller which items still owe one, so that a recycle can wait for it.
//!
//! Bounded by items and by bytes (`upstream.resume_max_items`, `.resume_max_bytes`): the oldest
//! items are dropped first, and counted; one item larger than the whole byte bound is dropped
//! alone. The log holds PHI, so it has no `Debug` that shows
//! content, and nothing in it is ever logged or traced.

use std::collections::VecDeque;

use serde_json::Value;

/// One item of the conversation, as text. (`Debug` only in tests: the content is PHI.)
#[derive(Clone, PartialEq, Eq)]
#[cfg_attr(test, derive(Debug))]
pub(crate) enum Entry {
    User(String),
    Assistant(String),
    /// `complete`: its arguments are whole (a call still streaming them is not restored).
    Call { call_id: String, name: String, arguments: String, complete: bool },
    Output { call_id: String, output: String },
}

impl Entry {
    fn bytes(&self) -> usize {
        match self {
            Entry::User(text) | Entry::Assistant(text) => text.len(),
            Entry::Call { call_id, name, arguments, .. } => call_id.len() + name.len() + arguments.len(),
            Entry::Output { call_id, output } => call_id.len() + output.len(),
        }
    }

    /// Does `self` say more than `other` about the same item? (A later event may carry less: an
    /// audio item's `.done` without the transcript that already arrived.)
    fn improves_on(&self, other: &Entry) -> bool {
        match (self, other) {
            (Entry::User(new), Entry::User(_)) | (Entry::Assistant(new), Entry::Assistant(_)) => !new.is_empty(),
            // A finished call is never taken back to one still streaming its arguments.
            (Entry::Call { arguments, complete, .. }, Entry::Call { complete: was, .. }) => (*complete || !*was) && (!arguments.is_empty() || *complete && !*was),
            _ => true,
        }
    }
}

/// What an event says of a user audio item's transcript (by item id).
#[cfg_attr(test, derive(Debug, PartialEq, Eq))]
pub(crate) enum Transcript {
    /// A user audio item, new to the log, came without its transcript.
    Owed(String),
    /// Its transcript came, its transcription failed, or the item was deleted: none is owed now.
    Settled(String),
}

/// A logged item: the upstream's item id and what it said.
pub(crate) struct Logged {
    pub id: String,
    pub entry: Entry,
}

/// Ids of items deleted or dropped that are remembered, at most: a late event about one comes
/// within a turn or two, not after dozens of items.
const GONE_KEPT: usize = 64;

pub(crate) struct ConversationLog {
    items: VecDeque<Logged>,
    /// Items deleted or dropped, newest last: not logged again.
    gone: VecDeque<String>,
    bytes: usize,
    dropped: usize,
    max_items: usize,
    max_bytes: usize,
}

impl std::fmt::Debug for ConversationLog {
    // Counts only: the content is PHI.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConversationLog")
            .field("items", &self.items.len())
            .field("bytes", &self.bytes)
            .field("dropped", &self.dropped)
            .finish()
    }
}

/// Upstream event types the log reads.
pub(crate) fn records(kind: &str) -> bool {
    matches!(
        kind,
        "conversation.item.created"
            | "conversation.item.added"
            | "conversation.item.done"
            | "response.output_item.done"
            | "response.done"
            | "response.function_call_arguments.done"
            | "conversation.item.input_audio_transcription.completed"
            | "conversation.item.input_audio_transcription.failed"
            | "conversation.item.deleted"
    )
}

impl ConversationLog {
    pub(crate) fn new(max_items: usize, max_bytes: usize) -> Self {
        Self { items: VecDeque::new(), gone: VecDeque::new(), bytes: 0, dropped: 0, max_items, max_bytes }
    }

    /// Read one upstream event of a type [`records`] accepts (others are ignored), and say what
    /// it tells of a user audio item's transcript, if anything.
    pub(crate) fn observe(&mut self, kind: &str, bytes: &[u8]) -> Option<Transcript> {
        let event = serde_json::from_slice::<Value>(bytes).ok()?;
        match kind {
            "conversation.item.input_audio_transcription.completed" => {
                let item_id = event["item_id"].as_str()?;
                // Only an item still waiting for it: a client may have deleted the audio item and
                // created a text one under its id before this transcript came.
                let waiting = self.items.iter().find(|l| l.id == item_id).is_none_or(|l| matches!(&l.entry, Entry::User(text) if text.is_empty()));
                if let Some(transcript) = event["transcript"].as_str().filter(|_| waiting) {
                    self.upsert(item_id, Entry::User(transcript.trim().to_string()));
                }
                Some(Transcript::Settled(item_id.to_string()))
            }
            "conversation.item.input_audio_transcription.failed" => Some(Transcript::Settled(event["item_id"].as_str()?.to_string())),
            "conversation.item.deleted" => {
                let item_id = event["item_id"].as_str()?;
                self.remove(item_id);
                Some(Transcript::Settled(item_id.to_string()))
            }
            "response.function_call_arguments.done" => {
                self.complete_call(&event);
                None
            }
            "response.done" => {
                for item in event["response"]["output"].as_array().into_iter().flatten() {
                    self.observe_item(item);
                }
                None
            }
            "conversation.item.created" | "conversation.item.added" => {
                // A new item under an id deleted before (a client may name its items): not a
                // late event about the old one.
                if let Some(id) = event["item"]["id"].as_str() {
                    self.gone.retain(|g| g != id);
                }
                self.observe_item(&event["item"])
            }
            _ => self.observe_item(&event["item"]),
        }
    }

    /// Log an item; `Owed` when it is a user audio item new to the log without its transcript (a
    /// later event about it, its `.done` with `transcript: null` again, owes nothing new).
    fn observe_item(&mut self, item: &Value) -> Option<Transcript> {
        let id = item["id"].as_str()?;
        if item["type"] == "function_call" && crate::protocol::server::cut_off(item["status"].as_str()) {
            // A call cut off with its response is not run and gets no output (calls/settle.rs):
            // restored, it would be a call the new upstream's model waits on forever.
            self.remove(id);
            return None;
        }
        let entry = entry_of(item)?;
        let owed = matches!(&entry, Entry::User(text) if text.is_empty()) && awaits_transcript(item);
        (self.upsert(id, entry) && owed).then(|| Transcript::Owed(id.to_string()))
    }

    /// A call's arguments are whole (`response.function_call_arguments.done`), whether or not its
    /// item's `.done` follows (a call is accepted without it after `calls::settle::SETTLE_WAIT`):
    /// the call logged under its item id (or, failing that, its call id) is complete. A call not
    /// logged is not added: its item, had it come, would have been.
    fn complete_call(&mut self, event: &Value) {
        let (Some(call_id), Some(arguments)) = (event["call_id"].as_str(), event["arguments"].as_str()) else { return };
        let item_id = event["item_id"].as_str();
        let by_item = self.items.iter().find(|l| Some(l.id.as_str()) == item_id && matches!(l.entry, Entry::Call { .. }));
        let found = by_item.or_else(|| self.items.iter().find(|l| matches!(&l.entry, Entry::Call { call_id: c, .. } if c == call_id)));
        let Some(Logged { id, entry: Entry::Call { name, .. } }) = found else { return };
        let (id, entry) = (id.clone(), Entry::Call { call_id: call_id.to_string(), name: name.clone(), arguments: arguments.to_string(), complete: true });
        self.upsert(&id, entry);
    }

    /// True when the item is new to the log. An item deleted or dropped before is not logged again.
    fn upsert(&mut self, id: &str, entry: Entry) -> bool {
        if self.gone.iter().any(|g| g == id) {
            return false;
        }
        // An item larger than the whole log is dropped alone (counted), not by emptying the log
        // of everything older first and then dropping it anyway.
        if id.len() + entry.bytes() > self.max_bytes {
            self.remove(id);
            self.dropped += 1;
            return false;
        }
        let new = if let Some(logged) = self.items.iter_mut().find(|l| l.id == id) {
            if entry.improves_on(&logged.entry) {
                self.bytes = self.bytes - logged.entry.bytes() + entry.bytes();
                logged.entry = entry;
            }
            false
        } else {
            self.bytes += id.len() + entry.bytes();
            self.items.push_back(Logged { id: id.to_string(), entry });
            true
        };
        self.enforce_bounds();
        new
    }

    fn remove(&mut self, id: &str) {
        if let Some(index) = self.items.iter().position(|l| l.id == id)
            && let Some(gone) = self.items.remove(index)
        {
            self.bytes -= gone.id.len() + gone.entry.bytes();
        }
        self.forget(id.to_string());
    }

    fn forget(&mut self, id: String) {
        // Several events may report one item gone: it is held once.
        if self.gone.contains(&id) {
            return;
        }
        if self.gone.len() == GONE_KEPT {
            self.gone.pop_front();
        }
        self.gone.push_back(id);
    }

    fn enforce_bounds(&mut self) {
        while self.items.len() > self.max_items || (self.bytes > self.max_bytes && !self.items.is_empty()) {
            if let Some(oldest) = self.items.pop_front() {
                self.bytes -= oldest.id.len() + oldest.entry.bytes();
                self.dropped += 1;
                self.forget(oldest.id);
            }
        }
    }

    pub(crate) fn items(&self) -> impl Iterator<Item = &Logged> {
        self.items.iter()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// Items dropped to stay within the bounds, over the session's life.
    pub(crate) fn dropped(&self) -> usize {
        self.dropped
    }
}

/// The text of a message item: its parts' `text` or `transcript`, joined.
fn message_text(item: &Value) -> String {
    let parts = item["content"].as_array().into_iter().flatten();
    let texts: Vec<&str> = parts.filter_map(|p| p["text"].as_str().or_else(|| p["transcript"].as_str())).collect();
    texts.join(" ").trim().to_string()
}

/// Has the item an `input_audio` part whose transcript has not come (`null`, as the upstream
/// sends it until `…transcription.completed`)?
fn awaits_transcript(item: &Value) -> bool {
    item["content"].as_array().into_iter().flatten().any(|p| p["type"] == "input_audio" && p["transcript"].is_null())
}

fn entry_of(item: &Value) -> Option<Entry> {
    let text = |key: &str| item[key].as_str().map(str::to_string);
    match item["type"].as_str()? {
        "message" => match item["role"].as_str()? {
            "user" => Some(Entry::User(message_text(item))),
            "assistant" => Some(Entry::Assistant(message_text(item))),
            // System messages come from the client's own `conversation.item.create`; the session
            // instructions are restored with the session configuration instead.
            _ => None,
        },
        "function_call" => Some(Entry::Call {
            call_id: text("call_id")?,
            name: text("name")?,
            arguments: text("arguments").unwrap_or_default(),
            complete: item["status"] != "in_progress",
        }),
        "function_call_output" => Some(Entry::Output { call_id: text("call_id")?, output: text("output").unwrap_or_default() }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn feed(log: &mut ConversationLog, event: Value) {
        let kind = event["type"].as_str().unwrap().to_string();
        assert!(records(&kind), "{kind}");
        log.observe(&kind, event.to_string().as_bytes());
    }

    #[test]
    fn a_user_audio_item_owes_its_transcript_until_it_comes_or_fails() {
        let mut log = ConversationLog::new(10, 10_000);
        let audio = |kind: &str, id: &str, transcript: Value| {
            json!({"type": kind, "item": {"id": id, "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": transcript}]}}).to_string()
        };
        let owed = |id: &str| Some(Transcript::Owed(id.into()));
        let settled = |id: &str| Some(Transcript::Settled(id.into()));
        assert_eq!(log.observe("conversation.item.added", audio("conversation.item.added", "u1", Value::Null).as_bytes()), owed("u1"));
        assert_eq!(log.observe("conversation.item.done", audio("conversation.item.done", "u1", Value::Null).as_bytes()), None, "owed once");
        let completed = json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1", "transcript": "Hi"});
        assert_eq!(log.observe("conversation.item.input_audio_transcription.completed", completed.to_string().as_bytes()), settled("u1"));
        let failed = json!({"type": "conversation.item.input_audio_transcription.failed", "item_id": "u2", "error": {}});
        assert!(records("conversation.item.input_audio_transcription.failed"));
        assert_eq!(log.observe("conversation.item.input_audio_transcription.failed", failed.to_string().as_bytes()), settled("u2"));
        // An item that carries its transcript owes none.
        assert_eq!(log.observe("conversation.item.created", audio("conversation.item.created", "u3", json!("Bed 12")).as_bytes()), None);
        assert_eq!(entries(&log), vec![("u1".into(), Entry::User("Hi".into())), ("u3".into(), Entry::User("Bed 12".into()))]);
    }

    fn entries(log: &ConversationLog) -> Vec<(String, Entry)> {
        log.items().map(|l| (l.id.clone(), l.entry.clone())).collect()
    }

    #[test]
    fn an_audio_turn_is_kept_as_its_transcript_in_first_seen_order() {
        let mut log = ConversationLog::new(10, 10_000);
        feed(&mut log, json!({"type": "conversation.item.added", "item": {"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": null}]}}));
        feed(&mut log, json!({"type": "conversation.item.added", "item": {"id": "a1", "type": "message", "role": "assistant", "content": []}}));
        feed(&mut log, json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1", "content_index": 0, "transcript": " Hello there "}));
        // The item's own `.done` without the transcript does not erase it.
        feed(&mut log, json!({"type": "conversation.item.done", "item": {"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": null}]}}));
        feed(&mut log, json!({"type": "response.done", "response": {"output": [{"id": "a1", "type": "message", "role": "assistant", "content": [{"type": "output_audio", "transcript": "Hi."}]}]}}));
        assert_eq!(entries(&log), vec![("u1".into(), Entry::User("Hello there".into())), ("a1".into(), Entry::Assistant("Hi.".into()))]);
    }

    #[test]
    fn calls_and_outputs_are_kept_and_filled_in_by_later_events() {
        let mut log = ConversationLog::new(10, 10_000);
        let call = |status: &str, args: &str| json!({"id": "fc1", "type": "function_call", "status": status, "name": "lookup", "call_id": "c1", "arguments": args});
        feed(&mut log, json!({"type": "conversation.item.added", "item": call("in_progress", "")}));
        feed(&mut log, json!({"type": "conversation.item.done", "item": call("completed", "{\"q\":1}")}));
        feed(&mut log, json!({"type": "conversation.item.added", "item": {"id": "fo1", "type": "function_call_output", "call_id": "c1", "output": "{\"ok\":true}"}}));
        feed(&mut log, json!({"type": "response.output_item.done", "item": {"id": "x", "type": "reasoning"}}));
        assert_eq!(
            entries(&log),
            vec![
                ("fc1".into(), Entry::Call { call_id: "c1".into(), name: "lookup".into(), arguments: "{\"q\":1}".into(), complete: true }),
                ("fo1".into(), Entry::Output { call_id: "c1".into(), output: "{\"ok\":true}".into() }),
            ]
        );
    }

    /// A call still streaming its arguments is logged incomplete (the restore leaves it out); its
    /// arguments' `.done` completes it, though its item's `.done` never comes.
    #[test]
    fn a_call_is_complete_once_its_arguments_are() {
        let mut log = ConversationLog::new(10, 10_000);
        let call = |status: &str, args: &str| json!({"id": "fc1", "type": "function_call", "status": status, "name": "lookup", "call_id": "c1", "arguments": args});
        feed(&mut log, json!({"type": "conversation.item.added", "item": call("in_progress", "")}));
        let complete = |log: &ConversationLog| log.items().map(|l| matches!(l.entry, Entry::Call { complete: true, .. })).collect::<Vec<_>>();
        assert_eq!(complete(&log), [false]);
        feed(&mut log, json!({"type": "response.function_call_arguments.done", "item_id": "fc1", "call_id": "c1", "name": "lookup", "arguments": "{\"q\":1}"}));
        assert_eq!(complete(&log), [true]);
        feed(&mut log, json!({"type": "conversation.item.added", "item": call("in_progress", "")}));
        assert_eq!(entries(&log)[0].1, Entry::Call { call_id: "c1".into(), name: "lookup".into(), arguments: "{\"q\":1}".into(), complete: true });
        // Unknown calls are not added.
        feed(&mut log, json!({"type": "response.function_call_arguments.done", "item_id": "x", "call_id": "c9", "name": "lookup", "arguments": "{}"}));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn the_oldest_items_are_dropped_and_counted_past_either_bound() {
        let mut log = ConversationLog::new(3, 10_000);
        for i in 0..5 {
            feed(&mut log, json!({"type": "conversation.item.created", "item": {"id": format!("m{i}"), "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}));
        }
        assert_eq!(log.len(), 3);
        assert_eq!(log.dropped(), 2);
        assert_eq!(log.items().next().unwrap().id, "m2");

        let mut log = ConversationLog::new(100, 40);
        for i in 0..3 {
            feed(&mut log, json!({"type": "conversation.item.created", "item": {"id": format!("m{i}"), "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x".repeat(15)}]}}));
        }
        assert_eq!(log.len(), 2, "17 bytes an item, 40 allowed");
        assert_eq!(log.dropped(), 1);
    }

    #[test]
    fn an_item_larger_than_the_whole_log_is_dropped_alone() {
        let mut log = ConversationLog::new(100, 40);
        let item = |id: &str, text: String| json!({"type": "conversation.item.created", "item": {"id": id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}});
        feed(&mut log, item("m0", "x".repeat(15)));
        feed(&mut log, item("huge", "x".repeat(100)));
        assert_eq!(log.items().map(|l| l.id.as_str()).collect::<Vec<_>>(), ["m0"], "the rest is kept");
        assert_eq!(log.dropped(), 1);
        feed(&mut log, item("m1", "x".repeat(15)));
        assert_eq!(log.items().map(|l| l.id.as_str()).collect::<Vec<_>>(), ["m0", "m1"]);
    }

    #[test]
    fn a_deleted_item_is_forgotten() {
        let mut log = ConversationLog::new(10, 10_000);
        for id in ["m1", "m2"] {
            feed(&mut log, json!({"type": "conversation.item.created", "item": {"id": id, "type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}}));
        }
        feed(&mut log, json!({"type": "conversation.item.deleted", "item_id": "m1"}));
        assert_eq!(entries(&log), vec![("m2".into(), Entry::User("hi".into()))]);
        assert_eq!(format!("{log:?}"), "ConversationLog { items: 1, bytes: 4, dropped: 0 }");
    }

    #[test]
    fn an_item_deleted_or_dropped_is_not_logged_again_by_a_late_event() {
        let mut log = ConversationLog::new(2, 10_000);
        let audio = |id: &str| json!({"type": "conversation.item.created", "item": {"id": id, "type": "message", "role": "user", "content": [{"type": "input_audio", "transcript": null}]}});
        let transcript = |id: &str| json!({"type": "conversation.item.input_audio_transcription.completed", "item_id": id, "transcript": "late"});
        feed(&mut log, audio("u1"));
        feed(&mut log, json!({"type": "conversation.item.deleted", "item_id": "u1"}));
        // Its transcript comes after the deletion: still settled (nothing is owed), not logged.
        assert_eq!(log.observe("conversation.item.input_audio_transcription.completed", transcript("u1").to_string().as_bytes()), Some(Transcript::Settled("u1".into())));
        feed(&mut log, json!({"type": "conversation.item.done", "item": {"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "again"}]}}));
        assert_eq!(log.len(), 0);
        // The oldest item dropped to stay within two items does not come back at the end either.
        for id in ["u2", "u3", "u4"] {
            feed(&mut log, audio(id));
        }
        feed(&mut log, transcript("u2"));
        assert_eq!(entries(&log), vec![("u3".into(), Entry::User(String::new())), ("u4".into(), Entry::User(String::new()))]);
        // A transcript for an item still logged fills it in.
        feed(&mut log, transcript("u4"));
        assert_eq!(entries(&log)[1], ("u4".into(), Entry::User("late".into())));
        // A client may create a new item under a deleted item's id: that one is logged, and the
        // old item's transcript, come late, does not overwrite it.
        feed(&mut log, json!({"type": "conversation.item.created", "item": {"id": "u1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "new"}]}}));
        assert_eq!(entries(&log)[1], ("u1".into(), Entry::User("new".into())));
        feed(&mut log, transcript("u1"));
        assert_eq!(entries(&log)[1], ("u1".into(), Entry::User("new".into())));
    }

    #[test]
    fn a_call_cut_off_with_its_response_is_not_kept() {
        let mut log = ConversationLog::new(10, 10_000);
        let call = |status: &str| json!({"id": "fc1", "type": "function_call", "status": status, "call_id": "c1", "name": "search_pubmed", "arguments": "{}"});
        feed(&mut log, json!({"type": "conversation.item.added", "item": call("in_progress")}));
        assert_eq!(log.len(), 1);
        feed(&mut log, json!({"type": "response.output_item.done", "item": call("incomplete")}));
        feed(&mut log, json!({"type": "response.done", "response": {"status": "cancelled", "output": [call("incomplete")]}}));
        assert_eq!(log.len(), 0);
        assert_eq!(log.gone.len(), 1, "held once, though reported gone twice");
        // A completed one is kept.
        let done = json!({"id": "fc2", "type": "function_call", "status": "completed", "call_id": "c2", "name": "search_pubmed", "arguments": "{}"});
        feed(&mut log, json!({"type": "response.output_item.done", "item": done}));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn unreadable_events_and_items_without_ids_change_nothing() {
        let mut log = ConversationLog::new(10, 10_000);
        log.observe("conversation.item.done", b"not json");
        feed(&mut log, json!({"type": "conversation.item.done", "item": {"type": "message", "role": "user", "content": []}}));
        feed(&mut log, json!({"type": "conversation.item.done", "item": {"id": "s", "type": "message", "role": "system", "content": []}}));
        assert_eq!(log.len(), 0);
        assert_eq!(format!("{log:?}"), "ConversationLog { items: 0, bytes: 0, dropped: 0 }");
    }
}
