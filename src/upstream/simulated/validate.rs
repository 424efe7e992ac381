//! Checks on client events, with the service's error codes and wording (PROTOCOL-NOTES §3.1, §3.8):
//! `session.update` (unknown fields, session type, modalities, audio formats, tools, the types of
//! `parallel_tool_calls` and `reasoning`) and its partial merge; `conversation.item.create` items;
//! `response.create` parameters; and retrieve/delete/truncate of items (a truncate is measured
//! against the audio the model sent). A rejected event changes nothing.

use serde_json::{Map, Value, json};

use super::audio::speech_duration_ms;
use super::conversation::Conversation;
use super::events::new_id;

/// A refusal, sent as an `error` event; the session carries on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub code: String,
    pub message: String,
    pub param: Option<String>,
}

impl Rejection {
    pub fn invalid(code: &str, message: &str, param: Option<&str>) -> Self {
        Self { code: code.into(), message: message.into(), param: param.map(str::to_string) }
    }
}

/// GA session fields a client may set.
const SESSION_FIELDS: [&str; 13] = [
    "type",
    "instructions",
    "output_modalities",
    "audio",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "tracing",
    "truncation",
    "prompt",
    "include",
    "parallel_tool_calls",
    "reasoning",
];
/// Fields of the session object a client may echo back; they are ignored.
const READ_ONLY_FIELDS: [&str; 4] = ["id", "object", "expires_at", "model"];

/// The session after `update` (the event's `session`), or why the whole update is refused.
pub fn apply_update(current: &Value, update: Option<&Value>) -> Result<Value, Rejection> {
    let Some(update) = update.and_then(Value::as_object) else {
        return Err(Rejection::invalid(
            "missing_required_parameter",
            "Missing required parameter: 'session'.",
            Some("session"),
        ));
    };
    for (field, value) in update {
        check_session_field(field, value)?;
    }
    let mut merged = current.clone();
    for (field, value) in update {
        match field.as_str() {
            "audio" => merge_audio(&mut merged, value),
            field if READ_ONLY_FIELDS.contains(&field) => {}
            field => merged[field] = value.clone(),
        }
    }
    Ok(merged)
}

fn check_session_field(field: &str, value: &Value) -> Result<(), Rejection> {
    let param = format!("session.{field}");
    match field {
        "type" if value == "realtime" => Ok(()),
        "type" => Err(Rejection::invalid(
            "invalid_value",
            "Invalid value for 'session.type': the simulated model supports only 'realtime' sessions.",
            Some(&param),
        )),
        "output_modalities" => check_modalities(value, &param),
        "audio" => {
            for side in ["input", "output"] {
                if let Some(format) = value.get(side).and_then(|s| s.get("format")) {
                    check_format(format, &format!("session.audio.{side}.format"))?;
                }
            }
            Ok(())
        }
        "tools" => check_tools(value, &param),
        "tool_choice" => check_tool_choice(value, &param),
        // Only their types are checked: the simulated model has no use for either.
        "parallel_tool_calls" if !value.is_boolean() => {
            let message = format!("Invalid type for '{param}': expected a boolean.");
            Err(Rejection::invalid("invalid_type", &message, Some(&param)))
        }
        "reasoning" if !(value.is_object() || value.is_null()) => {
            let message = format!("Invalid type for '{param}': expected an object.");
            Err(Rejection::invalid("invalid_type", &message, Some(&param)))
        }
        field if SESSION_FIELDS.contains(&field) || READ_ONLY_FIELDS.contains(&field) => Ok(()),
        _ => Err(Rejection::invalid(
            "unknown_parameter",
            &format!("Unknown parameter: '{}'.", clip(&param)),
            Some(&clip(&param)),
        )),
    }
}

/// Partial update of `audio`: each given `input`/`output` setting replaces the old one whole
/// (`turn_detection: null` switches detection off).
fn merge_audio(session: &mut Value, patch: &Value) {
    for side in ["input", "output"] {
        if let Some(settings) = patch.get(side).and_then(Value::as_object) {
            for (name, value) in settings {
                session["audio"][side][name] = value.clone();
            }
        }
    }
}

fn check_modalities(value: &Value, param: &str) -> Result<(), Rejection> {
    if value == &json!(["audio"]) || value == &json!(["text"]) {
        return Ok(());
    }
    Err(Rejection::invalid(
        "invalid_value",
        &format!("Invalid value for '{param}': expected [\"audio\"] or [\"text\"]."),
        Some(param),
    ))
}

fn check_format(format: &Value, param: &str) -> Result<(), Rejection> {
    let kind = format["type"].as_str().unwrap_or_default();
    if !["audio/pcm", "audio/pcmu", "audio/pcma"].contains(&kind) {
        let message = format!(
            "Invalid value for '{param}.type'. Supported values are: 'audio/pcm', 'audio/pcmu' and 'audio/pcma'."
        );
        return Err(Rejection::invalid("invalid_value", &message, Some(&format!("{param}.type"))));
    }
    match format["rate"].as_u64() {
        Some(rate) if kind == "audio/pcm" && rate < 24_000 => Err(Rejection::invalid(
            "integer_below_min_value",
            &format!(
                "Invalid '{param}.rate': integer below minimum value. Expected a value >= 24000, but got {rate} instead."
            ),
            Some(&format!("{param}.rate")),
        )),
        Some(rate) if kind == "audio/pcm" && rate > 24_000 => Err(Rejection::invalid(
            "integer_above_max_value",
            &format!(
                "Invalid '{param}.rate': integer above maximum value. Expected a value <= 24000, but got {rate} instead."
            ),
            Some(&format!("{param}.rate")),
        )),
        _ => Ok(()),
    }
}

fn check_tools(tools: &Value, param: &str) -> Result<(), Rejection> {
    let Some(list) = tools.as_array() else {
        return Err(Rejection::invalid(
            "invalid_type",
            &format!("Invalid type for '{param}': expected an array."),
            Some(param),
        ));
    };
    for (i, tool) in list.iter().enumerate() {
        let named = tool["name"].as_str().is_some_and(|name| !name.is_empty());
        let ok = match tool["type"].as_str() {
            Some("function") => named,
            Some("mcp") => tool["server_label"].is_string(),
            _ => false,
        };
        if !ok {
            let at = format!("{param}[{i}]");
            let message = format!("Invalid value for '{at}': a tool needs type 'function' and a name.");
            return Err(Rejection::invalid("invalid_value", &message, Some(&at)));
        }
    }
    Ok(())
}

fn check_tool_choice(choice: &Value, param: &str) -> Result<(), Rejection> {
    let ok = match choice {
        Value::String(mode) => ["auto", "none", "required"].contains(&mode.as_str()),
        Value::Object(forced) => forced.get("type").is_some_and(Value::is_string),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(Rejection::invalid(
        "invalid_value",
        &format!("Invalid value for '{param}': expected 'auto', 'none', 'required' or a tool."),
        Some(param),
    ))
}

/// Check the optional `response` object of `response.create`.
pub fn check_response_params(params: &Value) -> Result<(), Rejection> {
    if params.is_null() {
        return Ok(());
    }
    if !params.is_object() {
        return Err(Rejection::invalid(
            "invalid_type",
            "Invalid type for 'response': expected an object.",
            Some("response"),
        ));
    }
    if let Some(modalities) = params.get("output_modalities") {
        check_modalities(modalities, "response.output_modalities")?;
    }
    if let Some(conversation) = params.get("conversation")
        && conversation != "auto"
        && conversation != "none"
    {
        let message = "Invalid value for 'response.conversation'. Supported values are: 'auto' and 'none'.";
        return Err(Rejection::invalid("invalid_value", message, Some("response.conversation")));
    }
    if let Some(tools) = params.get("tools") {
        check_tools(tools, "response.tools")?;
    }
    if let Some(choice) = params.get("tool_choice") {
        check_tool_choice(choice, "response.tool_choice")?;
    }
    Ok(())
}

/// The item of `conversation.item.create`, checked and completed (id, status). Audio bytes in
/// `input_audio` parts are dropped: the simulated model cannot use them and should not keep them.
pub fn check_item(item: Option<&Value>, conversation: &Conversation) -> Result<Value, Rejection> {
    let Some(item) = item.and_then(Value::as_object) else {
        return Err(Rejection::invalid(
            "missing_required_parameter",
            "Missing required parameter: 'item'.",
            Some("item"),
        ));
    };
    let mut item: Map<String, Value> = item.clone();
    match item.get("type").and_then(Value::as_str).unwrap_or("message") {
        "message" => check_message(&mut item)?,
        "function_call" => {
            for field in ["name", "call_id"] {
                if !item.get(field).is_some_and(Value::is_string) {
                    return Err(missing(&format!("item.{field}")));
                }
            }
            item.entry("arguments").or_insert_with(|| json!(""));
        }
        "function_call_output" => {
            let Some(call_id) = item.get("call_id").and_then(Value::as_str) else {
                return Err(missing("item.call_id"));
            };
            if !item.get("output").is_some_and(Value::is_string) {
                let message = "Invalid type for 'item.output': expected a string.";
                return Err(Rejection::invalid("invalid_type", message, Some("item.output")));
            }
            if conversation.find_call(call_id).is_none() {
                let message = format!("Tool call ID '{}' not found in conversation.", clip(call_id));
                return Err(Rejection::invalid("invalid_value", &message, Some("item.call_id")));
            }
        }
        _ => {
            let message = "Invalid value for 'item.type'. Supported values are: 'message', 'function_call' and 'function_call_output'.";
            return Err(Rejection::invalid("invalid_value", message, Some("item.type")));
        }
    }
    item.entry("type").or_insert_with(|| json!("message"));
    item.entry("id").or_insert_with(|| json!(new_id("item")));
    item.entry("status").or_insert_with(|| json!("completed"));
    Ok(Value::Object(item))
}

fn check_message(item: &mut Map<String, Value>) -> Result<(), Rejection> {
    let role = item.get("role").and_then(Value::as_str).unwrap_or_default().to_string();
    let allowed: &[&str] = match role.as_str() {
        "user" => &["input_text", "input_audio", "input_image"],
        "system" => &["input_text"],
        "assistant" => &["output_text", "output_audio"],
        _ => {
            let message = "Invalid value for 'item.role'. Supported values are: 'user', 'assistant' and 'system'.";
            return Err(Rejection::invalid("invalid_value", message, Some("item.role")));
        }
    };
    let Some(parts) = item.get_mut("content").and_then(Value::as_array_mut) else {
        return Err(missing("item.content"));
    };
    for (i, part) in parts.iter_mut().enumerate() {
        let kind = part["type"].as_str().unwrap_or_default();
        if !allowed.contains(&kind) {
            let at = format!("item.content[{i}].type");
            let message = format!(
                "Invalid value for '{at}'. Supported values for role '{role}' are: '{}'.",
                allowed.join("', '")
            );
            return Err(Rejection::invalid("invalid_value", &message, Some(&at)));
        }
        if kind == "input_text" && !part["text"].is_string() {
            return Err(missing(&format!("item.content[{i}].text")));
        }
        if let Some(part) = part.as_object_mut()
            && part.contains_key("audio")
        {
            part.insert("audio".into(), Value::Null);
        }
    }
    Ok(())
}

/// `conversation.item.retrieve`/`.delete`/`.truncate` → the reply's type and fields.
pub fn edit_item(
    kind: &str,
    event: &Value,
    item_id: &str,
    conversation: &mut Conversation,
) -> Result<(&'static str, Value), Rejection> {
    let not_found = || {
        let message = format!("Item with item_id '{}' not found.", clip(item_id));
        Rejection::invalid("invalid_value", &message, Some("item_id"))
    };
    match kind {
        "conversation.item.retrieve" => {
            let item = conversation.get(item_id).ok_or_else(not_found)?;
            Ok(("conversation.item.retrieved", json!({ "item": item })))
        }
        "conversation.item.delete" => {
            if !conversation.remove(item_id) {
                return Err(not_found());
            }
            Ok(("conversation.item.deleted", json!({ "item_id": item_id })))
        }
        _ => {
            let sent_ms = conversation.audio_ms(item_id);
            let item = conversation.get_mut(item_id).ok_or_else(not_found)?;
            let reply = truncate(item, event, item_id, sent_ms)?;
            if let Some(end) = reply.1["audio_end_ms"].as_u64() {
                conversation.set_audio_ms(item_id, end);
            }
            Ok(reply)
        }
    }
}

/// Cut an assistant audio message's transcript to what was heard by `audio_end_ms` (proportionally:
/// the simulated voice spends equal time on every character). The limit is the audio the model sent
/// (`sent_ms`, whole 50 ms chunks, so up to 40 ms past the transcript's length); an item the model
/// sent no audio for is measured by its transcript.
fn truncate(
    item: &mut Value,
    event: &Value,
    item_id: &str,
    sent_ms: Option<u64>,
) -> Result<(&'static str, Value), Rejection> {
    let content_index = event["content_index"].as_u64().unwrap_or(0);
    let Some(audio_end_ms) = event["audio_end_ms"].as_u64() else {
        return Err(missing("audio_end_ms"));
    };
    let part = usize::try_from(content_index).ok().and_then(|i| item["content"].get_mut(i));
    let Some(part) = part.filter(|part| part["type"] == "output_audio") else {
        let message = "Only assistant message items with audio content can be truncated.";
        return Err(Rejection::invalid("invalid_value", message, Some("item_id")));
    };
    let transcript = part["transcript"].as_str().unwrap_or_default().to_string();
    let duration_ms = sent_ms.unwrap_or_else(|| u64::from(speech_duration_ms(&transcript)));
    if audio_end_ms > duration_ms {
        let message = format!("Audio content of {duration_ms}ms is shorter than {audio_end_ms}ms.");
        return Err(Rejection::invalid("invalid_value", &message, Some("audio_end_ms")));
    }
    let chars = transcript.chars().count() as u64;
    let keep = usize::try_from(chars * audio_end_ms / duration_ms.max(1)).unwrap_or(usize::MAX);
    part["transcript"] = json!(transcript.chars().take(keep).collect::<String>());
    Ok((
        "conversation.item.truncated",
        json!({ "item_id": item_id, "content_index": content_index, "audio_end_ms": audio_end_ms }),
    ))
}

fn missing(param: &str) -> Rejection {
    Rejection::invalid("missing_required_parameter", &format!("Missing required parameter: '{param}'."), Some(param))
}

/// Client-supplied names echoed in errors are bounded.
fn clip(text: &str) -> String {
    text.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::super::events::default_session;
    use super::*;

    #[test]
    fn updates_merge_partially_and_keep_the_rest() {
        let current = default_session("sess_1", "gpt-realtime");
        let update = json!({"type": "realtime", "instructions": "Be brief.",
            "audio": {"input": {"turn_detection": null}, "output": {"voice": "cedar"}},
            "tools": [{"type": "function", "name": "search_pubmed", "parameters": {}}], "id": "ignored"});
        let merged = apply_update(&current, Some(&update)).expect("accepted");
        assert_eq!(merged["instructions"], "Be brief.");
        assert_eq!(merged["audio"]["input"]["turn_detection"], Value::Null);
        assert_eq!(merged["audio"]["input"]["format"], json!({"type": "audio/pcm", "rate": 24000}));
        assert_eq!(merged["audio"]["output"]["voice"], "cedar");
        assert_eq!(merged["tools"][0]["name"], "search_pubmed");
        assert_eq!(merged["id"], "sess_1");
    }

    #[test]
    fn bad_updates_are_refused_whole() {
        let current = default_session("sess_1", "gpt-realtime");
        let refused = |update: Value| apply_update(&current, Some(&update)).expect_err("refused");
        let beta = refused(json!({"modalities": ["text", "audio"]}));
        assert_eq!((beta.code.as_str(), beta.param.as_deref()), ("unknown_parameter", Some("session.modalities")));
        let rate = refused(json!({"audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}}));
        assert_eq!(rate.code, "integer_below_min_value");
        assert_eq!(refused(json!({"output_modalities": ["text", "audio"]})).code, "invalid_value");
        assert_eq!(refused(json!({"type": "transcription"})).param.as_deref(), Some("session.type"));
        assert_eq!(refused(json!({"tools": [{"type": "function"}]})).param.as_deref(), Some("session.tools[0]"));
        assert_eq!(apply_update(&current, None).expect_err("refused").code, "missing_required_parameter");
    }

    /// GA fields the live service takes (PROTOCOL-NOTES §2.3) are accepted, with their types checked.
    #[test]
    fn ga_parallel_tool_calls_and_reasoning_are_accepted() {
        let current = default_session("sess_1", "gpt-realtime");
        let update = json!({"type": "realtime", "instructions": "Be brief.", "parallel_tool_calls": false,
            "reasoning": {"effort": "low"}});
        let merged = apply_update(&current, Some(&update)).expect("accepted");
        assert_eq!(merged["parallel_tool_calls"], false);
        assert_eq!(merged["reasoning"], json!({"effort": "low"}));
        assert_eq!(merged["instructions"], "Be brief.");
        assert!(apply_update(&current, Some(&json!({"reasoning": null}))).is_ok());
        let refused = |update: Value| apply_update(&current, Some(&update)).expect_err("refused");
        let flag = refused(json!({"parallel_tool_calls": "yes"}));
        assert_eq!((flag.code.as_str(), flag.param.as_deref()), ("invalid_type", Some("session.parallel_tool_calls")));
        let reasoning = refused(json!({"reasoning": "low"}));
        assert_eq!((reasoning.code.as_str(), reasoning.param.as_deref()), ("invalid_type", Some("session.reasoning")));
    }

    #[test]
    fn items_are_checked_and_completed() {
        let conversation = Conversation::default();
        let item = json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]});
        let checked = check_item(Some(&item), &conversation).expect("valid");
        assert!(checked["id"].as_str().is_some_and(|id| id.starts_with("item_")));
        assert_eq!(checked["status"], "completed");
        let orphan = json!({"type": "function_call_output", "call_id": "call_x", "output": "{}"});
        assert_eq!(
            check_item(Some(&orphan), &conversation).expect_err("no call").param.as_deref(),
            Some("item.call_id")
        );
        let wrong = json!({"type": "message", "role": "user", "content": [{"type": "output_text", "text": "x"}]});
        assert_eq!(check_item(Some(&wrong), &conversation).expect_err("bad part").code, "invalid_value");
        let audio = json!({"type": "message", "role": "user", "content": [{"type": "input_audio", "audio": "AAAA"}]});
        assert_eq!(check_item(Some(&audio), &conversation).expect("valid")["content"][0]["audio"], Value::Null);
    }

    #[test]
    fn truncate_cuts_the_transcript_to_what_was_heard() {
        let mut conversation = Conversation::default();
        let transcript = "a".repeat(20); // 1 400 ms of simulated speech
        let item = json!({"id": "item_a", "type": "message", "role": "assistant",
            "content": [{"type": "output_audio", "transcript": transcript}]});
        conversation.place(None, item).expect("placed");
        let event = json!({"item_id": "item_a", "content_index": 0, "audio_end_ms": 700});
        let (reply, fields) = edit_item("conversation.item.truncate", &event, "item_a", &mut conversation).expect("ok");
        assert_eq!(reply, "conversation.item.truncated");
        assert_eq!(fields["audio_end_ms"], 700);
        assert_eq!(conversation.get("item_a").expect("kept")["content"][0]["transcript"], "a".repeat(10));
        let late = json!({"item_id": "item_a", "audio_end_ms": 5_000});
        assert!(edit_item("conversation.item.truncate", &late, "item_a", &mut conversation).is_err());
        assert!(edit_item("conversation.item.delete", &json!({}), "item_a", &mut conversation).is_ok());
        assert!(edit_item("conversation.item.retrieve", &json!({}), "item_a", &mut conversation).is_err());
    }
}
