//! The events voxgate itself sends: `voxgate.*` activity events for clients that asked for them,
//! the standard realtime `error` event, and the frames voxgate sends the model.
//!
//! Every event voxgate originates carries an `event_id` starting with [`EVENT_ID_PREFIX`], so an
//! upstream `error` answering one of them is recognised as voxgate's own business
//! ([`is_own_event_id`]). A client event voxgate forwards under an id of its own goes with a
//! stand-in ([`STAND_IN_PREFIX`]): still the client's event.

use serde_json::{Value, json};

use crate::tools::Citation;

/// Prefix of the `event_id` of every event voxgate creates.
pub const EVENT_ID_PREFIX: &str = "voxgate_";

/// Prefix of every event type in voxgate's own namespace; none may come from the upstream.
pub const TYPE_PREFIX: &str = "voxgate.";

/// Prefix of the stand-in `event_id` voxgate gives a client event it forwards under an id of its
/// own (a `response.create` it rewrites that had none; every `session.update`): an upstream
/// `error` naming one is about that client event, and reaches the client naming the client's own
/// id, or nothing.
pub const STAND_IN_PREFIX: &str = "voxgate_client_";

/// A fresh event id for an event voxgate sends.
pub fn event_id() -> String {
    format!("{EVENT_ID_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// A fresh stand-in id for a client event voxgate forwards under an id of its own (see
/// [`STAND_IN_PREFIX`]).
pub fn stand_in_event_id() -> String {
    format!("{STAND_IN_PREFIX}{}", uuid::Uuid::new_v4().simple())
}

/// Whether `id` is one of voxgate's own events' (a stand-in is the client's event's).
pub fn is_own_event_id(id: &str) -> bool {
    id.starts_with(EVENT_ID_PREFIX) && !id.starts_with(STAND_IN_PREFIX)
}

/// Client error codes voxgate emits in the standard `error` event.
pub mod codes {
    pub const INVALID_JSON: &str = "voxgate_invalid_json";
    pub const MISSING_TYPE: &str = "voxgate_missing_type";
    pub const FRAME_TOO_LARGE: &str = "voxgate_frame_too_large";
    pub const BINARY_FRAME: &str = "voxgate_binary_frame";
    pub const UNKNOWN_EVENT: &str = "voxgate_unknown_event";
    pub const INVALID_EVENT: &str = "voxgate_invalid_event";
    pub const NOT_AWAITING_CONFIRMATION: &str = "voxgate_not_awaiting_confirmation";
    pub const EVENTS_NOT_ENABLED: &str = "voxgate_events_not_enabled";
    pub const SERVER_TOOL_NAME: &str = "voxgate_server_tool_name";
    pub const SERVER_CALL: &str = "voxgate_server_call";
    pub const UPSTREAM_UNAVAILABLE: &str = "voxgate_upstream_unavailable";
    pub const TOO_MANY_FRAMES: &str = "voxgate_too_many_frames";
    pub const HOSTED_MCP_REFUSED: &str = "voxgate_hosted_mcp_refused";
    pub const UPSTREAM_EVENT_UNREADABLE: &str = "voxgate_upstream_event_unreadable";
    pub const RESUME_CONFIGURATION_REFUSED: &str = "voxgate_resume_configuration_refused";
}

/// The longest client `event_id` an `error` echoes. A client picks its ids; one of megabytes would
/// be copied into every error that names it.
pub const MAX_ECHOED_EVENT_ID: usize = 256;

/// The standard realtime `error` event (CONTRACT §4). The client's `event_id` is echoed when it
/// is at most [`MAX_ECHOED_EVENT_ID`] bytes, otherwise `null`.
pub fn error_event(code: &str, message: &str, client_event_id: Option<&str>) -> String {
    let client_event_id = client_event_id.filter(|id| id.len() <= MAX_ECHOED_EVENT_ID);
    json!({
        "type": "error",
        "event_id": event_id(),
        "error": {
            "type": "invalid_request_error",
            "code": code,
            "message": message,
            "param": null,
            "event_id": client_event_id,
        }
    })
    .to_string()
}

/// One server tool as listed in `voxgate.session.ready`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToolSummary {
    pub name: &'static str,
    pub category: crate::tools::Category,
    pub requires_confirmation: bool,
}

pub fn session_ready(session_id: &str, tools: &[ToolSummary]) -> String {
    json!({"type": "voxgate.session.ready", "session_id": session_id, "tools": tools}).to_string()
}

/// `reconnect`: whether the client should open a new session at once (a drain: another instance
/// will take it), or not (an administrator ended it, its authorisation expired).
pub fn session_closing(reason: &str, reconnect: bool) -> String {
    json!({"type": "voxgate.session.closing", "reason": reason, "reconnect": reconnect}).to_string()
}

/// A resume began (CONTRACT §9); `reason`: upstream_closed, upstream_error or max_age.
pub fn session_resuming(reason: &str) -> String {
    json!({"type": "voxgate.session.resuming", "reason": reason}).to_string()
}

/// The session continues on a new upstream session.
pub fn session_resumed(reason: &str, items_restored: usize, audio_dropped_ms: u64) -> String {
    json!({"type": "voxgate.session.resumed", "reason": reason, "items_restored": items_restored, "audio_dropped_ms": audio_dropped_ms})
        .to_string()
}

/// `expires_at_ms` is the server's clock (CONTRACT §3); `expires_in_ms` the time left when the event
/// was made, for a client whose own clock may be off: it counts down from the event's arrival.
pub fn confirmation_requested(
    call_id: &str,
    name: &str,
    arguments: &Value,
    prompt: &str,
    expires_at_ms: u64,
    expires_in_ms: u64,
) -> String {
    json!({
        "type": "voxgate.tool_call.confirmation_requested",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "prompt": prompt,
        "expires_at_ms": expires_at_ms,
        "expires_in_ms": expires_in_ms,
    })
    .to_string()
}

pub fn started(call_id: &str, name: &str) -> String {
    json!({"type": "voxgate.tool_call.started", "call_id": call_id, "name": name}).to_string()
}

pub fn completed(call_id: &str, name: &str, duration_ms: u64, citations: &[Citation]) -> String {
    json!({
        "type": "voxgate.tool_call.completed",
        "call_id": call_id,
        "name": name,
        "duration_ms": duration_ms,
        "citations": citations,
    })
    .to_string()
}

pub fn failed(call_id: &str, name: &str, code: &str, message: &str) -> String {
    json!({
        "type": "voxgate.tool_call.failed",
        "call_id": call_id,
        "name": name,
        "error": {"code": code, "message": message},
    })
    .to_string()
}

pub fn declined(call_id: &str, name: &str, reason: &str) -> String {
    json!({"type": "voxgate.tool_call.declined", "call_id": call_id, "name": name, "reason": reason})
        .to_string()
}

/// Progress of a running call (CONTRACT §10), relayed from an MCP server.
pub fn tool_call_progress(call_id: &str, progress: f64, total: Option<f64>, message: Option<&str>) -> String {
    json!({
        "type": "voxgate.tool_call.progress",
        "call_id": call_id,
        "progress": progress,
        "total": total,
        "message": message,
    })
    .to_string()
}

/// The `function_call_output` item voxgate adds for a server call, sent as `event_id` (an upstream
/// `error` about it names that id).
pub fn function_call_output(event_id: &str, call_id: &str, output: &str) -> String {
    json!({
        "type": "conversation.item.create",
        "event_id": event_id,
        "item": {"type": "function_call_output", "call_id": call_id, "output": output},
    })
    .to_string()
}

/// The `output` of a failed or declined call, as the model sees it.
pub fn error_output(code: &str, message: &str) -> String {
    json!({"error": {"code": code, "message": message}}).to_string()
}

/// A `response.create` asking the model to answer with the new outputs in context. When the
/// session forces a tool call (`tool_choice` `"required"` or one tool named), this response asks for
/// `"auto"`: it would otherwise inherit the session's choice and have to call a tool again, and
/// voxgate would ask again after that call's output, round after round with nobody speaking.
/// Otherwise it inherits the session's (`"none"` stays none).
pub fn response_create(event_id: &str, tool_choice_forced: bool) -> String {
    if tool_choice_forced {
        json!({"type": "response.create", "event_id": event_id, "response": {"tool_choice": "auto"}}).to_string()
    } else {
        json!({"type": "response.create", "event_id": event_id}).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stand_in_is_the_clients_event_not_voxgates() {
        assert!(is_own_event_id(&event_id()));
        assert!(!is_own_event_id(&stand_in_event_id()));
        assert!(stand_in_event_id().starts_with(STAND_IN_PREFIX));
        assert!(!is_own_event_id("c1"));
    }

    #[test]
    fn error_event_has_the_standard_shape() {
        let v: Value = serde_json::from_str(&error_event("voxgate_x", "bad", Some("c1"))).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["code"], "voxgate_x");
        assert_eq!(v["error"]["event_id"], "c1");
        assert!(v["event_id"].as_str().unwrap().starts_with(EVENT_ID_PREFIX));
    }

    #[test]
    fn a_forced_tool_choice_is_not_inherited_by_voxgates_response_create() {
        let v: Value = serde_json::from_str(&response_create("voxgate_r", true)).unwrap();
        assert_eq!(v, json!({"type": "response.create", "event_id": "voxgate_r", "response": {"tool_choice": "auto"}}));
        let v: Value = serde_json::from_str(&response_create("voxgate_r", false)).unwrap();
        assert_eq!(v, json!({"type": "response.create", "event_id": "voxgate_r"}));
    }

    #[test]
    fn a_long_client_event_id_is_not_echoed() {
        let long = "x".repeat(MAX_ECHOED_EVENT_ID + 1);
        let v: Value = serde_json::from_str(&error_event("invalid_event", "bad", Some(&long))).unwrap();
        assert_eq!(v["error"]["event_id"], Value::Null);
        let fits = "x".repeat(MAX_ECHOED_EVENT_ID);
        let v: Value = serde_json::from_str(&error_event("invalid_event", "bad", Some(&fits))).unwrap();
        assert_eq!(v["error"]["event_id"], fits.as_str());
    }
}
