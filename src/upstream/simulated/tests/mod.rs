//! The simulated model driven through [`connect`] as a client, with real WebSocket frames: the
//! protocol here, tool calls in [`tools`].

mod tools;

use std::collections::HashSet;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::audio::{decode_base64, rms};
use super::{SimulatedOptions, connect};

const WAIT: Duration = Duration::from_secs(10);

pub(super) struct Client {
    pub(super) ws: WebSocketStream<DuplexStream>,
    seen_ids: HashSet<String>,
}

impl Client {
    pub(super) async fn start(pacing: Duration) -> Self {
        Self::start_with(SimulatedOptions { model: "gpt-realtime".into(), pacing: Some(pacing), max_frame_bytes: None }).await
    }

    pub(super) async fn start_with(options: SimulatedOptions) -> Self {
        let ws = connect(options).await.expect("connected");
        Self { ws, seen_ids: HashSet::new() }
    }

    /// A session with `session.created` read and `tools` declared.
    pub(super) async fn with_tools(tools: Value) -> Self {
        let mut client = Self::start(Duration::from_millis(1)).await;
        assert_eq!(client.next().await["type"], "session.created");
        client.send(json!({"type": "session.update", "session": {"type": "realtime", "tools": tools}})).await;
        assert_eq!(client.next().await["type"], "session.updated");
        client
    }

    pub(super) async fn send(&mut self, event: Value) {
        self.ws.send(Message::text(event.to_string())).await.expect("sent");
    }

    /// The next server event; checks that every `event_id` is fresh.
    pub(super) async fn next(&mut self) -> Value {
        loop {
            let frame =
                tokio::time::timeout(WAIT, self.ws.next()).await.expect("in time").expect("open").expect("frame");
            if let Message::Text(text) = frame {
                let event: Value = serde_json::from_str(text.as_str()).expect("json");
                let id = event["event_id"].as_str().expect("event_id").to_string();
                assert!(id.starts_with("event_"), "{event}");
                assert!(self.seen_ids.insert(id), "event_id reused: {event}");
                return event;
            }
        }
    }

    /// Events up to and including the first of type `kind`.
    pub(super) async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut events = Vec::new();
        loop {
            let event = self.next().await;
            let done = event["type"] == kind;
            events.push(event);
            if done {
                return events;
            }
        }
    }

    pub(super) async fn say(&mut self, text: &str) {
        let item = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]});
        self.send(json!({"type": "conversation.item.create", "item": item})).await;
        assert_eq!(self.next().await["type"], "conversation.item.added");
        assert_eq!(self.next().await["type"], "conversation.item.done");
    }

    /// `response.create` and every event through `rate_limits.updated`.
    pub(super) async fn respond(&mut self) -> Vec<Value> {
        self.send(json!({"type": "response.create"})).await;
        let events = self.until("response.done").await;
        assert_eq!(self.next().await["type"], "rate_limits.updated");
        events
    }
}

pub(super) fn types(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["type"].as_str()).collect()
}

pub(super) fn joined(events: &[Value], kind: &str) -> String {
    events.iter().filter(|e| e["type"] == kind).filter_map(|e| e["delta"].as_str()).collect()
}

#[tokio::test]
async fn session_created_on_connect() {
    let mut client = Client::start(Duration::from_millis(1)).await;
    let created = client.next().await;
    assert_eq!(created["type"], "session.created");
    let session = &created["session"];
    assert!(session["id"].as_str().is_some_and(|id| id.starts_with("sess_")), "{session}");
    assert_eq!(session["model"], "gpt-realtime");
    assert_eq!(session["type"], "realtime");
    assert_eq!(session["object"], "realtime.session");
    assert_eq!(session["output_modalities"], json!(["audio"]));
    assert_eq!(session["audio"]["input"]["format"], json!({"type": "audio/pcm", "rate": 24000}));
    assert_eq!(session["audio"]["output"]["format"], json!({"type": "audio/pcm", "rate": 24000}));
    assert_eq!(session["tools"], json!([]));
}

#[tokio::test]
async fn session_update_answers_with_the_full_session() {
    let mut client = Client::start(Duration::from_millis(1)).await;
    let created = client.next().await;
    let tools = json!([{"type": "function", "name": "search_pubmed", "parameters": tools::pubmed_schema()}]);
    client.send(json!({"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief.", "tools": tools}})).await;
    let updated = client.next().await;
    assert_eq!(updated["type"], "session.updated");
    assert_eq!(updated["session"]["tools"], tools);
    assert_eq!(updated["session"]["instructions"], "Be brief.");
    assert_eq!(updated["session"]["id"], created["session"]["id"]);
    assert_eq!(updated["session"]["audio"], created["session"]["audio"]);
}

#[tokio::test]
async fn typed_text_gets_a_spoken_answer_in_order() {
    let mut client = Client::with_tools(json!([])).await;
    client.say("Hello, can you hear me?").await;
    let events = client.respond().await;
    let kinds = types(&events);
    let head = &kinds[..4];
    assert_eq!(
        head,
        ["response.created", "response.output_item.added", "conversation.item.added", "response.content_part.added"]
    );
    let tail = &kinds[kinds.len() - 6..];
    assert_eq!(
        tail,
        [
            "response.output_audio.done",
            "response.output_audio_transcript.done",
            "response.content_part.done",
            "conversation.item.done",
            "response.output_item.done",
            "response.done",
        ]
    );
    let middle = &kinds[4..kinds.len() - 6];
    assert!(
        middle.iter().all(|k| *k == "response.output_audio.delta" || *k == "response.output_audio_transcript.delta")
    );
    assert!(
        middle.iter().filter(|k| **k == "response.output_audio_transcript.delta").count() >= 3,
        "several transcript deltas"
    );

    let transcript = joined(&events, "response.output_audio_transcript.delta");
    assert_eq!(transcript, "This is voxgate's simulated model. You said: Hello, can you hear me?");
    let done_transcript = events.iter().find(|e| e["type"] == "response.output_audio_transcript.done").expect("done");
    assert_eq!(done_transcript["transcript"], transcript.as_str());

    let mut pcm = Vec::new();
    for delta in events.iter().filter(|e| e["type"] == "response.output_audio.delta") {
        let chunk = decode_base64(delta["delta"].as_str().expect("delta")).expect("base64");
        assert_eq!(chunk.len(), 2_400, "50 ms of PCM16 at 24 kHz");
        pcm.extend(chunk);
    }
    let seconds = pcm.len() as f64 / 48_000.0;
    assert!((1.0..=6.0).contains(&seconds), "about as long as the sentence: {seconds} s");
    assert!(rms(&pcm) > 500.0, "not silent: {}", rms(&pcm));

    let response = &events.last().expect("done")["response"];
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0], json!({"type": "output_audio", "transcript": transcript}));
    assert!(response["usage"]["output_token_details"]["audio_tokens"].as_u64().is_some_and(|n| n > 0));
    let added = events.iter().find(|e| e["type"] == "conversation.item.added").expect("added");
    assert!(added["previous_item_id"].as_str().is_some_and(|id| id.starts_with("item_")), "{added}");
}

#[tokio::test]
async fn text_modality_streams_output_text() {
    let mut client = Client::with_tools(json!([])).await;
    client
        .send(json!({"type": "session.update", "session": {"type": "realtime", "output_modalities": ["text"]}}))
        .await;
    assert_eq!(client.next().await["type"], "session.updated");
    client.say("ping").await;
    let events = client.respond().await;
    assert!(!types(&events).iter().any(|k| k.contains("audio")), "{:?}", types(&events));
    assert_eq!(joined(&events, "response.output_text.delta"), "This is voxgate's simulated model. You said: ping");
}

#[tokio::test]
async fn a_second_response_create_while_active_is_an_error() {
    let mut client = Client::start(Duration::from_millis(20)).await;
    client.next().await;
    client.say("Tell me something long enough to still be talking").await;
    client.send(json!({"type": "response.create"})).await;
    let created = client.next().await;
    assert_eq!(created["type"], "response.created");
    client.send(json!({"type": "response.create", "event_id": "evt_2"})).await;
    let events = client.until("error").await;
    let error = events.last().expect("error");
    assert_eq!(error["error"]["type"], "invalid_request_error");
    assert_eq!(error["error"]["code"], "conversation_already_has_active_response");
    assert_eq!(error["error"]["param"], Value::Null);
    assert_eq!(error["error"]["event_id"], "evt_2");
    let message = error["error"]["message"].as_str().expect("message");
    assert!(message.contains(created["response"]["id"].as_str().expect("id")), "{message}");
    let rest = client.until("response.done").await;
    assert_eq!(rest.last().expect("done")["response"]["status"], "completed");
    assert_eq!(rest.iter().filter(|e| e["type"] == "response.created").count(), 0, "no second response");
}

#[tokio::test]
async fn cancel_stops_the_response() {
    let mut client = Client::start(Duration::from_millis(20)).await;
    client.next().await;
    client.say("Please say something that takes a while to read out loud").await;
    client.send(json!({"type": "response.create"})).await;
    client.until("response.output_audio.delta").await;
    client.send(json!({"type": "response.cancel", "event_id": "c1"})).await;
    let events = client.until("response.done").await;
    let done = &events.last().expect("done")["response"];
    assert_eq!(done["status"], "cancelled");
    assert_eq!(done["status_details"], json!({"type": "cancelled", "reason": "client_cancelled"}));
    assert_eq!(done["output"][0]["status"], "incomplete");
    assert_eq!(client.next().await["type"], "rate_limits.updated");
    client.send(json!({"type": "response.cancel", "event_id": "c2"})).await;
    let error = client.next().await;
    assert_eq!(error["error"]["code"], "response_cancel_not_active");
    assert_eq!(error["error"]["event_id"], "c2");
}

#[tokio::test]
async fn malformed_and_unknown_events_are_errors_and_the_session_continues() {
    let mut client = Client::with_tools(json!([])).await;
    client.ws.send(Message::text("{not json")).await.expect("sent");
    assert_eq!(client.next().await["error"]["code"], "invalid_json");
    client.send(json!({"type": "transcription_session.update", "event_id": "bad_1"})).await;
    let error = client.next().await;
    assert_eq!(error["error"]["code"], "invalid_value");
    assert_eq!(error["error"]["param"], "type");
    assert_eq!(error["error"]["event_id"], "bad_1");
    client.send(json!({"event_id": "bad_2"})).await;
    assert_eq!(client.next().await["error"]["code"], "missing_required_parameter");
    client.ws.send(Message::binary(vec![1u8, 2, 3])).await.expect("sent");
    assert_eq!(client.next().await["error"]["code"], "invalid_event");
    client.send(json!({"type": "input_audio_buffer.commit"})).await;
    assert_eq!(client.next().await["error"]["code"], "input_audio_buffer_commit_empty");
    client.say("still here?").await;
    let events = client.respond().await;
    assert_eq!(events.last().expect("done")["response"]["status"], "completed");
}

#[tokio::test]
async fn committed_audio_becomes_a_user_item_and_an_honest_answer() {
    let mut client = Client::with_tools(json!([])).await;
    let off = json!({"type": "realtime", "audio": {"input": {"turn_detection": null}}});
    client.send(json!({"type": "session.update", "session": off})).await;
    client.next().await;
    let silence = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![0u8; 48 * 300]);
    client.send(json!({"type": "input_audio_buffer.append", "audio": silence})).await;
    client.send(json!({"type": "input_audio_buffer.commit"})).await;
    let committed = client.next().await;
    assert_eq!(committed["type"], "input_audio_buffer.committed");
    let added = client.next().await;
    assert_eq!(added["item"]["content"][0], json!({"type": "input_audio", "transcript": null}));
    assert_eq!(added["item"]["id"], committed["item_id"]);
    client.next().await;
    let events = client.respond().await;
    assert!(joined(&events, "response.output_audio_transcript.delta").contains("cannot understand speech"));
    client.send(json!({"type": "input_audio_buffer.clear"})).await;
    assert_eq!(client.next().await["type"], "input_audio_buffer.cleared");
}

/// A client may send frames up to `server.max_frame_bytes` (up to 256 MiB): the simulated model
/// reads what the upstream settings allow (64 MiB by default), not tungstenite's 16 MiB.
#[tokio::test]
async fn an_append_larger_than_sixteen_mib_is_read() {
    let options = SimulatedOptions {
        model: "gpt-realtime".into(),
        pacing: Some(Duration::from_millis(1)),
        max_frame_bytes: Some(64 * 1024 * 1024),
    };
    let mut client = Client::start_with(options).await;
    assert_eq!(client.next().await["type"], "session.created");
    let off = json!({"type": "realtime", "audio": {"input": {"turn_detection": null}}});
    client.send(json!({"type": "session.update", "session": off})).await;
    client.next().await;
    let audio = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, vec![0u8; 15 * 1024 * 1024]);
    assert!(audio.len() > 16 * 1024 * 1024);
    client.send(json!({"type": "input_audio_buffer.append", "audio": audio})).await;
    client.send(json!({"type": "input_audio_buffer.commit"})).await;
    assert_eq!(client.next().await["type"], "input_audio_buffer.committed");
}

#[tokio::test]
async fn voice_activity_commits_and_barge_in_cancels() {
    let mut client = Client::start(Duration::from_millis(20)).await;
    client.next().await;
    let tone: Vec<u8> = (0..10).flat_map(|i| super::audio::tone_chunk_pcm(i, 10)).collect();
    let encode = |bytes: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    client.send(json!({"type": "input_audio_buffer.append", "audio": encode(&tone)})).await;
    assert_eq!(client.next().await["type"], "input_audio_buffer.speech_started");
    client.send(json!({"type": "input_audio_buffer.append", "audio": encode(&vec![0u8; 48 * 600])})).await;
    let events = client.until("response.created").await;
    assert_eq!(
        types(&events),
        [
            "input_audio_buffer.speech_stopped",
            "input_audio_buffer.committed",
            "conversation.item.added",
            "conversation.item.done",
            "response.created"
        ]
    );
    client.until("response.output_audio.delta").await;
    client.send(json!({"type": "input_audio_buffer.append", "audio": encode(&tone)})).await;
    let events = client.until("response.done").await;
    assert!(types(&events).contains(&"input_audio_buffer.speech_started"));
    let done = &events.last().expect("done")["response"];
    assert_eq!(done["status_details"], json!({"type": "cancelled", "reason": "turn_detected"}));
}

#[tokio::test]
async fn the_model_task_ends_when_the_client_closes() {
    let mut client = Client::start(Duration::from_millis(1)).await;
    client.next().await;
    client.ws.close(None).await.expect("closed");
    let rest = tokio::time::timeout(WAIT, async { while let Some(Ok(_)) = client.ws.next().await {} }).await;
    assert!(rest.is_ok(), "the server side closed too");
}

/// A truncate is checked against the audio streamed (whole 50 ms chunks), not the transcript's
/// length: a barge-in in the last chunk of an answer is valid.
#[tokio::test]
async fn truncate_near_the_end_is_measured_against_the_audio_sent() {
    let mut client = Client::start(Duration::from_millis(1)).await;
    client.next().await;
    // 47 characters spoken: 3 290 ms of transcript, sent as 66 chunks (3 300 ms).
    client.say("hi").await;
    let events = client.respond().await;
    let chunks = events.iter().filter(|e| e["type"] == "response.output_audio.delta").count() as u64;
    let sent_ms = chunks * 50;
    let transcript = joined(&events, "response.output_audio_transcript.delta");
    let transcript_ms = u64::from(super::audio::speech_duration_ms(&transcript));
    assert!(transcript_ms < sent_ms, "{transcript_ms} {sent_ms}");
    let done = events.iter().find(|e| e["type"] == "response.output_item.done").expect("item");
    let item_id = done["item"]["id"].clone();
    let truncate = |audio_end_ms: u64| {
        json!({"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": audio_end_ms})
    };
    client.send(truncate(sent_ms - 5)).await;
    let truncated = client.next().await;
    assert_eq!(truncated["type"], "conversation.item.truncated", "{truncated}");
    assert_eq!(truncated["audio_end_ms"], sent_ms - 5);
    // Past the audio sent is still refused.
    client.send(truncate(sent_ms + 50)).await;
    assert_eq!(client.next().await["error"]["code"], "invalid_value");
}
