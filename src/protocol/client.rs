//! The client events voxgate reads: `session.update` (server tools are merged in and guarded),
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
}

pub fn parse_item_create(bytes: &[u8]) -> Result<ItemCreate<'_>, FrameError> {
    serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)
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
}

/// Merge server tools into a client `session.update` that sets `session.tools`. Returns `Ok(None)`
/// when the update does not touch tools: it is then forwarded unchanged.
pub fn merge_session_update(
    bytes: &[u8],
    server_tools: &[Value],
    is_server_tool: impl Fn(&str) -> bool,
) -> Result<Option<MergedUpdate>, FrameError> {
    let mut event: Value = serde_json::from_slice(bytes).map_err(|_| FrameError::NotJson)?;
    let Some(tools) = event.get_mut("session").and_then(|s| s.get_mut("tools")) else {
        return Ok(None);
    };
    let client_list = match tools.take() {
        Value::Array(list) => list,
        Value::Null => Vec::new(),
        _ => return Err(FrameError::NotJson),
    };
    let mut kept = Vec::with_capacity(client_list.len() + server_tools.len());
    let mut client_tools = Vec::new();
    let mut dropped = Vec::new();
    for tool in client_list {
        match tool.get("name").and_then(Value::as_str) {
            Some(name) if is_server_tool(name) => dropped.push(name.to_string()),
            Some(name) => {
                client_tools.push(name.to_string());
                kept.push(tool);
            }
            // Tools without a name (e.g. MCP servers) are the client's business.
            None => kept.push(tool),
        }
    }
    kept.extend(server_tools.iter().cloned());
    *tools = Value::Array(kept);
    Ok(Some(MergedUpdate { frame: event.to_string(), client_tools, dropped }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_keeps_client_tools_and_drops_collisions() {
        let update = json!({"type":"session.update","session":{"type":"realtime","instructions":"hi",
            "tools":[{"type":"function","name":"get_weather"},{"type":"function","name":"search_pubmed"}]}});
        let server = vec![json!({"type":"function","name":"search_pubmed","description":"server"})];
        let merged = merge_session_update(update.to_string().as_bytes(), &server, |n| n == "search_pubmed")
            .unwrap()
            .unwrap();
        assert_eq!(merged.client_tools, vec!["get_weather"]);
        assert_eq!(merged.dropped, vec!["search_pubmed"]);
        let v: Value = serde_json::from_str(&merged.frame).unwrap();
        let tools = v["session"]["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 2);
        assert_eq!(tools[1]["description"], "server");
        assert_eq!(v["session"]["instructions"], "hi");
    }

    #[test]
    fn update_without_tools_is_left_alone() {
        let update = br#"{"type":"session.update","session":{"instructions":"x"}}"#;
        assert!(merge_session_update(update, &[], |_| false).unwrap().is_none());
    }

    #[test]
    fn empty_tools_cannot_remove_server_tools() {
        let update = br#"{"type":"session.update","session":{"tools":[]}}"#;
        let server = vec![json!({"name":"a"})];
        let merged = merge_session_update(update, &server, |n| n == "a").unwrap().unwrap();
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
