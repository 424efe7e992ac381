//! One response of the simulated model as a step-by-step event generator, in the GA order
//! (PROTOCOL-NOTES §4): `response.created`, then per output item `output_item.added` →
//! (`content_part.added` → transcript/audio or text deltas → `.done`s) or (arguments deltas →
//! `function_call_arguments.done`) → `output_item.done`, and finally `response.done` and
//! `rate_limits.updated`. The session task paces the steps; [`ResponseRun::cancel`] closes whatever
//! is open the way the service does on `response.cancel` or barge-in. No I/O and no clock here.
//!
//! `conversation.item.added`/`.done` events come out with `previous_item_id: null`: the session,
//! which owns the conversation, fills it in as it records the item.

use serde_json::{Value, json};

use super::audio::{CHUNK_MS, chunk_count, speech_duration_ms, tone_chunk_base64};
use super::events::{UsageCounts, new_id, pcm_format, rate_limits, server_event, usage};

/// How a response speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Modality {
    /// Audio plus its transcript (`output_modalities: ["audio"]`, the default).
    Audio,
    /// Text only (`output_modalities: ["text"]`).
    Text,
}

impl Modality {
    fn name(self) -> &'static str {
        match self {
            Modality::Audio => "audio",
            Modality::Text => "text",
        }
    }
}

/// One planned output item.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// An assistant message with this text.
    Speech(String),
    /// A function call with its arguments as JSON text.
    Call { name: String, call_id: String, arguments: String },
}

/// What a response is configured with (from the session and `response.create`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub modality: Modality,
    pub voice: Value,
    /// `conv_…`, or `None` for an out-of-band response (`conversation: "none"`).
    pub conversation_id: Option<String>,
    pub metadata: Value,
    /// Input size, for `usage`.
    pub input_text_chars: usize,
    pub input_audio_ms: u64,
}

/// What one step produced.
#[derive(Debug)]
pub struct Step {
    pub events: Vec<Value>,
    /// The step streamed content: wait the pacing interval before the next one.
    pub paced: bool,
    /// `response.done` was among the events: the response is over.
    pub finished: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Open,
    Part,
    Stream(usize),
    Close,
    Over,
}

/// A response in progress.
#[derive(Debug)]
pub struct ResponseRun {
    id: String,
    settings: Settings,
    outputs: Vec<Output>,
    index: usize,
    stage: Stage,
    item_id: String,
    /// The current output's deltas (text pieces, or argument pieces), in order.
    pieces: Vec<String>,
    finished: Vec<Value>,
    counts: UsageCounts,
}

impl ResponseRun {
    pub fn new(outputs: Vec<Output>, settings: Settings) -> Self {
        let counts = UsageCounts {
            input_text_chars: settings.input_text_chars,
            input_audio_ms: settings.input_audio_ms,
            ..UsageCounts::default()
        };
        Self {
            id: new_id("resp"),
            settings,
            outputs,
            index: 0,
            stage: Stage::Open,
            item_id: String::new(),
            pieces: Vec::new(),
            finished: Vec::new(),
            counts,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// The `response.created` event (status `in_progress`, no output yet).
    pub fn created_event(&self) -> Value {
        server_event("response.created", json!({ "response": self.object("in_progress", Value::Null, Value::Null) }))
    }

    /// The next batch of events.
    pub fn step(&mut self) -> Step {
        let Some(output) = self.outputs.get(self.index).cloned() else {
            return self.done("completed", Value::Null);
        };
        let mut events = Vec::new();
        let mut paced = false;
        self.stage = match (self.stage, &output) {
            (Stage::Open, _) => {
                self.item_id = new_id("item");
                self.pieces = pieces(&output, self.settings.modality);
                let item = self.item(&output, "in_progress");
                events.push(self.item_event("response.output_item.added", item.clone()));
                self.push_conversation(&mut events, "conversation.item.added", item);
                match output {
                    Output::Speech(_) => Stage::Part,
                    Output::Call { .. } => Stage::Stream(0),
                }
            }
            (Stage::Part, _) => {
                events.push(self.part_event("response.content_part.added", ""));
                Stage::Stream(0)
            }
            (Stage::Stream(k), Output::Speech(_)) => {
                paced = true;
                self.stream_speech(k, &mut events);
                if k + 1 < self.pieces.len() { Stage::Stream(k + 1) } else { Stage::Close }
            }
            (Stage::Stream(k), Output::Call { call_id, .. }) => {
                paced = true;
                let delta = self.pieces.get(k).cloned().unwrap_or_default();
                events.push(self.base_event(
                    "response.function_call_arguments.delta",
                    json!({ "call_id": call_id, "delta": delta }),
                ));
                if k + 1 < self.pieces.len() { Stage::Stream(k + 1) } else { Stage::Close }
            }
            (Stage::Close, _) => {
                self.close_item(&output, self.pieces.len(), "completed", &mut events);
                self.index += 1;
                Stage::Open
            }
            (Stage::Over, _) => Stage::Over,
        };
        Step { events, paced, finished: false }
    }

    /// Stop now: close the open item as `incomplete` (a call still gets its
    /// `function_call_arguments.done` with the arguments streamed so far) and finish with
    /// `response.done` status `cancelled` (`reason`: `client_cancelled` or `turn_detected`).
    pub fn cancel(&mut self, reason: &str) -> Vec<Value> {
        let mut events = Vec::new();
        if let Some(output) = self.outputs.get(self.index).cloned() {
            match self.stage {
                Stage::Part | Stage::Stream(_) => {
                    let streamed = match self.stage {
                        Stage::Stream(k) => k,
                        _ => 0,
                    };
                    self.close_item(&output, streamed, "incomplete", &mut events);
                }
                Stage::Close => self.close_item(&output, self.pieces.len(), "completed", &mut events),
                Stage::Open | Stage::Over => {}
            }
        }
        let details = json!({ "type": "cancelled", "reason": reason });
        events.extend(self.done("cancelled", details).events);
        events
    }

    fn done(&mut self, status: &str, details: Value) -> Step {
        self.stage = Stage::Over;
        let usage = usage(self.counts);
        let tokens = usage["total_tokens"].as_u64().unwrap_or(0);
        let response = self.object(status, details, usage);
        Step {
            events: vec![server_event("response.done", json!({ "response": response })), rate_limits(tokens)],
            paced: false,
            finished: true,
        }
    }

    fn stream_speech(&mut self, k: usize, events: &mut Vec<Value>) {
        let piece = self.pieces.get(k).cloned().unwrap_or_default();
        let (text_delta, audio_delta) = match self.settings.modality {
            Modality::Audio => ("response.output_audio_transcript.delta", Some("response.output_audio.delta")),
            Modality::Text => ("response.output_text.delta", None),
        };
        if !piece.is_empty() {
            events.push(self.part_delta(text_delta, json!(piece)));
        }
        if let Some(kind) = audio_delta {
            events.push(self.part_delta(kind, json!(tone_chunk_base64(k, self.pieces.len()))));
            self.counts.output_audio_ms += u64::from(CHUNK_MS);
        }
        self.counts.output_text_chars += piece.len();
    }

    /// The closing events of the current item, with the first `streamed` pieces as its content.
    fn close_item(&mut self, output: &Output, streamed: usize, status: &str, events: &mut Vec<Value>) {
        let text: String = self.pieces.iter().take(streamed).map(String::as_str).collect();
        match output {
            Output::Speech(_) => {
                if self.stage != Stage::Part {
                    match self.settings.modality {
                        Modality::Audio => {
                            events.push(self.part_delta_done("response.output_audio.done", None));
                            events.push(
                                self.part_delta_done(
                                    "response.output_audio_transcript.done",
                                    Some(("transcript", &text)),
                                ),
                            );
                        }
                        Modality::Text => {
                            events.push(self.part_delta_done("response.output_text.done", Some(("text", &text))));
                        }
                    }
                    events.push(self.part_event("response.content_part.done", &text));
                }
            }
            // The service sends `.done` for a call cut off with its response too (PROTOCOL-NOTES
            // §3.4), with the arguments so far: clients must wait for the item's status, and in
            // simulated mode they get to show that they do.
            Output::Call { name, call_id, .. } => {
                events.push(self.base_event(
                    "response.function_call_arguments.done",
                    json!({ "call_id": call_id, "name": name, "arguments": text }),
                ));
            }
        }
        let with_content = if self.stage == Stage::Part { usize::MAX } else { streamed };
        let item = self.item_with(output, status, &text, with_content);
        self.push_conversation(events, "conversation.item.done", item.clone());
        events.push(self.item_event("response.output_item.done", item.clone()));
        self.finished.push(item);
    }

    fn push_conversation(&self, events: &mut Vec<Value>, kind: &str, item: Value) {
        if self.settings.conversation_id.is_some() {
            events.push(server_event(kind, json!({ "previous_item_id": null, "item": item })));
        }
    }

    /// An item as first announced: no content, no arguments yet.
    fn item(&self, output: &Output, status: &str) -> Value {
        self.item_with(output, status, "", usize::MAX)
    }

    /// An output item. `streamed == usize::MAX` marks a message whose content part never opened.
    fn item_with(&self, output: &Output, status: &str, text: &str, streamed: usize) -> Value {
        match output {
            Output::Speech(_) => {
                let content = match (streamed, self.settings.modality) {
                    (usize::MAX, _) => json!([]),
                    (_, Modality::Audio) => json!([{ "type": "output_audio", "transcript": text }]),
                    (_, Modality::Text) => json!([{ "type": "output_text", "text": text }]),
                };
                json!({ "id": self.item_id, "type": "message", "status": status, "role": "assistant", "content": content })
            }
            Output::Call { name, call_id, .. } => json!({
                "id": self.item_id, "type": "function_call", "status": status,
                "name": name, "call_id": call_id, "arguments": text,
            }),
        }
    }

    fn object(&self, status: &str, details: Value, usage: Value) -> Value {
        json!({
            "object": "realtime.response",
            "id": self.id,
            "status": status,
            "status_details": details,
            "output": if status == "in_progress" { json!([]) } else { json!(self.finished) },
            "conversation_id": self.settings.conversation_id,
            "output_modalities": [self.settings.modality.name()],
            "max_output_tokens": "inf",
            "audio": { "output": { "format": pcm_format(), "voice": self.settings.voice } },
            "usage": usage,
            "metadata": self.settings.metadata,
        })
    }

    fn item_event(&self, kind: &str, item: Value) -> Value {
        server_event(kind, json!({ "response_id": self.id, "output_index": self.index, "item": item }))
    }

    fn base_event(&self, kind: &str, mut fields: Value) -> Value {
        if let Some(map) = fields.as_object_mut() {
            map.insert("response_id".into(), json!(self.id));
            map.insert("item_id".into(), json!(self.item_id));
            map.insert("output_index".into(), json!(self.index));
        }
        server_event(kind, fields)
    }

    fn part_event(&self, kind: &str, text: &str) -> Value {
        let part = match self.settings.modality {
            Modality::Audio => json!({ "type": "audio", "transcript": text }),
            Modality::Text => json!({ "type": "text", "text": text }),
        };
        self.base_event(kind, json!({ "content_index": 0, "part": part }))
    }

    fn part_delta(&self, kind: &str, delta: Value) -> Value {
        self.base_event(kind, json!({ "content_index": 0, "delta": delta }))
    }

    fn part_delta_done(&self, kind: &str, field: Option<(&str, &str)>) -> Value {
        let mut fields = json!({ "content_index": 0 });
        if let (Some((name, text)), Some(map)) = (field, fields.as_object_mut()) {
            map.insert(name.into(), json!(text));
        }
        self.base_event(kind, fields)
    }
}

/// The deltas of an output. Speech in audio: one piece per 50 ms audio chunk, words spread evenly
/// (many pieces are empty: the transcript runs ahead in bursts, like the service's). Speech in text:
/// three words per delta. Arguments: three pieces. Concatenated, the pieces are the whole text.
fn pieces(output: &Output, modality: Modality) -> Vec<String> {
    match output {
        Output::Speech(text) => {
            let words: Vec<&str> = text.split_inclusive(' ').collect();
            let chunks = match modality {
                Modality::Audio => chunk_count(speech_duration_ms(text)),
                Modality::Text => words.len().div_ceil(3).max(1),
            };
            let mut pieces = vec![String::new(); chunks];
            for (i, word) in words.iter().enumerate() {
                let slot = (i * chunks / words.len().max(1)).min(chunks - 1);
                pieces[slot].push_str(word);
            }
            pieces
        }
        Output::Call { arguments, .. } => {
            let chars: Vec<char> = arguments.chars().collect();
            let third = chars.len().div_ceil(3).max(1);
            chars.chunks(third).map(|chunk| chunk.iter().collect()).collect::<Vec<String>>()
        }
    }
}

#[cfg(test)]
#[path = "response_tests.rs"]
mod tests;
