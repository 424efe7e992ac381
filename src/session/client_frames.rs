//! Frames from the client. Most are forwarded upstream as the same bytes; voxgate reads only
//! `session.update` (to keep the server tools), `conversation.item.create` (nobody but voxgate
//! answers a server call) and its own `voxgate.*` events. Bad frames get an `error` event and the
//! session goes on.

use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

use super::SessionOutcome;
use super::bridge::{Bridge, close_frame};
use crate::protocol::voxgate::codes;
use crate::protocol::{client, peek_checked};

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
            Some(Err(err)) => {
                tracing::debug!(parent: &self.span, error = %err, "client socket ended");
                return false;
            }
            Some(Ok(message)) => message,
        };
        self.frames.client_to_upstream();
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
        let (kind, event_id) = match peek_checked(text.as_bytes()) {
            Ok((kind, event_id)) => (kind.into_owned(), event_id.map(|e| e.into_owned())),
            Err(err) => {
                self.client_error(err.code(), &err.to_string(), None).await;
                return;
            }
        };
        let event_id = event_id.as_deref();
        match kind.as_str() {
            "session.update" => self.handle_session_update(text, event_id).await,
            "conversation.item.create" => self.handle_item_create(text, event_id).await,
            "voxgate.tool_call.confirm" => self.handle_confirm(text.as_bytes(), event_id).await,
            other if other.starts_with("voxgate.") => {
                // The type is not echoed: an error never repeats what the client sent.
                let message = "Unknown voxgate event type; the only one a client sends is voxgate.tool_call.confirm.";
                self.client_error(codes::UNKNOWN_EVENT, message, event_id).await;
            }
            _ => self.send_upstream(Message::Text(text)).await,
        }
    }

    async fn handle_session_update(&mut self, text: tungstenite::Utf8Bytes, event_id: Option<&str>) {
        let server_tools: Vec<serde_json::Value> = self.allowed_tool_definitions();
        let registry = self.deps.registry.clone();
        match client::merge_session_update(text.as_bytes(), &server_tools, |n| registry.is_server_tool_name(n)) {
            Ok(None) => self.send_upstream(Message::Text(text)).await,
            Ok(Some(merged)) => {
                self.client_tools = merged.client_tools.into_iter().collect();
                self.injected = true;
                for name in &merged.dropped {
                    let message = format!("The tool `{}` is provided by the server; the client's definition was dropped.", truncate(name, 64));
                    self.client_error(codes::SERVER_TOOL_NAME, &message, event_id).await;
                }
                self.send_upstream(Message::text(merged.frame)).await;
            }
            Err(err) => self.client_error(err.code(), "session.update could not be read", event_id).await,
        }
    }

    async fn handle_item_create(&mut self, text: tungstenite::Utf8Bytes, event_id: Option<&str>) {
        let forged = match client::parse_item_create(text.as_bytes()) {
            Ok(create) => create.item.is_some_and(|item| {
                let is_call_item = matches!(item.kind.as_deref(), Some("function_call_output" | "function_call"));
                let owned_call = item.call_id.as_deref().is_some_and(|id| self.owned_calls.contains_key(id) || self.calls.owns(id));
                let server_name = item.name.as_deref().is_some_and(|n| self.deps.registry.is_server_tool_name(n));
                is_call_item && (owned_call || server_name)
            }),
            Err(err) => {
                self.client_error(err.code(), &err.to_string(), event_id).await;
                return;
            }
        };
        if forged {
            self.client_error(
                codes::SERVER_CALL,
                "This call belongs to a server tool; only voxgate can answer it.",
                event_id,
            )
            .await;
            return;
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
            Ok(actions) => self.perform(actions).await,
            Err(err) => self.client_error(codes::NOT_AWAITING_CONFIRMATION, &err.to_string(), event_id).await,
        }
    }

    /// Definitions of the server tools this user may call, for `session.tools`.
    pub(super) fn allowed_tool_definitions(&self) -> Vec<serde_json::Value> {
        self.deps.registry.allowed_for(&self.info.principal).map(|t| t.definition().clone()).collect()
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
