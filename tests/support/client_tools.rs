//! A client that declares a tool under a server tool's name: the proxy drops that definition,
//! tells the client once, and forwards the rest of its update.

use serde_json::{Value, json};

use super::{Client, FakeConn};

/// Send a `session.update` (event `c1`) declaring `get_weather` and a tool named `shadowed`,
/// check the client is told (`voxgate_server_tool_name`, naming `c1`), and return the tools the
/// upstream received: the client's `get_weather` kept, the shadowing definition gone.
pub async fn declare_shadowing_tool(client: &mut Client, up: &mut FakeConn, shadowed: &str) -> Vec<Value> {
    client
        .send_json(json!({"type": "session.update", "event_id": "c1", "session": {"type": "realtime", "tools": [
            {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
            {"type": "function", "name": shadowed, "description": "shadow", "parameters": {"type": "object"}}
        ]}}))
        .await;
    let error = client.until("error").await;
    assert_eq!(error["error"]["code"], "voxgate_server_tool_name");
    assert_eq!(error["error"]["event_id"], "c1");
    let update = up.until("session.update").await;
    let tools = update["session"]["tools"].as_array().expect("the update's tools").clone();
    assert!(tools.iter().any(|t| t["name"] == "get_weather"), "{tools:?}");
    assert!(tools.iter().all(|t| t["description"] != "shadow"), "{tools:?}");
    tools
}
