//! The task behind one simulated socket: reads client events, keeps the session config, the
//! conversation and the input audio buffer, and paces the active response. One task owns all
//! state (no locks); its loop selects between the next client frame and the next response step,
//! so a `response.cancel` or a barge-in is seen between any two deltas. The task ends when the
//! client closes the socket or it breaks.
//!
//! Client events are handled here; their checks live in [`super::validate`].

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::DuplexStream;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::{self, Message};

use super::audio::{CHUNK_MS, decode_base64};
use super::conversation::{Conversation, PlaceError};
use super::events::{default_session, error_event, new_id, server_event};
use super::planner::{ToolOffer, plan};
use super::response::{Modality, ResponseRun, Settings};
use super::vad::{TurnDetection, Vad, VadEvent};
use super::validate::{self, Rejection};
use super::{DEFAULT_PACING, SimulatedOptions};

type Sent = Result<(), tungstenite::Error>;

/// Shortest buffer `input_audio_buffer.commit` accepts, as on the real service.
const MIN_COMMIT_MS: f64 = 100.0;

/// Client event types the GA service accepts (its own error text lists them).
const KNOWN_TYPES: [&str; 12] = [
    "session.update",
    "session.close",
    "input_audio_buffer.append",
    "input_audio_buffer.commit",
    "input_audio_buffer.clear",
    "conversation.item.create",
    "conversation.item.truncate",
    "conversation.item.delete",
    "conversation.item.retrieve",
    "response.create",
    "response.cancel",
    "output_audio_buffer.clear",
];

/// Everything one simulated session knows.
pub(super) struct Session {
    ws: WebSocketStream<DuplexStream>,
    /// The full session object, as `session.updated` reports it.
    config: Value,
    conversation: Conversation,
    /// Bytes appended since the last commit or clear (the audio itself is not kept).
    buffered_bytes: u64,
    /// Item id the detector gave the turn in progress, reused by its commit.
    turn_item_id: Option<String>,
    vad: Vad,
    /// Milliseconds of user audio committed so far, for `usage`.
    committed_audio_ms: u64,
    active: Option<ResponseRun>,
    next_step: Instant,
    pacing: Duration,
}

/// Serve the socket until the client goes away.
pub(super) async fn run(ws: WebSocketStream<DuplexStream>, options: SimulatedOptions) {
    let model = if options.model.is_empty() { "gpt-realtime".to_string() } else { options.model.clone() };
    let mut session = Session {
        ws,
        config: default_session(&new_id("sess"), &model),
        conversation: Conversation::default(),
        buffered_bytes: 0,
        turn_item_id: None,
        vad: Vad::default(),
        committed_audio_ms: 0,
        active: None,
        next_step: Instant::now(),
        pacing: options.pacing.unwrap_or(DEFAULT_PACING),
    };
    let created = server_event("session.created", json!({ "session": session.config }));
    if session.send(created).await.is_ok() {
        session.serve().await;
    }
    tracing::debug!("simulated session ended");
}

impl Session {
    async fn serve(&mut self) {
        loop {
            let stepping = self.active.is_some();
            let due = self.next_step;
            let outcome = tokio::select! {
                frame = self.ws.next() => match frame {
                    Some(Ok(Message::Text(text))) => self.handle_client_text(text.as_str()).await,
                    Some(Ok(Message::Binary(_))) => {
                        let message = "Expected a text WebSocket message; binary frames are not supported.";
                        self.send(error_event("invalid_event", message, None, None)).await
                    }
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                    Some(Ok(_)) => Ok(()),
                },
                () = tokio::time::sleep_until(due), if stepping => self.handle_step().await,
            };
            if outcome.is_err() {
                return;
            }
        }
    }

    async fn handle_step(&mut self) -> Sent {
        let Some(run) = self.active.as_mut() else { return Ok(()) };
        let step = run.step();
        if step.finished {
            self.active = None;
        }
        self.next_step = Instant::now() + if step.paced { self.pacing } else { Duration::ZERO };
        self.send_all(step.events).await
    }

    async fn handle_client_text(&mut self, text: &str) -> Sent {
        let event: Value = match serde_json::from_str(text) {
            Ok(event @ Value::Object(_)) => event,
            Ok(_) => {
                return self
                    .reject(Rejection::invalid("invalid_event", "The event must be a JSON object.", None), None)
                    .await;
            }
            Err(err) => {
                let message = format!(
                    "We could not parse the JSON body of your request (line {}, column {}).",
                    err.line(),
                    err.column()
                );
                return self.reject(Rejection::invalid("invalid_json", &message, None), None).await;
            }
        };
        let client_id = event["event_id"].as_str().map(str::to_string);
        let id = client_id.as_deref();
        let Some(kind) = event["type"].as_str() else {
            let rejection =
                Rejection::invalid("missing_required_parameter", "Missing required parameter: 'type'.", Some("type"));
            return self.reject(rejection, id).await;
        };
        if KNOWN_TYPES.contains(&kind) {
            tracing::debug!(event_type = kind, "simulated model received");
        }
        match kind {
            "session.update" => self.handle_session_update(&event, id).await,
            "session.close" => {
                self.ws.close(None).await?;
                Err(tungstenite::Error::ConnectionClosed)
            }
            "input_audio_buffer.append" => self.handle_append(&event, id).await,
            "input_audio_buffer.commit" => self.handle_commit(id).await,
            "input_audio_buffer.clear" => {
                self.buffered_bytes = 0;
                self.turn_item_id = None;
                self.vad.reset();
                self.send(server_event("input_audio_buffer.cleared", json!({}))).await
            }
            "conversation.item.create" => self.handle_item_create(&event, id).await,
            "conversation.item.retrieve" | "conversation.item.delete" | "conversation.item.truncate" => {
                self.handle_item_edit(kind, &event, id).await
            }
            "response.create" => self.handle_response_create(&event, id).await,
            "response.cancel" => self.handle_response_cancel(&event, id).await,
            "output_audio_buffer.clear" => {
                let message = "output_audio_buffer.clear is only supported for WebRTC and SIP connections.";
                self.reject(Rejection::invalid("invalid_value", message, Some("type")), id).await
            }
            _ => {
                let shown: String = kind.chars().take(60).collect();
                let message =
                    format!("Invalid value: '{shown}'. Supported values are: '{}'.", KNOWN_TYPES.join("', '"));
                self.reject(Rejection::invalid("invalid_value", &message, Some("type")), id).await
            }
        }
    }

    async fn handle_session_update(&mut self, event: &Value, id: Option<&str>) -> Sent {
        match validate::apply_update(&self.config, event.get("session")) {
            Ok(updated) => {
                self.config = updated;
                let event = server_event("session.updated", json!({ "session": self.config }));
                self.send(event).await
            }
            Err(rejection) => self.reject(rejection, id).await,
        }
    }

    async fn handle_append(&mut self, event: &Value, id: Option<&str>) -> Sent {
        let Some(pcm) = event["audio"].as_str().and_then(decode_base64) else {
            let rejection = Rejection::invalid(
                "invalid_value",
                "Invalid 'audio'. Expected base64-encoded audio bytes.",
                Some("audio"),
            );
            return self.reject(rejection, id).await;
        };
        self.buffered_bytes += pcm.len() as u64;
        let Some(detection) = TurnDetection::from_session(&self.config) else { return Ok(()) };
        for found in self.vad.feed(&pcm, &detection) {
            match found {
                VadEvent::Started { audio_start_ms } => {
                    let item_id = new_id("item");
                    self.turn_item_id = Some(item_id.clone());
                    let started = json!({ "audio_start_ms": audio_start_ms, "item_id": item_id });
                    self.send(server_event("input_audio_buffer.speech_started", started)).await?;
                    if detection.interrupt_response {
                        self.cancel_active("turn_detected").await?;
                    }
                }
                VadEvent::Stopped { audio_end_ms } => {
                    let item_id = self.turn_item_id.clone().unwrap_or_else(|| new_id("item"));
                    let stopped = json!({ "audio_end_ms": audio_end_ms, "item_id": item_id });
                    self.send(server_event("input_audio_buffer.speech_stopped", stopped)).await?;
                    self.commit(item_id).await?;
                    if detection.create_response && self.active.is_none() {
                        self.start_response(&Value::Null).await?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn handle_commit(&mut self, id: Option<&str>) -> Sent {
        let buffered_ms = self.buffered_ms();
        if buffered_ms < MIN_COMMIT_MS {
            let message = format!(
                "Error committing input audio buffer: buffer too small. Expected at least 100ms of audio, \
                 but buffer only has {buffered_ms:.2}ms of audio."
            );
            return self.reject(Rejection::invalid("input_audio_buffer_commit_empty", &message, None), id).await;
        }
        let item_id = self.turn_item_id.clone().unwrap_or_else(|| new_id("item"));
        self.vad.reset();
        self.commit(item_id).await
    }

    /// Turn the buffer into a user message: `committed`, the item, and (when the session asked for
    /// transcription) a transcription event that says plainly nothing was transcribed.
    async fn commit(&mut self, item_id: String) -> Sent {
        let seconds = self.buffered_ms() / 1000.0;
        self.committed_audio_ms += self.buffered_ms() as u64;
        self.buffered_bytes = 0;
        self.turn_item_id = None;
        let item = json!({
            "id": item_id, "type": "message", "status": "completed", "role": "user",
            "content": [{ "type": "input_audio", "transcript": null }],
        });
        let previous = self.conversation.place(None, item.clone()).ok().flatten();
        let committed = json!({ "previous_item_id": previous, "item_id": item_id });
        self.send(server_event("input_audio_buffer.committed", committed)).await?;
        let added = json!({ "previous_item_id": previous, "item": item });
        self.send(server_event("conversation.item.added", added.clone())).await?;
        self.send(server_event("conversation.item.done", added)).await?;
        if self.config["audio"]["input"]["transcription"].is_object() {
            let transcript = format!("(audio, {seconds:.1} s; the simulated model does not transcribe speech)");
            let completed = json!({
                "item_id": item_id, "content_index": 0, "transcript": transcript,
                "usage": { "type": "duration", "seconds": (seconds * 10.0).round() / 10.0 },
            });
            self.send(server_event("conversation.item.input_audio_transcription.completed", completed)).await?;
        }
        Ok(())
    }

    async fn handle_item_create(&mut self, event: &Value, id: Option<&str>) -> Sent {
        let item = match validate::check_item(event.get("item"), &self.conversation) {
            Ok(item) => item,
            Err(rejection) => return self.reject(rejection, id).await,
        };
        let previous = event["previous_item_id"].as_str();
        match self.conversation.place(previous, item.clone()) {
            Ok(before) => {
                let added = json!({ "previous_item_id": before, "item": item });
                self.send(server_event("conversation.item.added", added.clone())).await?;
                self.send(server_event("conversation.item.done", added)).await
            }
            Err(PlaceError::PreviousNotFound) => {
                let shown: String = previous.unwrap_or_default().chars().take(64).collect();
                let message = format!("Previous item with id '{shown}' not found.");
                self.reject(Rejection::invalid("invalid_value", &message, Some("previous_item_id")), id).await
            }
            Err(PlaceError::DuplicateId) => {
                let message = "An item with this id already exists in the conversation.";
                self.reject(Rejection::invalid("invalid_value", message, Some("item.id")), id).await
            }
        }
    }

    async fn handle_item_edit(&mut self, kind: &str, event: &Value, id: Option<&str>) -> Sent {
        let item_id = event["item_id"].as_str().unwrap_or_default().to_string();
        match validate::edit_item(kind, event, &item_id, &mut self.conversation) {
            Ok((reply, fields)) => self.send(server_event(reply, fields)).await,
            Err(rejection) => self.reject(rejection, id).await,
        }
    }

    async fn handle_response_create(&mut self, event: &Value, id: Option<&str>) -> Sent {
        if let Some(active) = &self.active {
            let message = format!(
                "Conversation already has an active response in progress: {}. Wait until the response is \
                 finished before creating a new one.",
                active.id()
            );
            let rejection = Rejection::invalid("conversation_already_has_active_response", &message, None);
            return self.reject(rejection, id).await;
        }
        let params = event.get("response").cloned().unwrap_or(Value::Null);
        if let Err(rejection) = validate::check_response_params(&params) {
            return self.reject(rejection, id).await;
        }
        self.start_response(&params).await
    }

    async fn start_response(&mut self, params: &Value) -> Sent {
        let session_tools = self.config["tools"].as_array().cloned().unwrap_or_default();
        let tools = params["tools"].as_array().cloned().unwrap_or(session_tools);
        let choice = params.get("tool_choice").unwrap_or(&self.config["tool_choice"]).clone();
        let today = chrono::Utc::now().date_naive();
        let outputs = plan(&self.conversation, &ToolOffer { tools: &tools, choice: &choice }, today);
        let modalities = params.get("output_modalities").unwrap_or(&self.config["output_modalities"]);
        let modality = if modalities == &json!(["text"]) { Modality::Text } else { Modality::Audio };
        let out_of_band = params["conversation"] == "none";
        let settings = Settings {
            modality,
            voice: params["audio"]["output"]["voice"]
                .as_str()
                .map_or_else(|| self.config["audio"]["output"]["voice"].clone(), |v| json!(v)),
            conversation_id: (!out_of_band).then(|| self.conversation.id.clone()),
            metadata: params.get("metadata").cloned().unwrap_or(Value::Null),
            input_text_chars: self.conversation.text_chars(),
            input_audio_ms: self.committed_audio_ms,
        };
        let run = ResponseRun::new(outputs, settings);
        let created = run.created_event();
        self.active = Some(run);
        self.next_step = Instant::now();
        self.send(created).await
    }

    async fn handle_response_cancel(&mut self, event: &Value, id: Option<&str>) -> Sent {
        let wanted = event["response_id"].as_str();
        let matches = self.active.as_ref().is_some_and(|run| wanted.is_none_or(|wanted| wanted == run.id()));
        if !matches {
            let rejection =
                Rejection::invalid("response_cancel_not_active", "Cancellation failed: no active response found", None);
            return self.reject(rejection, id).await;
        }
        self.cancel_active("client_cancelled").await
    }

    async fn cancel_active(&mut self, reason: &str) -> Sent {
        let Some(mut run) = self.active.take() else { return Ok(()) };
        let events = run.cancel(reason);
        self.send_all(events).await
    }

    fn buffered_ms(&self) -> f64 {
        let format = self.config["audio"]["input"]["format"]["type"].as_str().unwrap_or("audio/pcm");
        // audio/pcm is 24 kHz 16-bit (48 bytes per ms); G.711 is 8 kHz 8-bit (8 bytes per ms).
        let bytes_per_ms = if format == "audio/pcm" { 48.0 } else { 8.0 };
        self.buffered_bytes as f64 / bytes_per_ms
    }

    async fn reject(&mut self, rejection: Rejection, client_event_id: Option<&str>) -> Sent {
        let event = error_event(&rejection.code, &rejection.message, rejection.param.as_deref(), client_event_id);
        self.send(event).await
    }

    /// Send a response's events, recording its items (and the audio sent for them, which a truncate
    /// is measured against) in the conversation on the way (the run leaves `previous_item_id` for us
    /// to fill in).
    async fn send_all(&mut self, events: Vec<Value>) -> Sent {
        for mut event in events {
            let kind = event["type"].as_str().unwrap_or_default().to_string();
            let previous = match kind.as_str() {
                "conversation.item.added" => Some(self.conversation.place(None, event["item"].clone()).ok().flatten()),
                "conversation.item.done" => Some(self.conversation.finish(event["item"].clone())),
                "response.output_audio.delta" => {
                    let item_id = event["item_id"].as_str().unwrap_or_default();
                    self.conversation.add_audio(item_id, u64::from(CHUNK_MS));
                    None
                }
                _ => None,
            };
            if let Some(previous) = previous {
                event["previous_item_id"] = json!(previous);
            }
            self.send(event).await?;
        }
        Ok(())
    }

    async fn send(&mut self, event: Value) -> Sent {
        self.ws.send(Message::text(event.to_string())).await
    }
}
