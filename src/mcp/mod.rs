//! MCP servers as realtime tools (CONTRACT §10): every tool an operator allows on a configured
//! Model Context Protocol server is offered to the model as `SERVER__TOOL` and called through the
//! same state machine as a built-in tool (validate → policy → [confirm] → run → audit once).
//!
//! - [`supervisor`]: one task per server that connects (stdio child or Streamable HTTP), lists its
//!   tools, follows `notifications/tools/list_changed` and reconnects with back-off.
//! - [`backoff`]: how long the supervisor waits before trying again, without I/O.
//! - [`link`]: what the supervisor shares with the tools of its server (the live peer, health,
//!   progress routes) and the rmcp client handler.
//! - [`progress`]: where a server's progress notifications go, including those that come before
//!   their call has routed the token.
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
mod progress;
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
            tokio::spawn(supervisor::supervise(link.clone(), Arc::downgrade(&hub), stop.clone()));
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

    /// Replace one server's tools and publish the new catalogue.
    fn set_server_tools(&self, server: &str, tools: Vec<Arc<RegisteredTool>>) {
        self.per_server.send_modify(|all| {
            all.insert(server.to_string(), tools);
            let registry = self.builtin.with_extra(all.values().flatten().cloned());
            self.current.send_replace(Arc::new(registry));
        });
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
