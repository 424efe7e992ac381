//! MCP servers as realtime tools (CONTRACT §10): every tool an operator allows on a configured
//! Model Context Protocol server is offered to the model as `SERVER__TOOL` and called through the
//! same state machine as a built-in tool (validate → policy → [confirm] → run → audit once).
//!
//! - [`supervisor`]: one task per server that connects (stdio child or Streamable HTTP), lists its
//!   tools, follows `notifications/tools/list_changed` and reconnects with back-off.
//! - [`backoff`]: how long the supervisor waits before trying again, without I/O.
//! - [`liveness`]: the supervisor's `ping` of a connected server, which notices a dead HTTP server.
//! - [`stdio`]: a stdio server's process: its environment (no secrets of voxgate's) and its
//!   process group (killed with the connection).
//! - [`link`]: what the supervisor shares with the tools of its server (the live peer, health,
//!   progress routes) and the rmcp client handler.
//! - [`progress`]: where a server's progress notifications go, including those that come before
//!   their call has routed the token.
//! - [`observed`]: a connection's transport, telling the liveness check and the progress routes
//!   what the server sends as it is read (in order with the answers).
//! - [`adapter`]: an MCP tool as a [`Tool`](crate::tools::Tool), and its effective policy.
//! - [`content`]: an MCP `CallToolResult` turned into a bounded result for the model.
//!
//! # Tools that come and go
//! The built-in catalogue is an immutable [`ToolRegistry`] shared as an `Arc`. MCP tools join it
//! by building a *new* registry (built-ins plus the MCP tools up now) each time a server's tool
//! list changes, published on a `watch` channel; a session takes the current one when it starts
//! and keeps it, so its tool list and its call table agree for its whole life. Tool names stay
//! `&'static str` (built-in tools are written as literals): the only names an MCP tool can have
//! are `SERVER__TOOL` for a tool on the server's `allow` list, a set fixed by the config, so each
//! is interned once at start ([`intern_names`]) and a `list_changed` never allocates a name.

mod adapter;
mod backoff;
mod content;
mod link;
mod liveness;
mod observed;
mod progress;
mod stdio;
mod supervisor;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::config::mcp::McpConfig;
use crate::tools::registry::{RegisteredTool, ToolRegistry};
pub use link::LinkState;
use link::ServerLink;

/// The separator between server and tool in a model-facing name.
const SEPARATOR: &str = "__";

/// The tool catalogue as it is now: built-ins plus the tools of every MCP server that is up.
pub struct McpHub {
    builtin: Arc<ToolRegistry>,
    /// Each server's current tools; rebuilt into `current` under this channel's lock so two
    /// servers changing at once cannot publish a stale catalogue last.
    per_server: watch::Sender<BTreeMap<String, Vec<Arc<RegisteredTool>>>>,
    current: watch::Sender<Arc<ToolRegistry>>,
    links: Vec<Arc<ServerLink>>,
    /// Stops the supervisors (and so every stdio server) when the hub is dropped: after the last
    /// session has drained, since running calls still need their servers during a drain.
    stop: CancellationToken,
}

impl Drop for McpHub {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One server's health, for `/readyz` detail and `GET /admin/tools`.
#[derive(Debug, Clone, Serialize)]
pub struct ServerHealth {
    pub server: String,
    pub transport: &'static str,
    pub state: LinkState,
    /// Allowed tools the server offers now.
    pub tools: usize,
    /// Connections lost since start (each one followed by a restart or reconnect).
    pub restarts: u32,
    /// Why the last connection attempt failed, in general terms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl McpHub {
    /// Start one supervisor per configured server and wait (at most `mcp.connect_timeout_ms`)
    /// until each has connected or failed once; late servers keep connecting in the background.
    /// `names`: [`intern_names`] of the same `config`.
    pub async fn start(config: &McpConfig, names: &ToolNames<'_>, builtin: Arc<ToolRegistry>) -> Arc<Self> {
        Self::start_with(config, names, builtin, liveness::Liveness::default()).await
    }

    /// [`McpHub::start`] with its servers checked at `liveness`'s pace (tests check faster).
    async fn start_with(
        config: &McpConfig,
        names: &ToolNames<'_>,
        builtin: Arc<ToolRegistry>,
        liveness: liveness::Liveness,
    ) -> Arc<Self> {
        // Every allowed name is a server tool name from the start, so a client cannot take one
        // as its own tool while its server is down (or has not offered it yet).
        let builtin = Arc::new(builtin.with_reserved(all_names(names)));
        let (current, _) = watch::channel(builtin.clone());
        let (per_server, _) = watch::channel(BTreeMap::new());
        let links: Vec<Arc<ServerLink>> = config
            .servers
            .iter()
            .map(|(name, server)| {
                Arc::new(ServerLink::new(name, server, names.get(name.as_str()).cloned().unwrap_or_default()))
            })
            .collect();
        let stop = CancellationToken::new();
        let hub = Arc::new(McpHub { builtin, per_server, current, links, stop: stop.clone() });
        for link in &hub.links {
            tokio::spawn(supervisor::supervise(link.clone(), Arc::downgrade(&hub), stop.clone(), liveness));
        }
        let settled = futures::future::join_all(hub.links.iter().map(|link| link.settled()));
        if tokio::time::timeout(Duration::from_millis(config.connect_timeout_ms), settled).await.is_err() {
            tracing::warn!(
                "some MCP servers did not connect within mcp.connect_timeout_ms; they keep trying in the background"
            );
        }
        hub
    }

    /// The catalogue a session (or an admin invocation) starting now should use.
    pub fn registry(&self) -> Arc<ToolRegistry> {
        self.current.borrow().clone()
    }

    /// Where each tool of the current catalogue comes from: `builtin` or the MCP server's name.
    pub fn origin(&self, tool: &str) -> &str {
        self.links.iter().find(|l| l.owns(tool)).map_or("builtin", |l| l.name.as_str())
    }

    pub fn health(&self) -> Vec<ServerHealth> {
        self.links.iter().map(|link| link.health()).collect()
    }

    /// One line per MCP server that is not up, for `/readyz`.
    pub fn readiness_detail(&self) -> String {
        self.health()
            .iter()
            .filter(|h| h.state != LinkState::Up)
            .map(|h| format!("mcp.servers.{}: {}\n", h.server, h.state.as_str()))
            .collect()
    }

    /// Replace one server's tools and publish the new catalogue; returns how many joined. A tool
    /// whose name a built-in or another server's tool already has is left out with a warning
    /// (config validation makes `SERVER__TOOL` names unambiguous, so this is a second line): the
    /// registry would otherwise keep one of the two silently, and calls could reach the wrong
    /// server.
    fn set_server_tools(&self, server: &str, tools: Vec<Arc<RegisteredTool>>) -> usize {
        let mut count = 0;
        self.per_server.send_modify(|all| {
            let taken = |name: &str| {
                self.builtin.get(name).is_some()
                    || all.iter().any(|(other, tools)| other != server && tools.iter().any(|t| t.name() == name))
            };
            let tools: Vec<_> = tools
                .into_iter()
                .filter(|tool| {
                    let free = !taken(tool.name());
                    if !free {
                        tracing::warn!(tool = tool.name(), server, "MCP tool left out: its name is already taken");
                    }
                    free
                })
                .collect();
            count = tools.len();
            all.insert(server.to_string(), tools);
            let registry = self.builtin.with_extra(all.values().flatten().cloned());
            self.current.send_replace(Arc::new(registry));
        });
        count
    }
}

/// The model-facing name (`SERVER__TOOL`) of every allowed tool, by server and then by the
/// server's tool name.
pub type ToolNames<'a> = BTreeMap<&'a str, BTreeMap<String, &'static str>>;

/// Every name of `names`, whether or not its server is up: the tool labels of metrics and spans
/// ([`crate::telemetry::metrics::Metrics::with_tools`]).
pub fn all_names(names: &ToolNames<'_>) -> Vec<&'static str> {
    names.values().flat_map(|tools| tools.values().copied()).collect()
}

/// Each allowed tool's model-facing name, interned once at start.
pub fn intern_names(config: &McpConfig) -> ToolNames<'_> {
    config
        .servers
        .iter()
        .map(|(server, cfg)| {
            let names = cfg
                .allow
                .iter()
                .map(|tool| {
                    let full: &'static str = Box::leak(format!("{server}{SEPARATOR}{tool}").into_boxed_str());
                    (tool.clone(), full)
                })
                .collect();
            (server.as_str(), names)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::mcp::McpServerConfig;

    /// Config validation keeps full names unambiguous; should two servers' tools still share one,
    /// the first to register keeps it and the other is left out, never silently swapped.
    #[tokio::test]
    async fn a_tool_whose_full_name_is_taken_is_left_out() {
        let server = |tool: &str| McpServerConfig {
            // Never starts: the test publishes the tools itself.
            command: vec!["/nonexistent/voxgate-test-server".into()],
            allow: vec![tool.into()],
            ..Default::default()
        };
        let config = McpConfig {
            connect_timeout_ms: 2_000,
            servers: BTreeMap::from([("a".to_string(), server("__b")), ("a_".to_string(), server("_b"))]),
        };
        let names = intern_names(&config);
        let hub = McpHub::start(&config, &names, Arc::new(ToolRegistry::default())).await;
        let schema = Arc::new(serde_json::Map::new());
        let listed =
            |name: &'static str, description: &'static str| rmcp::model::Tool::new(name, description, schema.clone());
        let (a, a_) = (&hub.links[0], &hub.links[1]);
        assert_eq!((a.name.as_str(), a_.name.as_str()), ("a", "a_"));
        let from_a = adapter::register(a, &listed("__b", "from a")).unwrap();
        let from_a_ = adapter::register(a_, &listed("_b", "from a_")).unwrap();
        assert_eq!(from_a.name(), from_a_.name(), "both are a____b");
        assert_eq!(hub.set_server_tools("a", vec![from_a]), 1);
        assert_eq!(hub.set_server_tools("a_", vec![from_a_.clone()]), 0, "taken: left out");
        assert_eq!(hub.registry().get("a____b").unwrap().spec().description, "from a");
        // A re-list of the second server does not take it over either.
        assert_eq!(hub.set_server_tools("a_", vec![from_a_]), 0);
        assert_eq!(hub.registry().get("a____b").unwrap().spec().description, "from a");
    }
}
