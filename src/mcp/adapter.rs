//! One MCP tool as a voxgate [`Tool`]: its spec and effective policy from the server's listing and
//! `[mcp.servers.NAME.policy.TOOL]`, and a call that goes to whichever connection is live.
//!
//! Defaults (docs/tools-mcp.md): confirmation on unless the server annotates the tool
//! `readOnlyHint: true` (config wins either way); `phi` on, so arguments stay out of the audit log
//! and results taint the session until the operator says the tool handles no patient data;
//! `third_party` off. A call abandoned by voxgate — its timeout, the session closing, a drain — is
//! cancelled on the server with `notifications/cancelled`.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CancelledNotificationParam, ClientRequest, Request, RequestId, ServerResult};
use rmcp::service::{Peer, PeerRequestOptions, RoleClient, ServiceError};
use serde_json::{Map, Value};

use super::content;
use super::link::ServerLink;
use crate::tools::registry::{RegisteredTool, ToolPolicy};
use crate::tools::{
    CallContext, Category, DEFAULT_TOOL_TIMEOUT, Risk, Tool, ToolError, ToolOutput, ToolSpec, progress,
};

/// Calls per minute per user when the config sets none.
const DEFAULT_RATE_PER_MIN: u32 = 30;
/// Longest description passed to the model, in characters.
const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Largest `inputSchema` accepted, serialized: it goes upstream in every `session.update` and each
/// session keeps its own copy, so a server must not be able to make that arbitrarily large. 64 KiB
/// leaves room for large real ones (FHIR search tools with long enums).
const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// How long a call waits for a server that is reconnecting before it fails.
const RECONNECT_GRACE: Duration = Duration::from_secs(3);

pub(super) struct McpTool {
    spec: ToolSpec,
    /// The tool's name on its server.
    remote: String,
    link: Arc<ServerLink>,
}

/// The registry entry for an allowed tool of `link`'s server, or `None` when the tool is not on
/// the allow-list or its schema is too large or does not compile (a warning names it).
pub(super) fn register(link: &Arc<ServerLink>, listed: &rmcp::model::Tool) -> Option<Arc<RegisteredTool>> {
    let name = *link.names.get(listed.name.as_ref())?;
    let schema_bytes = serde_json::to_vec(&*listed.input_schema).map_or(usize::MAX, |json| json.len());
    if schema_bytes > MAX_SCHEMA_BYTES {
        tracing::warn!(tool = name, server = %link.name, bytes = schema_bytes, limit = MAX_SCHEMA_BYTES, "MCP tool left out: its input schema is too large");
        return None;
    }
    let config = link.config.policy.get(listed.name.as_ref()).cloned().unwrap_or_default();
    let read_only = listed.annotations.as_ref().and_then(|a| a.read_only_hint).unwrap_or(false);
    let requires_confirmation = config.confirm.unwrap_or(!read_only);
    let timeout = config.timeout_ms.map_or(DEFAULT_TOOL_TIMEOUT, Duration::from_millis);
    let rate_limit_per_minute = config.rate_per_min.unwrap_or(DEFAULT_RATE_PER_MIN);
    let description = listed
        .description
        .as_deref()
        .or(listed.title.as_deref())
        .map(|d| d.chars().take(MAX_DESCRIPTION_CHARS).collect())
        .unwrap_or_else(|| format!("The {} tool of the {} server.", listed.name, link.name));
    let spec = ToolSpec {
        name,
        description,
        parameters: Value::Object((*listed.input_schema).clone()),
        category: Category::Mcp,
        phi: config.phi.unwrap_or(true),
        risk: if read_only && !requires_confirmation { Risk::Low } else { Risk::Medium },
        requires_confirmation,
        third_party: config.third_party.unwrap_or(false),
        rate_limit_per_minute,
        timeout,
    };
    let policy =
        ToolPolicy { rate_limit_per_minute, timeout, requires_confirmation, roles: config.roles.unwrap_or_default() };
    let tool = McpTool { spec, remote: listed.name.to_string(), link: link.clone() };
    match RegisteredTool::new(Arc::new(tool), policy) {
        Ok(registered) => Some(Arc::new(registered)),
        Err(err) => {
            tracing::warn!(tool = name, server = %link.name, error = %err, "MCP tool left out: its input schema does not compile");
            None
        }
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// Everything the call would send, for PHI screening of `third_party` tools.
    fn outbound_text(&self, args: &Value) -> Option<String> {
        let mut strings = Vec::new();
        crate::policy::screening::collect_strings(args, &mut strings);
        Some(strings.join(" "))
    }

    async fn call(&self, args: Value, _ctx: CallContext) -> Result<ToolOutput, ToolError> {
        let unavailable =
            || ToolError::Backend(format!("The {} tool server is unavailable; try again later.", self.link.name));
        let connection = self.link.connected(RECONNECT_GRACE).await.ok_or_else(unavailable)?;
        let peer = connection.peer;
        let arguments = match args {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        let params = CallToolRequestParams::new(self.remote.clone()).with_arguments(arguments);
        let request = ClientRequest::CallToolRequest(Request::new(params));
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|_| unavailable())?;
        let mut cancel = CancelOnDrop::new(&peer, handle.id.clone());
        // Routed even when the client wants no progress, so what came early is claimed.
        let _progress = connection.progress.route(handle.progress_token.clone(), progress::current());
        let answer = handle.await_response().await;
        cancel.disarm();
        match answer {
            Ok(ServerResult::CallToolResult(result)) => content::to_output(result),
            Ok(_) => Err(ToolError::Backend(format!("The {} tool server answered out of protocol.", self.link.name))),
            Err(ServiceError::McpError(err)) => {
                tracing::warn!(tool = self.spec.name, code = err.code.0, "MCP server refused the call");
                Err(ToolError::Backend(format!("The {} tool server refused the call.", self.link.name)))
            }
            Err(_) => Err(unavailable()),
        }
    }
}

/// Tells the server to stop when voxgate stops waiting (timeout, session closed, drain, a listing's
/// time bound): the request's future is dropped with the request still open. Sending the
/// cancellation also takes the request out of rmcp's pending responses, where it would otherwise
/// stay until the server answers.
pub(super) struct CancelOnDrop {
    peer: Peer<RoleClient>,
    id: Option<RequestId>,
}

impl CancelOnDrop {
    pub(super) fn new(peer: &Peer<RoleClient>, id: RequestId) -> Self {
        Self { peer: peer.clone(), id: Some(id) }
    }

    /// The answer came: nothing to cancel.
    pub(super) fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.peer.clone();
        // Drop cannot await; the notification is sent from a task of its own.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let reason = Some("voxgate stopped waiting for the result".to_string());
                let _ = peer.notify_cancelled(CancelledNotificationParam::new(Some(id), reason)).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::config::mcp::McpServerConfig;

    fn link() -> Arc<ServerLink> {
        let names = BTreeMap::from([("lookup".to_string(), "lab__lookup")]);
        Arc::new(ServerLink::new("lab", &McpServerConfig::default(), names))
    }

    fn tool(schema: Value) -> rmcp::model::Tool {
        let Value::Object(schema) = schema else { panic!("not an object") };
        rmcp::model::Tool::new("lookup", "Look something up.", Arc::new(schema))
    }

    /// Every session sends the schema upstream and keeps it: a server must not be able to make
    /// that arbitrarily large.
    #[test]
    fn a_schema_larger_than_the_bound_leaves_the_tool_out() {
        let small = json!({"type": "object", "properties": {"q": {"type": "string"}}});
        assert!(register(&link(), &tool(small)).is_some());
        let padding = "x".repeat(MAX_SCHEMA_BYTES);
        let large = json!({"type": "object", "properties": {"q": {"type": "string", "description": padding}}});
        assert!(register(&link(), &tool(large)).is_none());
    }
}
