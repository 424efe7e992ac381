//! Frames from the client. Most are forwarded upstream as the same bytes; voxgate reads only
//! `session.update` and `response.create` (to keep the server tools, refuse hosted MCP tools and
//! server-call items), `conversation.item.create` (nobody but voxgate answers a
//! server call) and its own `voxgate.*` events; of the audio buffer's events it notes only the type
//! (push-to-talk audio not yet committed holds off a recycle, resume/). Bad frames get an `error`
//! event and the session goes on; frames past the per-session rate ceiling are dropped; text that
//! is not UTF-8 closes the socket with 1007.

use std::collections::HashSet;

use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use super::SessionOutcome;
use super::bridge::{Bridge, close_frame};
use super::pace::Pace;
use crate::protocol::client::{self, CallGuard, Refusal};
use crate::protocol::peek_client;
use crate::protocol::voxgate::{self as events, codes};

/// Distinct tool names the client's `response.create`s may add to the session's client tools,
/// beyond those of its `session.update` (see [`ClientTools`]).
pub(super) const MAX_RESPONSE_TOOL_NAMES: usize = 256;

/// The names of the client's own tools: a model call to one of them is the client's to answer.
/// Those the upstream's session holds (its last `session.created`/`session.updated` that lists
/// tools), those of the client's last `session.update` that set tools (its answer may not have
/// come yet), and those its `response.create`s brought for a single response. The last are kept
/// for the session (a call may come in any response after), so they are bounded: a client
/// inventing new names on every frame must not grow the session without end.
///
/// A forwarded update does not replace the names the session holds: the upstream may refuse it
/// (a voice change once the assistant has spoken), and a call to one of the client's tools still
/// in the session would then be taken for a call to an unknown server tool, hidden from the
/// client and answered `unknown_tool`.
#[derive(Debug, Default)]
pub(super) struct ClientTools {
    in_session: HashSet<String>,
    forwarded: HashSet<String>,
    per_response: HashSet<String>,
}

/// A `response.create` would take the per-response tool names past [`MAX_RESPONSE_TOOL_NAMES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("response.create declared more distinct client tool names than this server keeps for a session ({MAX_RESPONSE_TOOL_NAMES}); the event was dropped")]
pub(super) struct TooManyToolNames;

impl ClientTools {
    pub(super) fn contains(&self, name: &str) -> bool {
        self.in_session.contains(name) || self.forwarded.contains(name) || self.per_response.contains(name)
    }

    /// A `session.update` that sets the client's tools went upstream.
    pub(super) fn set_forwarded(&mut self, names: &[String]) {
        self.forwarded = names.iter().cloned().collect();
    }

    /// The upstream says its session holds these tools of the client's.
    pub(super) fn set_in_session<'a>(&mut self, names: impl Iterator<Item = &'a String>) {
        self.in_session = names.cloned().collect();
    }

    /// A `response.create` brought tools of its own; nothing is added when they would take the
    /// per-response names past the bound. Names already known cost nothing.
    pub(super) fn add_for_response(&mut self, names: &[String]) -> Result<(), TooManyToolNames> {
        let new: HashSet<&String> = names.iter().filter(|n| !self.contains(n)).collect();
        if self.per_response.len() + new.len() > MAX_RESPONSE_TOOL_NAMES {
            return Err(TooManyToolNames);
        }
        self.per_response.extend(new.into_iter().cloned());
        Ok(())
    }

    /// Names kept for the session in all.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.in_session.len() + self.forwarded.len() + self.per_response.len()
    }
}

impl Bridge {
    /// Handle one client frame; false when the client side has ended.
    pub(super) async fn handle_client_frame(&mut self, frame: Option<Result<Message, tungstenite::Error>>) -> bool {
        let message = match frame {
            None => return false,
            Some(Err(tungstenite::Error::Capacity(_))) => {
                // Past even the transport limit: the frame cannot be skipped, the socket is unusable.
                let close = close_frame(CloseCode::Size, "frame too large");
                self.begin_close_with(SessionOutcome::ClientError, Some(close.clone()), Some(close)).await;
                return false;
            }
            Some(Err(tungstenite::Error::Utf8(_))) => {
                // RFC 6455 §8.1: text that is not UTF-8 fails the connection with 1007.
                let close = close_frame(CloseCode::Invalid, "text frames must be UTF-8");
                self.begin_close_with(SessionOutcome::ClientError, Some(close), None).await;
                return false;
            }
            Some(Err(err)) => {
                tracing::debug!(parent: &self.span, error = %err, "client socket ended");
                return false;
            }
            Some(Ok(message)) => message,
        };
        self.frames.client_to_upstream();
        if matches!(message, Message::Text(_) | Message::Binary(_)) {
            // `last_activity` is this frame's arrival: the loop set it just before (text and
            // binary frames are activity), so the clock is not read again per frame.
            let arrived = self.last_activity;
            match self.pace.as_mut().map_or(Pace::Accept, |p| p.check(arrived)) {
                Pace::Accept => {}
                Pace::DropAndTell => {
                    let message = "Too many frames per second; frames over the limit were dropped.";
                    self.client_error(codes::TOO_MANY_FRAMES, message, None).await;
                    return true;
                }
                Pace::Drop => return true,
            }
        }
        match message {
            Message::Text(text) => self.handle_client_text(text).await,
            Message::Binary(_) => {
                self.client_error(codes::BINARY_FRAME, "Expected a text WebSocket message; binary frames are not supported.", None)
                    .await;
            }
            Message::Close(frame) => {
                // Pass the client's own close code and reason on to the upstream.
                let upstream_close = frame.map(|f| close_frame(sendable(f.code), &f.reason));
                self.begin_close_with(SessionOutcome::ClientClosed, None, upstream_close).await;
                return false;
            }
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
        true
    }

    async fn handle_client_text(&mut self, text: tungstenite::Utf8Bytes) {
        let max = self.deps.settings.max_frame_bytes;
        if text.len() > max {
            let message = format!("The frame is larger than this server accepts ({max} bytes).");
            self.client_error(codes::FRAME_TOO_LARGE, &message, None).await;
            return;
        }
        // Only the kind is kept past this point (and an event id for the few events voxgate
        // answers), so an audio append is forwarded without a single allocation.
        let (event, event_id) = match peek_client(text.as_str()) {
            Ok((kind, event_id)) => {
                let event = ClientEvent::of(&kind);
                (event, if event.forwarded_as_is() { None } else { event_id.map(|e| e.into_owned()) })
            }
            Err(err) => {
                self.client_error(err.code(), &err.to_string(), None).await;
                return;
            }
        };
        let event_id = event_id.as_deref();
        match event {
            ClientEvent::SessionUpdate => self.handle_session_update(text, event_id).await,
            ClientEvent::ResponseCreate => self.handle_response_create(text, event_id).await,
            ClientEvent::ItemCreate => self.handle_item_create(text, event_id).await,
            ClientEvent::Confirm => self.handle_confirm(text.as_bytes(), event_id).await,
            ClientEvent::UnknownVoxgate => {
                // The type is not echoed: an error never repeats what the client sent.
                let message = "Unknown voxgate event type; the only one a client sends is voxgate.tool_call.confirm.";
                self.client_error(codes::UNKNOWN_EVENT, message, event_id).await;
            }
            ClientEvent::AudioAppend | ClientEvent::AudioClear => {
                // Push-to-talk audio not yet committed holds off a recycle (resume/).
                self.resume.note_client_audio(event == ClientEvent::AudioAppend);
                self.send_upstream(Message::Text(text)).await;
            }
            ClientEvent::AudioCommit => {
                // So does a push-to-talk commit, until the response it asks for starts (resume/).
                self.resume.note_client_commit(event_id);
                // The user spoke (push-to-talk: no speech events from the server's VAD).
                self.gate.on_user_input(tokio::time::Instant::now());
                self.send_upstream(Message::Text(text)).await;
            }
            ClientEvent::Other => {
                self.send_upstream(Message::Text(text)).await;
            }
        }
    }

    async fn handle_session_update(&mut self, text: tungstenite::Utf8Bytes, event_id: Option<&str>) {
        let server_tools: Vec<serde_json::Value> = self.allowed_tool_definitions();
        // Forwarded under a stand-in of voxgate's, whatever id it had: an upstream `error`
        // refusing it then names this update alone (see `update_ids`).
        let stand_in = events::stand_in_event_id();
        let merged = client::read_session_update(text.as_bytes(), &server_tools, &self.call_guard(), Some(&stand_in));
        let merged = match merged {
            Ok(merged) => merged,
            Err(refusal) => {
                self.refuse(refusal, "session.update", event_id).await;
                return;
            }
        };
        match merged {
            None => {
                // Read as an object above; the stand-in is its id.
                let Some((named, client_id)) = client::with_event_id(text.as_bytes(), &stand_in) else { return };
                self.update_ids.forwarded(stand_in, client_id);
                let text = tungstenite::Utf8Bytes::from(named);
                let registry = &self.deps.registry;
                self.resume.note_session_update(text.as_bytes(), |name| registry.is_server_tool_name(name));
                self.send_upstream(Message::Text(text)).await;
            }
            Some(mut merged) => {
                self.client_tools.set_forwarded(&merged.client_tools);
                // Not injected until the upstream accepts it: it may reject the whole update
                // (upstream_frames.rs). Tools already in the session stay if it does.
                if !self.injected {
                    self.merged_update = Some(stand_in.clone());
                }
                self.update_ids.forwarded(stand_in, std::mem::take(&mut merged.replaced_event_id));
                let registry = &self.deps.registry;
                self.resume.note_session_update(merged.frame.as_bytes(), |name| registry.is_server_tool_name(name));
                self.forward_merged(merged, event_id).await;
            }
        }
    }

    /// `response.create` is guarded like `session.update` and `conversation.item.create`: its
    /// `input` may not answer or fake a server call, and its own `tools` cannot remove ours.
    async fn handle_response_create(&mut self, text: tungstenite::Utf8Bytes, event_id: Option<&str>) {
        let server_tools: Vec<serde_json::Value> = self.allowed_tool_definitions();
        // Until it is answered, voxgate asks for no response of its own (turns.rs). One without an
        // `event_id` gets a stand-in, as every `session.update` does: an upstream `error`
        // refusing it (other than for an active response) would name nothing the gate can match,
        // and a tool output's answer would wait out the gate's fallback.
        let stand_in = event_id.is_none().then(events::stand_in_event_id);
        let guarded = client::guard_response_create(text.as_bytes(), &server_tools, &self.call_guard(), stand_in.as_deref());
        let merged = match guarded {
            Ok(merged) => merged,
            Err(refusal) => return self.refuse(refusal, "response.create", event_id).await,
        };
        // Calls to this response's own client tools are the client's to answer.
        if let Some(merged) = &merged
            && let Err(err) = self.client_tools.add_for_response(&merged.client_tools)
        {
            self.client_error(codes::INVALID_EVENT, &err.to_string(), event_id).await;
            return;
        }
        let request_id = event_id.or(stand_in.as_deref());
        self.resume.note_client_request(merged.as_ref().map_or(text.as_str(), |m| m.frame.as_str()), request_id);
        self.gate.on_client_request(request_id, tokio::time::Instant::now());
        match merged {
            Some(merged) => self.forward_merged(merged, event_id).await,
            None => {
                self.send_upstream(Message::Text(text)).await;
            }
        }
    }

    async fn forward_merged(&mut self, merged: client::MergedUpdate, event_id: Option<&str>) {
        for name in &merged.dropped {
            let message = format!("The tool `{}` is provided by the server; the client's definition was dropped.", truncate(name, 64));
            self.client_error(codes::SERVER_TOOL_NAME, &message, event_id).await;
        }
        self.send_upstream(Message::text(merged.frame)).await;
    }

    async fn refuse(&mut self, refusal: Refusal, what: &str, event_id: Option<&str>) {
        match refusal {
            Refusal::Malformed => self.client_error(codes::INVALID_EVENT, &format!("{what} could not be read"), event_id).await,
            Refusal::RepeatedKey => {
                self.client_error(codes::INVALID_EVENT, &format!("{what} has a key written twice in one object"), event_id).await
            }
            Refusal::HostedMcp => {
                let message = "Hosted MCP tools are not allowed on this server; the event was dropped.";
                self.client_error(codes::HOSTED_MCP_REFUSED, message, event_id).await;
            }
            Refusal::ServerCall => self.refuse_server_call(event_id).await,
        }
    }

    async fn refuse_server_call(&mut self, event_id: Option<&str>) {
        let message = "This call belongs to a server tool; only voxgate can answer it.";
        self.client_error(codes::SERVER_CALL, message, event_id).await;
    }

    /// What the protocol guards need to know about this session's server calls.
    fn call_guard(&self) -> CallGuard<impl Fn(&str) -> bool + '_, impl Fn(&str) -> bool + '_> {
        CallGuard {
            is_server_tool: |n: &str| self.deps.registry.is_server_tool_name(n),
            owns_call: |c: &str| self.owned_calls.contains_key(c) || self.calls.owns(c),
            allow_hosted_mcp: self.deps.settings.allow_hosted_mcp,
        }
    }

    async fn handle_item_create(&mut self, text: tungstenite::Utf8Bytes, event_id: Option<&str>) {
        let (forged, typed) = match client::parse_item_create(text.as_bytes()) {
            Ok(create) => create.item.map_or((false, false), |item| {
                let forged = self.call_guard().is_server_call_item(item.kind.as_deref(), item.call_id.as_deref(), item.name.as_deref());
                (forged, item.kind.as_deref() == Some("message") && item.role.as_ref().and_then(serde_json::Value::as_str) == Some("user"))
            }),
            Err(err) => {
                self.client_error(err.code(), &err.to_string(), event_id).await;
                return;
            }
        };
        if forged {
            self.refuse_server_call(event_id).await;
            return;
        }
        if typed {
            // The user typed a message: a turn of theirs (see `turns::MAX_ERROR_ROUNDS`).
            self.gate.on_user_input(tokio::time::Instant::now());
        }
        self.send_upstream(Message::Text(text)).await;
    }

    async fn handle_confirm(&mut self, bytes: &[u8], event_id: Option<&str>) {
        if !self.info.wants_events {
            self.client_error(codes::EVENTS_NOT_ENABLED, "This session did not ask for voxgate events.", event_id).await;
            return;
        }
        let confirm = match client::parse_confirm(bytes) {
            Ok(confirm) => confirm,
            Err(_) => {
                let message = "voxgate.tool_call.confirm needs a string `call_id` and a boolean `approved`.";
                self.client_error(codes::INVALID_EVENT, message, event_id).await;
                return;
            }
        };
        match self.calls.on_confirm(&confirm.call_id, confirm.approved) {
            Ok(actions) => {
                // The user decided: a decline that goes back to the model is worth a response
                // however many error rounds came before (see `turns::MAX_ERROR_ROUNDS`).
                self.gate.on_user_turn();
                self.perform(actions).await;
            }
            Err(err) => self.client_error(codes::NOT_AWAITING_CONFIRMATION, &err.to_string(), event_id).await,
        }
    }

    /// Definitions of the server tools this user may call, for `session.tools`.
    pub(super) fn allowed_tool_definitions(&self) -> Vec<serde_json::Value> {
        self.deps.registry.allowed_for(&self.info.principal).map(|t| t.definition().clone()).collect()
    }
}

/// The client events voxgate acts on; everything else is forwarded as it came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientEvent {
    SessionUpdate,
    ResponseCreate,
    ItemCreate,
    Confirm,
    /// A `voxgate.*` type a client may not send.
    UnknownVoxgate,
    /// `input_audio_buffer.append`.
    AudioAppend,
    /// `input_audio_buffer.commit`.
    AudioCommit,
    /// `input_audio_buffer.clear`.
    AudioClear,
    Other,
}

impl ClientEvent {
    fn of(kind: &str) -> Self {
        match kind {
            "session.update" => Self::SessionUpdate,
            "response.create" => Self::ResponseCreate,
            "conversation.item.create" => Self::ItemCreate,
            "voxgate.tool_call.confirm" => Self::Confirm,
            "input_audio_buffer.append" => Self::AudioAppend,
            "input_audio_buffer.commit" => Self::AudioCommit,
            "input_audio_buffer.clear" => Self::AudioClear,
            other if other.starts_with("voxgate.") => Self::UnknownVoxgate,
            _ => Self::Other,
        }
    }

    /// Forwarded as it came, with no answer of voxgate's (which would need its `event_id`). A
    /// commit is too, but the resume follows it until an upstream `error` may name it.
    fn forwarded_as_is(self) -> bool {
        matches!(self, Self::AudioAppend | Self::AudioClear | Self::Other)
    }
}

/// Close codes a peer may not send on the wire are replaced by 1000.
pub(super) fn sendable(code: CloseCode) -> CloseCode {
    match u16::from(code) {
        1005 | 1006 | 1015 => CloseCode::Normal,
        _ => code,
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_thousand_response_creates_with_new_tool_names_keep_the_names_bounded() {
        let mut tools = ClientTools::default();
        tools.set_forwarded(&["get_weather".to_string()]);
        let mut refused = 0;
        for i in 0..10_000 {
            if tools.add_for_response(&[format!("tool_{i}"), "get_weather".to_string()]).is_err() {
                refused += 1;
            }
        }
        assert_eq!(tools.len(), 1 + MAX_RESPONSE_TOOL_NAMES);
        assert_eq!(refused, 10_000 - MAX_RESPONSE_TOOL_NAMES);
        // Known names still pass, and a new session.update replaces only the session's own.
        assert!(tools.add_for_response(&["tool_0".to_string(), "get_weather".to_string()]).is_ok());
        tools.set_forwarded(&["other".to_string()]);
        assert!(tools.contains("other") && tools.contains("tool_1") && !tools.contains("get_weather"));
        // What the upstream's session holds stays until the upstream says otherwise.
        tools.set_in_session(["kept".to_string()].iter());
        tools.set_forwarded(&["refused".to_string()]);
        assert!(tools.contains("kept") && tools.contains("refused"));
        tools.set_in_session(std::iter::empty());
        assert!(!tools.contains("kept"));
    }
}
