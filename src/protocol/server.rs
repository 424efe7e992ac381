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
    pub calls: Vec<DoneCall>,
    /// `Some` when owned calls were removed: forward this instead of the original bytes.
    pub rewritten: Option<String>,
}

/// Read `response.done`, removing the items of calls `is_owned` claims. This is the one upstream
/// frame voxgate re-serialises, and only when it must.
pub fn rewrite_response_done(
    bytes: &[u8],
    is_owned: impl Fn(&str, &str) -> bool,
) -> Result<ResponseDone, FrameError> {
    let mut event: Value = serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)?;
    let Some(output) = event
        .get_mut("response")
        .and_then(|r| r.get_mut("output"))
        .and_then(Value::as_array_mut)
    else {
        return Ok(ResponseDone { calls: Vec::new(), rewritten: None });
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
            completed: item.get("status").and_then(Value::as_str) == Some("completed"),
        };
        let owned = is_owned(&call.call_id, &call.name);
        calls.push(call);
        !owned
    });
    let rewritten = (output.len() != before).then(|| event.to_string());
    Ok(ResponseDone { calls, rewritten })
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
    fn items_and_arguments_parse_borrowed() {
        let frame = br#"{"type":"response.output_item.added","item":{"id":"i","type":"function_call","call_id":"c","name":"n","arguments":""}}"#;
        let item = parse_item(frame).unwrap().unwrap();
        assert!(item.is_function_call());
        assert_eq!(item.name.as_deref(), Some("n"));
        let args = parse_arguments(br#"{"type":"response.function_call_arguments.done","item_id":"i","call_id":"c","arguments":"{\"q\":\"x\"}"}"#).unwrap();
        assert_eq!(args.arguments.as_deref(), Some("{\"q\":\"x\"}"));
        assert!(args.name.is_none());
    }
}
