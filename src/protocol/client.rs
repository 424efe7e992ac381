//! The client events voxgate reads: `session.update` and `response.create` (server tools are
//! merged in and guarded, provider-hosted `mcp` tools refused unless allowed; a `response.create`
//! may not carry a server call's items in its `input`),
//! `conversation.item.create` (nobody but voxgate answers a server call) and
//! `voxgate.tool_call.confirm`. Each is parsed only when its `type` says so.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::FrameError;

/// `voxgate.tool_call.confirm`.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Confirm {
    pub call_id: String,
    pub approved: bool,
}

pub fn parse_confirm(bytes: &[u8]) -> Result<Confirm, FrameError> {
    serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)
}

/// What voxgate needs to know of a `conversation.item.create`.
#[derive(Debug, Deserialize, Default)]
pub struct ItemCreate<'a> {
    #[serde(borrow, default)]
    pub item: Option<ItemFields<'a>>,
}

#[derive(Debug, Deserialize, Default)]
pub struct ItemFields<'a> {
    #[serde(borrow, rename = "type", default)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub call_id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pub name: Option<Cow<'a, str>>,
    /// Read as any value: only a `"user"` one matters, and a frame the upstream would take
    /// whatever its `role` must not be refused here for it.
    #[serde(default)]
    pub role: Option<Value>,
}

pub fn parse_item_create(bytes: &[u8]) -> Result<ItemCreate<'_>, FrameError> {
    serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)
}

/// Why a client frame that sets tools or items is refused as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the frame is not valid JSON or its tools are not a list")]
    Malformed,
    /// A provider-hosted `mcp` tool: the provider would call it directly, past voxgate's
    /// screening and audit (`upstream.allow_hosted_mcp`).
    #[error("hosted MCP tools are not allowed on this server")]
    HostedMcp,
    /// `response.input` carries a `function_call`/`function_call_output` of a server call.
    #[error("this call belongs to a server tool; only voxgate can answer it")]
    ServerCall,
    /// An object in it has a key written twice ([`super::unique_keys`]).
    #[error("a key is written twice in one object")]
    RepeatedKey,
}

impl From<FrameError> for Refusal {
    fn from(_: FrameError) -> Self {
        Refusal::Malformed
    }
}

/// What voxgate needs to know of a server tool call to guard items that name it.
pub struct CallGuard<S, O> {
    pub is_server_tool: S,
    pub owns_call: O,
    pub allow_hosted_mcp: bool,
}

impl<S: Fn(&str) -> bool, O: Fn(&str) -> bool> CallGuard<S, O> {
    /// Is this item a call or output that only voxgate may create?
    pub fn is_server_call_item(&self, kind: Option<&str>, call_id: Option<&str>, name: Option<&str>) -> bool {
        matches!(kind, Some("function_call_output" | "function_call"))
            && (call_id.is_some_and(|c| (self.owns_call)(c)) || name.is_some_and(|n| (self.is_server_tool)(n)))
    }
}

/// Guard a client `response.create`: refuse items of server calls in `response.input` and hosted
/// `mcp` tools, and keep the server tools in a per-response `tools` list. `own_event_id` is set
/// as the event's `event_id` when it has no string one.
/// `Ok(None)`: forward the frame unchanged.
pub fn guard_response_create(
    bytes: &[u8],
    server_tools: &[Value],
    guard: &CallGuard<impl Fn(&str) -> bool, impl Fn(&str) -> bool>,
    own_event_id: Option<&str>,
) -> Result<Option<MergedUpdate>, Refusal> {
    let mut event = parse_guarded(bytes)?;
    let named = name_event(&mut event, own_event_id);
    // Rewritten only to carry the id: nothing merged, nothing dropped.
    let named_only = |event: &Value| {
        named.then(|| MergedUpdate { frame: event.to_string(), client_tools: Vec::new(), dropped: Vec::new(), replaced_event_id: Value::Null })
    };
    let Some(response) = event.get_mut("response") else { return Ok(named_only(&event)) };
    if let Some(input) = response.get("input").and_then(Value::as_array) {
        let forged = input.iter().any(|item| {
            let field = |k: &str| item.get(k).and_then(Value::as_str);
            guard.is_server_call_item(field("type"), field("call_id"), field("name"))
        });
        if forged {
            return Err(Refusal::ServerCall);
        }
    }
    let Some(tools) = response.get_mut("tools") else { return Ok(named_only(&event)) };
    let (client_tools, dropped) = merge_tools(tools, server_tools, guard)?;
    Ok(Some(MergedUpdate { frame: event.to_string(), client_tools, dropped, replaced_event_id: Value::Null }))
}

/// Set `id` as the event's `event_id` when it has no string one; true when it was set.
fn name_event(event: &mut Value, id: Option<&str>) -> bool {
    match (id, event.as_object_mut()) {
        (Some(id), Some(fields)) if !fields.get("event_id").is_some_and(Value::is_string) => {
            fields.insert("event_id".into(), Value::from(id));
            true
        }
        _ => false,
    }
}

/// `bytes` (a JSON object) with `event_id` set to `id`, and the `event_id` it had (`Null` when
/// none); `None` when it is not a JSON object.
pub fn with_event_id(bytes: &[u8], id: &str) -> Option<(String, Value)> {
    let mut event: Value = serde_json::from_slice(bytes).ok()?;
    let had = rename_event(&mut event, id)?;
    Some((event.to_string(), had))
}

/// Set `id` as the event's `event_id` whatever it had; the one it had (`Null` when none), or
/// `None` when the event is not an object.
fn rename_event(event: &mut Value, id: &str) -> Option<Value> {
    Some(event.as_object_mut()?.insert("event_id".into(), Value::from(id)).unwrap_or(Value::Null))
}

/// A guarded event as JSON, refused when it is not JSON or an object in it has a key written
/// twice ([`super::unique_keys`]).
fn parse_guarded(bytes: &[u8]) -> Result<Value, Refusal> {
    let event: Value = serde_json::from_slice(bytes).map_err(|_| Refusal::Malformed)?;
    if !super::unique_keys::has_unique_keys(bytes) {
        return Err(Refusal::RepeatedKey);
    }
    Ok(event)
}

/// Put the server tools into a client tools list (dropping client tools that take a server
/// tool's name); refuse hosted `mcp` tools unless allowed.
fn merge_tools(tools: &mut Value, server_tools: &[Value], guard: &CallGuard<impl Fn(&str) -> bool, impl Fn(&str) -> bool>) -> Result<(Vec<String>, Vec<String>), Refusal> {
    let client_list = match tools.take() {
        Value::Array(list) => list,
        Value::Null => Vec::new(),
        _ => return Err(Refusal::Malformed),
    };
    if !guard.allow_hosted_mcp && client_list.iter().any(|t| t.get("type").and_then(Value::as_str) == Some("mcp")) {
        return Err(Refusal::HostedMcp);
    }
    let mut kept = Vec::with_capacity(client_list.len() + server_tools.len());
    let mut client_tools = Vec::new();
    let mut dropped = Vec::new();
    for tool in client_list {
        match tool.get("name").and_then(Value::as_str) {
            // Reported once per name: each report is an `error` event to the client.
            Some(name) if (guard.is_server_tool)(name) => {
                if !dropped.iter().any(|d| d == name) {
                    dropped.push(name.to_string());
                }
            }
            Some(name) => {
                client_tools.push(name.to_string());
                kept.push(tool);
            }
            // Tools without a name (allowed hosted MCP servers) are the client's business.
            None => kept.push(tool),
        }
    }
    kept.extend(server_tools.iter().cloned());
    *tools = Value::Array(kept);
    Ok((client_tools, dropped))
}

/// The result of merging server tools into a client `session.update`.
#[derive(Debug)]
pub struct MergedUpdate {
    /// The rewritten frame.
    pub frame: String,
    /// The client's own tool names kept (its client-side tools).
    pub client_tools: Vec<String>,
    /// Client tools dropped because their name is a server tool's.
    pub dropped: Vec<String>,
    /// The `event_id` the frame had when voxgate put its own in its place (a `session.update`
    /// read with `own_event_id`); `Null` otherwise.
    pub replaced_event_id: Value,
}

/// Merge server tools into a client `session.update` that sets `session.tools`. Returns `Ok(None)`
/// when the update does not touch tools: the server tools are left as they are.
pub fn merge_session_update(
    bytes: &[u8],
    server_tools: &[Value],
    guard: &CallGuard<impl Fn(&str) -> bool, impl Fn(&str) -> bool>,
) -> Result<Option<MergedUpdate>, Refusal> {
    read_session_update(bytes, server_tools, guard, None)
}

/// [`merge_session_update`]; with `own_event_id` the frame goes with that id in place of the
/// client's (a `session.update` is always forwarded under a stand-in of voxgate's, so that an
/// upstream `error` refusing it names that one update; `session::update_ids`).
pub fn read_session_update(
    bytes: &[u8],
    server_tools: &[Value],
    guard: &CallGuard<impl Fn(&str) -> bool, impl Fn(&str) -> bool>,
    own_event_id: Option<&str>,
) -> Result<Option<MergedUpdate>, Refusal> {
    let mut event = parse_guarded(bytes)?;
    let Some(tools) = event.get_mut("session").and_then(|s| s.get_mut("tools")) else {
        return Ok(None);
    };
    let (client_tools, dropped) = merge_tools(tools, server_tools, guard)?;
    let replaced_event_id = own_event_id.and_then(|id| rename_event(&mut event, id)).unwrap_or_default();
    Ok(Some(MergedUpdate { frame: event.to_string(), client_tools, dropped, replaced_event_id }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    type Predicate = fn(&str) -> bool;

    fn guard(is_server_tool: Predicate) -> CallGuard<Predicate, Predicate> {
        CallGuard { is_server_tool, owns_call: |c| c == "call_srv", allow_hosted_mcp: false }
    }

    #[test]
    fn response_create_keeps_server_tools_and_refuses_server_call_items() {
        let server = vec![json!({"type":"function","name":"a"})];
        let is_a: fn(&str) -> bool = |n| n == "a";
        let empty = br#"{"type":"response.create","response":{"tools":[]}}"#;
        let merged = guard_response_create(empty, &server, &guard(is_a), None).unwrap().unwrap();
        assert!(merged.frame.contains(r#""name":"a""#), "per-response tools cannot remove server tools");
        let output = br#"{"type":"response.create","response":{"input":[{"type":"function_call_output","call_id":"call_srv","output":"{}"}]}}"#;
        assert_eq!(guard_response_create(output, &server, &guard(is_a), None).unwrap_err(), Refusal::ServerCall);
        let by_name = br#"{"type":"response.create","response":{"input":[{"type":"function_call","name":"a","call_id":"x","arguments":"{}"}]}}"#;
        assert_eq!(guard_response_create(by_name, &server, &guard(is_a), None).unwrap_err(), Refusal::ServerCall);
        let plain = br#"{"type":"response.create","response":{"instructions":"hi"}}"#;
        assert!(guard_response_create(plain, &server, &guard(is_a), None).unwrap().is_none());
        // A stand-in id is set when the event has none (tools or not), and only then.
        let named = guard_response_create(plain, &server, &guard(is_a), Some("voxgate_client_1")).unwrap().unwrap();
        let frame: Value = serde_json::from_str(&named.frame).unwrap();
        assert_eq!((frame["event_id"].as_str(), frame["response"]["instructions"].as_str()), (Some("voxgate_client_1"), Some("hi")));
        assert!(named.client_tools.is_empty() && named.dropped.is_empty());
        let own = br#"{"type":"response.create","event_id":"c1","response":{}}"#;
        assert!(guard_response_create(own, &server, &guard(is_a), Some("voxgate_client_1")).unwrap().is_none());
        let with_tools = guard_response_create(empty, &server, &guard(is_a), Some("voxgate_client_2")).unwrap().unwrap();
        assert!(with_tools.frame.contains("voxgate_client_2"));
    }

    #[test]
    fn hosted_mcp_tools_are_refused_unless_allowed() {
        let mcp = br#"{"type":"session.update","session":{"tools":[{"type":"mcp","server_label":"x","server_url":"https://x"}]}}"#;
        let none: fn(&str) -> bool = |_| false;
        assert_eq!(merge_session_update(mcp, &[], &guard(none)).unwrap_err(), Refusal::HostedMcp);
        let allowed = CallGuard { allow_hosted_mcp: true, ..guard(none) };
        assert!(merge_session_update(mcp, &[], &allowed).unwrap().is_some());
        let in_response = br#"{"type":"response.create","response":{"tools":[{"type":"mcp","server_label":"x"}]}}"#;
        assert_eq!(guard_response_create(in_response, &[], &guard(none), None).unwrap_err(), Refusal::HostedMcp);
    }

    #[test]
    fn merge_keeps_client_tools_and_drops_collisions() {
        let update = json!({"type":"session.update","session":{"type":"realtime","instructions":"hi",
            "tools":[{"type":"function","name":"get_weather"},{"type":"function","name":"search_pubmed"}]}});
        let server = vec![json!({"type":"function","name":"search_pubmed","description":"server"})];
        let merged = merge_session_update(update.to_string().as_bytes(), &server, &guard(|n| n == "search_pubmed"))
            .unwrap()
            .unwrap();
        assert_eq!(merged.client_tools, vec!["get_weather"]);
        assert_eq!(merged.dropped, vec!["search_pubmed"]);
        let v: Value = serde_json::from_str(&merged.frame).unwrap();
        let tools = v["session"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[1]["description"], "server");
        assert_eq!(v["session"]["instructions"], "hi");

        // A name given many times is reported once: each report is an `error` event to the
        // client, and 80,000 copies in one frame made 80,000 of them.
        let many: Vec<Value> = (0..10_000).map(|_| json!({"type":"function","name":"search_pubmed"})).collect();
        let flood = json!({"type":"session.update","session":{"tools": many}});
        let merged = merge_session_update(flood.to_string().as_bytes(), &server, &guard(|n| n == "search_pubmed"))
            .unwrap()
            .unwrap();
        assert_eq!(merged.dropped, vec!["search_pubmed"]);
    }

    #[test]
    fn a_rewritten_update_goes_under_voxgates_id() {
        let none: fn(&str) -> bool = |_| false;
        let server = vec![json!({"type": "function", "name": "a"})];
        let id_of = |frame: Value| {
            let merged = read_session_update(frame.to_string().as_bytes(), &server, &guard(none), Some("voxgate_1")).unwrap();
            serde_json::from_str::<Value>(&merged.unwrap().frame).unwrap()["event_id"].clone()
        };
        assert_eq!(id_of(json!({"type": "session.update", "session": {"tools": []}})), "voxgate_1");
        assert_eq!(id_of(json!({"type": "session.update", "event_id": null, "session": {"tools": []}})), "voxgate_1");
        assert_eq!(id_of(json!({"type": "session.update", "event_id": "c1", "session": {"tools": []}})), "voxgate_1", "whatever the client's");
        // Not rewritten, not touched.
        let plain = br#"{"type":"session.update","session":{"instructions":"x"}}"#;
        assert!(read_session_update(plain, &server, &guard(none), Some("voxgate_1")).unwrap().is_none());
    }

    #[test]
    fn update_without_tools_is_left_alone() {
        let update = br#"{"type":"session.update","session":{"instructions":"x"}}"#;
        assert!(merge_session_update(update, &[], &guard(|_| false)).unwrap().is_none());
    }

    #[test]
    fn empty_tools_cannot_remove_server_tools() {
        let update = br#"{"type":"session.update","session":{"tools":[]}}"#;
        let server = vec![json!({"name":"a"})];
        let merged = merge_session_update(update, &server, &guard(|n| n == "a")).unwrap().unwrap();
        assert!(merged.frame.contains("\"a\""));
    }

    #[test]
    fn item_create_exposes_call_fields() {
        let frame = br#"{"type":"conversation.item.create","item":{"type":"function_call_output","call_id":"call_1","output":"{}"}}"#;
        let item = parse_item_create(frame).unwrap().item.unwrap();
        assert_eq!(item.kind.as_deref(), Some("function_call_output"));
        assert_eq!(item.call_id.as_deref(), Some("call_1"));
    }
}
