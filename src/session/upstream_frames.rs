//! Frames from the upstream. Audio and every event voxgate has no business with go to the client as
//! the same bytes, classified by peeking at `type` only. voxgate reads the response lifecycle and
//! user speech (to sequence `response.create`), injects the server tools on `session.created` (or
//! once the upstream rejects the client update they were merged into instead), and takes every
//! server-owned function call out of the client's stream and into the call table.
//!
//! The upstream is not trusted with voxgate's own namespace: an event whose type starts with
//! `voxgate.` cannot come from a realtime server, only from one that forges voxgate's events (a
//! fake confirmation prompt, say), so it is dropped and counted, never shown to the client.

use serde_json::json;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, Message};

use super::SessionOutcome;
use super::bridge::{Bridge, close_frame};
use super::resume::{Reason, Seen};
use super::client_frames::sendable;
use crate::config::UpstreamProtocol;
use crate::protocol::server::{self as events_in, Item};
use crate::protocol::voxgate::{self as events, ToolSummary, codes};
use crate::protocol::peek_type;

/// The `error` code of an upstream session that reached the provider's cap.
const SESSION_EXPIRED: &str = "session_expired";

/// An upstream `error` with `error.event_id` set to `client_id`; `None` when it does not read as one.
fn with_client_event_id(error: &str, client_id: serde_json::Value) -> Option<String> {
    let mut event: serde_json::Value = serde_json::from_str(error).ok()?;
    *event.get_mut("error")?.get_mut("event_id")? = client_id;
    Some(event.to_string())
}

impl Bridge {
    /// Handle one upstream frame; false when the upstream side has ended.
    pub(super) async fn handle_upstream_frame(&mut self, frame: Option<Result<Message, tungstenite::Error>>) -> bool {
        let message = match frame {
            None => return false,
            Some(Err(err)) => {
                tracing::warn!(parent: &self.span, error = %err, "upstream socket failed");
                let close = close_frame(tungstenite::protocol::frame::coding::CloseCode::Error, "the realtime service connection failed");
                self.upstream_lost(Reason::UpstreamError, Some(close)).await;
                return false;
            }
            Some(Ok(message)) => message,
        };
        self.frames.upstream_to_client();
        match message {
            Message::Text(text) => {
                let inspect = match peek_type(text.as_str()) {
                    Ok(kind) if kind.starts_with(events::TYPE_PREFIX) => {
                        tracing::warn!(parent: &self.span, "dropped an upstream event with a voxgate.* type");
                        self.deps.metrics.upstream_forged_event();
                        return true;
                    }
                    Ok(kind) if self.resume.watches(&kind) => match self.resume.on_upstream_event(&kind, text.as_bytes()) {
                        Seen::Forward => events_in::needs_inspection(&kind).then(|| kind.into_owned()),
                        Seen::Swallow => return true,
                        Seen::RestoreRefused { configuration, code } => {
                            self.on_restore_refused(configuration, code.as_deref()).await;
                            return true;
                        }
                    },
                    Ok(kind) => events_in::needs_inspection(&kind).then(|| kind.into_owned()),
                    // Not JSON, no `type`, or two of them: no event of the API, and the client
                    // could read a different type than voxgate did (a forged voxgate.* one).
                    Err(_) => {
                        tracing::warn!(parent: &self.span, "dropped an upstream frame that is not one event with one type");
                        self.deps.metrics.upstream_forged_event();
                        return true;
                    }
                };
                match inspect {
                    None => self.send_client(Message::Text(text)).await,
                    Some(kind) => self.handle_upstream_event(&kind, text).await,
                }
            }
            // The Realtime API sends text only. A binary frame would reach the client unread — a
            // forged voxgate.* event, a server call's arguments — and clients that parse bytes as
            // JSON (Python's json.loads, Node's JSON.parse(data.toString())) would believe it.
            Message::Binary(_) => {
                tracing::warn!(parent: &self.span, "dropped a binary frame from the upstream");
                self.deps.metrics.upstream_forged_event();
            }
            Message::Close(frame) => {
                let resumable = frame.as_ref().is_none_or(|f| resumable_close(f.code));
                let client_close = frame.map(|f| close_frame(sendable(f.code), &f.reason));
                if resumable {
                    self.upstream_lost(Reason::UpstreamClosed, client_close).await;
                } else {
                    self.begin_close_with(SessionOutcome::UpstreamClosed, client_close, None).await;
                }
                return false;
            }
            Message::Pong(_) => self.upstream_ping_since = None,
            Message::Ping(_) | Message::Frame(_) => {}
        }
        true
    }

    async fn handle_upstream_event(&mut self, kind: &str, text: tungstenite::Utf8Bytes) {
        match kind {
            "session.created" => {
                self.note_session_state(kind, text.as_bytes());
                self.send_client(Message::Text(text)).await;
                self.inject_tools().await;
            }
            "session.updated" => {
                self.note_session_state(kind, text.as_bytes());
                self.send_client(Message::Text(text)).await;
            }
            "response.created" => {
                let created = events_in::parse_response_created(text.as_bytes());
                self.gate.on_response_created(created.id.as_deref(), created.out_of_band);
                self.send_client(Message::Text(text)).await;
            }
            "response.done" => self.handle_response_done(text).await,
            "input_audio_buffer.speech_started" => {
                self.gate.on_speech_started();
                self.send_client(Message::Text(text)).await;
            }
            "input_audio_buffer.speech_stopped" => {
                self.gate.on_speech_stopped(Instant::now());
                self.send_client(Message::Text(text)).await;
            }
            "error" => self.handle_upstream_error(text).await,
            "response.function_call_arguments.delta" | "response.function_call_arguments.done" => {
                self.handle_arguments(kind, text).await;
            }
            _ => self.handle_item_event(kind, text).await,
        }
    }

    /// Put the server tools this user may call into the upstream session, and tell the client.
    async fn inject_tools(&mut self) {
        let summaries: Vec<ToolSummary> = self
            .deps
            .registry
            .allowed_for(&self.info.principal)
            .map(|t| ToolSummary {
                name: t.name(),
                category: t.spec().category,
                requires_confirmation: t.policy.requires_confirmation,
            })
            .collect();
        // A client update they were merged into is still unanswered: injecting now would replace
        // its client tools. If the upstream rejects it, they are injected then.
        if !self.injected && self.merged_update.is_none() {
            self.send_tool_injection().await;
        }
        let ready = events::session_ready(&self.info.id, &summaries);
        self.send_client_event(ready).await;
    }

    /// What the upstream says its session is (`session.created`/`.updated`, rare): the
    /// `tool_choice` voxgate's own `response.create` must not inherit when it forces a tool (taken
    /// from here, not from the client's update, which the upstream may refuse), and whether the
    /// client's update the server tools were merged into was accepted: a `session.updated` that
    /// lists them. They were in no update before it (it is merged only while voxgate has not
    /// injected them), so one listing none answers an earlier update; any one of them is enough,
    /// as the allowed set may change meanwhile (an MCP server coming up).
    fn note_session_state(&mut self, kind: &str, frame: &[u8]) {
        let Some(state) = events_in::parse_session_state(frame) else { return };
        if let Some(choice) = state.tool_choice {
            self.tool_choice = choice;
        }
        // The client's tools the upstream's session holds: a client update it refused changed
        // nothing of them.
        let listed = state.tool_names.is_some();
        let tool_names = state.tool_names.unwrap_or_default();
        if listed {
            let registry = &self.deps.registry;
            self.client_tools.set_in_session(tool_names.iter().filter(|name| !registry.is_server_tool_name(name)));
        }
        if self.merged_update.is_none() || kind != "session.updated" {
            return;
        }
        let mut allowed = self.deps.registry.allowed_for(&self.info.principal).peekable();
        let accepted = allowed.peek().is_none() || allowed.any(|tool| tool_names.iter().any(|n| n == tool.name()));
        if accepted {
            self.merged_update = None;
            self.injected = true;
        }
    }

    /// voxgate's own `session.update` with the server tools this user may call.
    pub(super) async fn send_tool_injection(&mut self) {
        self.injected = true;
        self.merged_update = None;
        // Only the tools list: every other session setting stays the client's.
        let mut session = json!({ "tools": self.allowed_tool_definitions() });
        if self.deps.settings.protocol == UpstreamProtocol::Ga {
            session["type"] = json!("realtime");
        }
        let update = json!({"type": "session.update", "event_id": events::event_id(), "session": session}).to_string();
        let registry = &self.deps.registry;
        self.resume.note_session_update(update.as_bytes(), |name| registry.is_server_tool_name(name));
        self.send_upstream(Message::text(update)).await;
    }

    async fn handle_response_done(&mut self, text: tungstenite::Utf8Bytes) {
        let parsed = events_in::rewrite_response_done(text.as_bytes(), |call_id, name| {
            self.owned_calls.contains_key(call_id) || self.calls.owns(call_id) || self.is_owned_name(name)
        });
        let Ok(done) = parsed else {
            self.gate.on_response_done(None, false);
            self.drop_unreadable("response.done").await;
            return;
        };
        self.gate.on_response_done(done.id.as_deref(), done.failed);
        // Servers that announce calls only here (no argument events) are handled the same way.
        // A call's item decides, as in `handle_item_event`: one that completed before the response
        // was cut off is complete.
        let now = Instant::now();
        for call in &done.calls {
            let owned = self.owned_calls.contains_key(&call.call_id) || self.is_owned_name(&call.name);
            if owned && call.completed && !self.calls.owns(&call.call_id) {
                self.owned_calls.insert(call.call_id.clone(), call.name.clone());
                self.accept_call(&call.call_id.clone(), &call.name.clone(), &call.arguments.clone()).await;
            } else if !call.completed {
                let actions = self.calls.settle(&call.call_id, false, now);
                self.perform(actions).await;
            }
        }
        // Calls held at `.done` that it does not list end with the response.
        let actions = self.calls.settle_response(done.id.as_deref(), done.completed, now);
        self.perform(actions).await;
        match done.rewritten {
            Some(frame) => self.send_client(Message::text(frame)).await,
            None => self.send_client(Message::Text(text)).await,
        }
    }

    async fn handle_upstream_error(&mut self, text: tungstenite::Utf8Bytes) {
        let mut for_client = None;
        if let Ok(error) = events_in::parse_error(text.as_bytes()) {
            if self.resume.enabled() && error.error.code.as_deref() == Some(SESSION_EXPIRED) {
                // The provider's session cap: the conversation goes on in a new session.
                self.upstream_lost(Reason::UpstreamError, None).await;
                return;
            }
            self.gate.on_client_error(error.error.event_id.as_deref(), error.error.code.as_deref());
            let rejected_merge = self.merged_update.is_some() && self.merged_update.as_deref() == error.error.event_id.as_deref();
            if rejected_merge {
                // The whole update was rejected, server tools too: voxgate injects them itself.
                // The client still sees the error.
                tracing::debug!(parent: &self.span, "upstream refused the client update the server tools were merged into");
                self.send_tool_injection().await;
            }
            let stand_in = error.error.event_id.as_deref().filter(|id| id.starts_with(events::STAND_IN_PREFIX));
            if let Some(stand_in) = stand_in {
                // About a client frame voxgate forwarded under an id of its own (client_frames.rs):
                // the client's copy names the client's own id, a `session.update`'s as it was
                // sent, or none (a `response.create` gets a stand-in only when it had none).
                let client_id = self.update_ids.client_id(stand_in).unwrap_or_default();
                for_client = with_client_event_id(text.as_str(), client_id);
            }
            let ours = error.error.event_id.as_deref().is_some_and(events::is_own_event_id);
            if ours {
                let code = error.error.code.as_deref().unwrap_or_default();
                let event_id = error.error.event_id.as_deref().unwrap_or_default();
                tracing::warn!(parent: &self.span, code, "upstream refused an event voxgate sent");
                if self.on_output_refused(event_id) {
                    // An output, not a request: the gate's request state is not concerned.
                    self.send_client(Message::Text(text)).await;
                    return;
                }
                if code == "conversation_already_has_active_response" && self.gate.on_request_refused(event_id) {
                    // voxgate's own race with server VAD: retried after the active response.
                    return;
                }
                // Any other answer to voxgate's request ends it too, so the gate never waits on
                // a request the server has already refused. The client still sees the error.
                self.gate.on_request_failed(event_id);
            }
        }
        match for_client {
            Some(frame) => self.send_client(Message::text(frame)).await,
            None => self.send_client(Message::Text(text)).await,
        }
    }

    /// `response.function_call_arguments.delta/.done`: hidden when the call is server-owned; at the
    /// `.done` of an owned call it is held until its item ends (`calls::settle`): the API sends
    /// `.done` for a call cut off with its response too.
    async fn handle_arguments(&mut self, kind: &str, text: tungstenite::Utf8Bytes) {
        let Ok(event) = events_in::parse_arguments(text.as_bytes()) else {
            self.drop_unreadable(kind).await;
            return;
        };
        let call_id = event
            .call_id
            .as_deref()
            .map(str::to_string)
            .or_else(|| event.item_id.as_deref().and_then(|i| self.owned_items.get(i).cloned()));
        let known_name = call_id.as_deref().and_then(|c| self.owned_calls.get(c).cloned());
        let name = known_name.clone().or_else(|| event.name.as_deref().map(str::to_string));
        let owned = match (&known_name, &name) {
            (Some(_), _) => true,
            (None, Some(name)) => self.is_owned_name(name),
            // No name (a `.delta`, a beta `.done`) and no call voxgate knows: the client's only
            // if its item was seen as the client's. Else its item never read (dropped as
            // unreadable), and these may be a server call's arguments: hidden.
            (None, None) => {
                let seen = |id: Option<&str>| id.is_some_and(|id| self.client_calls.contains(id));
                !(seen(event.call_id.as_deref()) || seen(event.item_id.as_deref()))
            }
        };
        if !owned {
            self.send_client(Message::Text(text)).await;
            return;
        }
        if kind == "response.function_call_arguments.done"
            && let (Some(call_id), Some(name)) = (call_id, name)
        {
            let arguments = event.arguments.as_deref().unwrap_or("{}").to_string();
            self.owned_calls.insert(call_id.clone(), name.clone());
            let actions = self.calls.hold(&call_id, &name, &arguments, event.response_id.as_deref());
            self.perform(actions).await;
        }
    }

    /// Item-bearing events: hide those that carry a server-owned call or its output. The end of a
    /// server call's item settles the call held at its `.done`: accepted if it completed.
    async fn handle_item_event(&mut self, kind: &str, text: tungstenite::Utf8Bytes) {
        let (hide, ended) = match events_in::parse_item(text.as_bytes()) {
            Ok(Some(item)) => {
                let hide = self.track_item(kind, &item);
                (hide, if hide { self.ended_call(kind, &item) } else { None })
            }
            Ok(None) => (false, None),
            Err(_) => {
                self.drop_unreadable(kind).await;
                return;
            }
        };
        if !hide {
            self.send_client(Message::Text(text)).await;
        }
        if let Some((call_id, completed)) = ended {
            let actions = self.calls.settle(&call_id, completed, Instant::now());
            self.perform(actions).await;
        }
    }

    /// A function-call item that ended (`conversation.item.done`, `response.output_item.done`):
    /// its call id, and whether it `completed` (not `incomplete`: cut off with its response).
    fn ended_call(&self, kind: &str, item: &Item<'_>) -> Option<(String, bool)> {
        if !matches!(kind, "conversation.item.done" | "response.output_item.done") || !item.is_function_call() {
            return None;
        }
        let status = item.status.as_deref().filter(|s| *s != "in_progress")?;
        let call_id = item.call_id.as_deref().map(str::to_string).or_else(|| item.id.as_deref().and_then(|i| self.owned_items.get(i).cloned()))?;
        Some((call_id, !events_in::cut_off(Some(status))))
    }

    /// An event voxgate reads to hide server calls did not parse. Forwarded as it came, it could
    /// show the client a server call (its name, its arguments); so it is dropped, and the client
    /// is told, by the event's type only (`kind` is one of the API's, never the frame's content).
    /// A call it announced is still found in `response.done`, if that one reads.
    async fn drop_unreadable(&mut self, kind: &str) {
        tracing::warn!(parent: &self.span, kind, "dropped an upstream event that did not parse");
        let message = format!("The realtime service sent a {kind} event that could not be read; it was dropped.");
        self.client_error(codes::UPSTREAM_EVENT_UNREADABLE, &message, None).await;
    }

    /// Record a function-call item if it is server-owned; true when the event must be hidden.
    fn track_item(&mut self, kind: &str, item: &Item<'_>) -> bool {
        let call_id = item.call_id.as_deref();
        if item.is_function_call_output() {
            let acknowledged = matches!(kind, "conversation.item.created" | "conversation.item.added");
            if acknowledged && call_id.is_some_and(|c| self.unacknowledged_outputs.remove(c).is_some()) {
                self.gate.on_output_acknowledged();
            }
            return call_id.is_some_and(|c| self.owned_calls.contains_key(c));
        }
        if !item.is_function_call() {
            return false;
        }
        let name = item.name.as_deref().unwrap_or_default();
        let already = call_id.is_some_and(|c| self.owned_calls.contains_key(c))
            || item.id.as_deref().is_some_and(|i| self.owned_items.contains_key(i));
        if !already && !self.is_owned_name(name) {
            // Kept from the item's announcement to its end, the span in which its arguments come.
            let ids = call_id.into_iter().chain(item.id.as_deref());
            match kind {
                "response.output_item.added" => self.client_calls.extend(ids.map(str::to_string)),
                "response.output_item.done" => ids.for_each(|id| {
                    self.client_calls.remove(id);
                }),
                _ => {}
            }
            return false;
        }
        if let Some(call_id) = call_id {
            self.owned_calls.entry(call_id.to_string()).or_insert_with(|| name.to_string());
            if let Some(item_id) = item.id.as_deref() {
                self.owned_items.insert(item_id.to_string(), call_id.to_string());
            }
        }
        true
    }

    /// Is a call to this tool voxgate's to answer? Server tools, and tools nobody declared.
    fn is_owned_name(&self, name: &str) -> bool {
        self.deps.registry.is_server_tool_name(name) || !self.client_tools.contains(name)
    }

    async fn accept_call(&mut self, call_id: &str, name: &str, arguments: &str) {
        let actions = self.calls.accept(call_id, name, arguments, Instant::now());
        self.perform(actions).await;
    }
}

/// Is an upstream close one a new session may cure? A normal close, going away, a server error,
/// restart or overload: yes. A protocol, policy or size violation or an application code (4000+,
/// e.g. a request shape the server refuses): no, a new session would end the same way, so the
/// client gets the upstream's close as before.
fn resumable_close(code: tungstenite::protocol::frame::coding::CloseCode) -> bool {
    matches!(u16::from(code), 1000 | 1001 | 1005 | 1006 | 1011 | 1012 | 1013 | 1014)
}
