//! The upstream events voxgate reads: the response lifecycle, user speech, voxgate's own errors,
//! and every event that carries a function call (to hide server-owned calls from the client).

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::FrameError;

/// The upstream event types voxgate must look into; every other type is forwarded untouched.
pub fn needs_inspection(kind: &str) -> bool {
    matches!(
        kind,
        "session.created"
            | "session.updated"
            | "response.created"
            | "response.done"
            | "input_audio_buffer.speech_started"
            | "input_audio_buffer.speech_stopped"
            | "error"
            | "response.output_item.added"
            | "response.output_item.done"
            | "conversation.item.created"
            | "conversation.item.added"
            | "conversation.item.done"
            | "conversation.item.retrieved"
            | "response.function_call_arguments.delta"
            | "response.function_call_arguments.done"
    )
}

/// An item inside an item-bearing event (`response.output_item.*`, `conversation.item.*`).
#[derive(Debug, Deserialize, Default)]
pub struct Item<'a> {
    #[serde(borrow, rename = "type", default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub status: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub arguments: Option<Cow<'a, str>>,
}

impl Item<'_> {
    pub fn is_function_call(&self) -> bool {
        self.kind.as_deref() == Some("function_call")
    }
    pub fn is_function_call_output(&self) -> bool {
        self.kind.as_deref() == Some("function_call_output")
    }
}

#[derive(Debug, Deserialize)]
struct WithItem<'a> {
    #[serde(borrow, default)]
    item: Option<Item<'a>>,
}

pub fn parse_item(bytes: &[u8]) -> Result<Option<Item<'_>>, FrameError> {
    serde_json::from_slice::<WithItem<'_>>(bytes).map(|w| w.item).map_err(|_| FrameError::NotJson)
}

/// `response.function_call_arguments.delta` / `.done` (GA `.done` carries `name`; beta does not).
#[derive(Debug, Deserialize)]
pub struct ArgumentsEvent<'a> {
    #[serde(borrow, default)]
    pub response_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub item_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub arguments: Option<Cow<'a, str>>,
}

pub fn parse_arguments(bytes: &[u8]) -> Result<ArgumentsEvent<'_>, FrameError> {
    serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)
}

/// The `error` event's fields voxgate looks at.
#[derive(Debug, Deserialize)]
pub struct ErrorEvent<'a> {
    #[serde(borrow)]
    pub error: ErrorBody<'a>,
}

#[derive(Debug, Deserialize)]
pub struct ErrorBody<'a> {
    #[serde(borrow, default)]
    pub code: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub event_id: Option<Cow<'a, str>>,
}

pub fn parse_error(bytes: &[u8]) -> Result<ErrorEvent<'_>, FrameError> {
    serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)
}

/// What `response.created` says of its response: its `id`, and whether it is out of band
/// (`conversation: "none"`: `conversation_id` is `null`; a server that sends no such field runs
/// every response in the default conversation).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ResponseCreated {
    pub id: Option<String>,
    pub out_of_band: bool,
}

/// Read `response.created` (forwarded as it came whatever it holds: one that does not read says
/// nothing).
pub fn parse_response_created(bytes: &[u8]) -> ResponseCreated {
    let Ok(event) = serde_json::from_slice::<Value>(bytes) else { return ResponseCreated::default() };
    let response = &event["response"];
    ResponseCreated {
        id: response["id"].as_str().map(str::to_string),
        out_of_band: response.get("conversation_id").is_some_and(Value::is_null),
    }
}

/// A function call listed in `response.done`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoneCall {
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub completed: bool,
}

/// What `response.done` says, and the frame rewritten without server-owned calls when it held any.
#[derive(Debug)]
pub struct ResponseDone {
    /// The response's `id`, when it has one.
    pub id: Option<String>,
    /// Not cut off: its `status` is not `cancelled`, `incomplete` or `failed` (a peer that sends
    /// none has its calls taken as complete, as before calls were held at all).
    pub completed: bool,
    /// Its `status` is `failed`: a server error ended it (not the user, not a limit).
    pub failed: bool,
    pub calls: Vec<DoneCall>,
    /// `Some` when owned calls were removed: forward this instead of the original bytes.
    pub rewritten: Option<String>,
}

/// Does a response's or an item's `status` say it was cut off? Only an explicit one does: a
/// missing status decides nothing.
pub fn cut_off(status: Option<&str>) -> bool {
    matches!(status, Some("cancelled" | "incomplete" | "failed"))
}

/// Read `response.done`, removing the items of calls `is_owned` claims. This is the one upstream
/// frame voxgate re-serialises, and only when it must.
pub fn rewrite_response_done(
    bytes: &[u8],
    is_owned: impl Fn(&str, &str) -> bool,
) -> Result<ResponseDone, FrameError> {
    let mut event: Value = serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)?;
    let id = event["response"]["id"].as_str().map(str::to_string);
    let status = event["response"]["status"].as_str();
    let (completed, failed) = (!cut_off(status), status == Some("failed"));
    let Some(output) = event
        .get_mut("response")
        .and_then(|r| r.get_mut("output"))
        .and_then(Value::as_array_mut)
    else {
        return Ok(ResponseDone { id, completed, failed, calls: Vec::new(), rewritten: None });
    };
    let mut calls = Vec::new();
    let before = output.len();
    output.retain(|item| {
        if item.get("type").and_then(Value::as_str) != Some("function_call") {
            return true;
        }
        let field = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let call = DoneCall {
            call_id: field("call_id"),
            name: field("name"),
            arguments: field("arguments"),
            // An item without a status of its own takes the response's.
            completed: item.get("status").and_then(Value::as_str).map_or(completed, |status| !cut_off(Some(status))),
        };
        let owned = is_owned(&call.call_id, &call.name);
        calls.push(call);
        !owned
    });
    let rewritten = (output.len() != before).then(|| event.to_string());
    Ok(ResponseDone { id, completed, failed, calls, rewritten })
}

/// `session.tool_choice` as far as voxgate's own `response.create` is concerned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// `"auto"`, the API's default: the model decides.
    #[default]
    Auto,
    /// `"none"`: the model calls no tool.
    Off,
    /// `"required"`, or one tool named (`{"type": "function", "name": …}`): every response must
    /// call a tool.
    Forced,
}

/// What a `session.created` or `session.updated` says of the session (the upstream's own account:
/// a client update it refused changed nothing).
pub struct SessionState {
    /// `session.tool_choice`, when the event carries one voxgate reads.
    pub tool_choice: Option<ToolChoice>,
    /// The names in `session.tools`; `None` when the event carries no `tools` list.
    pub tool_names: Option<Vec<String>>,
}

/// Read a `session.created` / `session.updated`; `None` when it is not JSON.
pub fn parse_session_state(bytes: &[u8]) -> Option<SessionState> {
    let event: Value = serde_json::from_slice(bytes).ok()?;
    let session = &event["session"];
    let tool_choice = match &session["tool_choice"] {
        Value::String(mode) => match mode.as_str() {
            "auto" => Some(ToolChoice::Auto),
            "none" => Some(ToolChoice::Off),
            "required" => Some(ToolChoice::Forced),
            _ => None,
        },
        Value::Object(_) => Some(ToolChoice::Forced),
        _ => None,
    };
    let tool_names =
        session["tools"].as_array().map(|tools| tools.iter().filter_map(|tool| tool["name"].as_str().map(str::to_string)).collect());
    Some(SessionState { tool_choice, tool_names })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_done_is_rewritten_only_when_it_holds_owned_calls() {
        let frame = br#"{"type":"response.done","event_id":"e","response":{"id":"r","status":"completed","output":[
            {"id":"i1","type":"function_call","status":"completed","name":"search_pubmed","call_id":"c1","arguments":"{}"},
            {"id":"i2","type":"function_call","status":"completed","name":"client_tool","call_id":"c2","arguments":"{\"a\":1}"},
            {"id":"i3","type":"message","role":"assistant","content":[]}]}}"#;
        let done = rewrite_response_done(frame, |_, name| name == "search_pubmed").unwrap();
        assert_eq!(done.calls.len(), 2);
        assert_eq!(done.calls[1].arguments, "{\"a\":1}");
        let v: Value = serde_json::from_str(done.rewritten.as_deref().unwrap()).unwrap();
        let output = v["response"]["output"].as_array().unwrap();
        assert_eq!(output.len(), 2);
        assert_eq!(output[0]["call_id"], "c2");
        let untouched = rewrite_response_done(frame, |_, _| false).unwrap();
        assert!(untouched.rewritten.is_none());
    }

    #[test]
    fn an_out_of_band_response_is_told_by_its_null_conversation() {
        let created = |frame: &[u8]| parse_response_created(frame);
        let oob = created(br#"{"type":"response.created","response":{"id":"r1","conversation_id":null}}"#);
        assert_eq!(oob, ResponseCreated { id: Some("r1".into()), out_of_band: true });
        assert!(!created(br#"{"type":"response.created","response":{"id":"r2","conversation_id":"conv_1"}}"#).out_of_band);
        assert!(!created(br#"{"type":"response.created","response":{"id":"r3"}}"#).out_of_band, "beta: no field");
    }

    #[test]
    fn items_and_arguments_parse_borrowed() {
        let frame = br#"{"type":"response.output_item.added","item":{"id":"i","type":"function_call","call_id":"c","name":"n","arguments":""}}"#;
        let item = parse_item(frame).unwrap().unwrap();
        assert!(item.is_function_call());
        assert_eq!(item.name.as_deref(), Some("n"));
        let args = parse_arguments(br#"{"type":"response.function_call_arguments.done","item_id":"i","call_id":"c","arguments":"{\"q\":\"x\"}"}"#).unwrap();
        assert_eq!(args.arguments.as_deref(), Some("{\"q\":\"x\"}"));
        assert!(args.name.is_none());
    }

    #[test]
    fn the_session_state_is_read_from_the_upstreams_account() {
        let state = |session: Value| parse_session_state(serde_json::json!({"type": "session.updated", "session": session}).to_string().as_bytes()).unwrap();
        assert_eq!(state(serde_json::json!({"tool_choice": "required"})).tool_choice, Some(ToolChoice::Forced));
        assert_eq!(state(serde_json::json!({"tool_choice": {"type": "function", "name": "a"}})).tool_choice, Some(ToolChoice::Forced));
        assert_eq!(state(serde_json::json!({"tool_choice": "none"})).tool_choice, Some(ToolChoice::Off));
        assert_eq!(state(serde_json::json!({"tool_choice": "auto"})).tool_choice, Some(ToolChoice::Auto));
        assert_eq!(state(serde_json::json!({"instructions": "x"})).tool_choice, None);
        let tools = state(serde_json::json!({"tools": [{"type": "function", "name": "a"}, {"type": "mcp"}]}));
        assert_eq!(tools.tool_names, Some(vec!["a".to_string()]));
        assert_eq!(state(serde_json::json!({"instructions": "x"})).tool_names, None, "no list, nothing said of the tools");
        assert!(parse_session_state(b"not json").is_none());
    }

    #[test]
    fn only_an_explicit_status_cuts_a_call_off() {
        let done = |frame: &str| rewrite_response_done(frame.as_bytes(), |_, _| true).unwrap();
        let silent = done(r#"{"type":"response.done","response":{"id":"r","output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}}"#);
        assert!(silent.completed && silent.calls[0].completed, "no status decides nothing");
        let cut = done(r#"{"type":"response.done","response":{"id":"r","status":"cancelled","output":[{"type":"function_call","status":"incomplete","call_id":"c","name":"n","arguments":"{}"}]}}"#);
        assert!(!cut.completed && !cut.calls[0].completed);
        assert!(!cut_off(Some("completed")) && !cut_off(None) && cut_off(Some("failed")));
        let cancelled = done(r#"{"type":"response.done","response":{"id":"r","status":"cancelled","output":[{"type":"function_call","call_id":"c","name":"n","arguments":"{}"}]}}"#);
        assert!(!cancelled.calls[0].completed, "an item without a status takes its response's");
    }
}
