//! What one MCP server's supervisor shares with that server's tools: the live connection (absent
//! while it is down) with where the progress notifications of calls made on it go, and the
//! server's health. Also the rmcp client handler that receives one connection's notifications.

use std::collections::BTreeMap;

use std::sync::Arc;

use rmcp::service::{NotificationContext, Peer, RoleClient};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use crate::config::mcp::McpServerConfig;
use super::progress::ProgressRoutes;

/// Where a server's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    /// The first connection attempt has not finished yet.
    Starting,
    Up,
    /// Not connected; the supervisor retries with back-off.
    Down,
}

impl LinkState {
    pub fn as_str(self) -> &'static str {
        match self {
            LinkState::Starting => "starting",
            LinkState::Up => "up",
            LinkState::Down => "down",
        }
    }
}

#[derive(Debug, Clone)]
pub(super) struct Health {
    pub state: LinkState,
    pub tools: usize,
    pub restarts: u32,
    pub last_error: Option<String>,
}

/// A live connection to the server.
#[derive(Clone)]
pub(super) struct Connection {
    pub peer: Peer<RoleClient>,
    /// Running calls' progress routes, by the progress token of their request. Per connection:
    /// rmcp numbers tokens afresh on each, so a token is some other call's on the next one.
    pub progress: Arc<ProgressRoutes>,
}

pub(super) struct ServerLink {
    pub name: String,
    pub config: McpServerConfig,
    /// The server's allowed tool names → their interned model-facing names.
    pub names: BTreeMap<String, &'static str>,
    /// The connection, `None` while down; tools read it at call time.
    pub peer: watch::Sender<Option<Connection>>,
    pub health: watch::Sender<Health>,
}

impl ServerLink {
    pub fn new(name: &str, config: &McpServerConfig, names: BTreeMap<String, &'static str>) -> Self {
        let health = Health { state: LinkState::Starting, tools: 0, restarts: 0, last_error: None };
        Self {
            name: name.to_string(),
            config: config.clone(),
            names,
            peer: watch::channel(None).0,
            health: watch::channel(health).0,
        }
    }

    pub fn transport(&self) -> &'static str {
        if self.config.url.is_some() { "streamable_http" } else { "stdio" }
    }

    /// Is `tool` (a model-facing name) one of this server's?
    pub fn owns(&self, tool: &str) -> bool {
        self.names.values().any(|n| *n == tool)
    }

    /// The live connection, waiting up to `grace` for one that is being re-established.
    pub async fn connected(&self, grace: std::time::Duration) -> Option<Connection> {
        let mut rx = self.peer.subscribe();
        match tokio::time::timeout(grace, rx.wait_for(Option::is_some)).await {
            Ok(Ok(peer)) => peer.clone(),
            _ => None,
        }
    }

    /// Resolves once the first connection attempt has finished, either way.
    pub async fn settled(&self) {
        let mut rx = self.health.subscribe();
        let _ = rx.wait_for(|h| h.state != LinkState::Starting).await;
    }

    pub fn health(&self) -> super::ServerHealth {
        let h = self.health.borrow().clone();
        super::ServerHealth {
            server: self.name.clone(),
            transport: self.transport(),
            state: h.state,
            tools: h.tools,
            restarts: h.restarts,
            last_error: h.last_error,
        }
    }
}

/// Receives the server's notifications for one connection. Not its progress: that is delivered as
/// the transport reads it ([`Observed`](super::observed::Observed)), in order with the answers.
pub(super) struct LinkHandler {
    /// Wakes the supervisor to list the tools again; a full channel already holds a wake-up.
    pub list_changed: mpsc::Sender<()>,
}

impl rmcp::ClientHandler for LinkHandler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.list_changed.try_send(());
    }
}
