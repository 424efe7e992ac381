//! `[server]`: the client-facing listener, session limits and timeouts.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::Deserialize;

/// `[server]` (docs/config.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Client-facing HTTP + WebSocket address; port 0 picks a free port (logged as `listening on`).
    pub listen: SocketAddr,
    /// Browser `Origin` allow-list; empty accepts any origin.
    pub allowed_origins: Vec<String>,
    /// Largest client frame accepted; larger ones get an `error` event and are dropped.
    pub max_frame_bytes: usize,
    /// Sessions this process holds at once; more get HTTP 503 before the upgrade.
    pub max_sessions: usize,
    /// Sessions one user (`sub`) may hold at once; more get HTTP 429 before the upgrade.
    pub max_sessions_per_user: usize,
    /// How long running tool calls may take to finish once a drain starts.
    pub drain_timeout_ms: u64,
    /// A client that has not read its frames for this long is closed with 1008.
    pub client_send_timeout_ms: u64,
    /// A session with no frame in either direction for this long is closed (0 = never).
    pub idle_timeout_ms: u64,
    /// A connection must send its whole HTTP request head within this time.
    pub handshake_timeout_ms: u64,
    /// voxgate pings the client this often so dead peers are noticed (0 = never).
    pub ping_interval_ms: u64,
    /// Accept `auth.mode = "none"` on a non-loopback address (a loud warning is still logged).
    pub allow_unauthenticated_public: bool,
    /// This instance's name on logs, spans and audit records; unset = the hostname.
    pub instance_id: Option<String>,
    /// Proxies whose `X-Forwarded-For` names the client address recorded in audit records:
    /// addresses, or networks (an ingress controller's pods change addresses within theirs).
    #[serde(deserialize_with = "addresses_or_networks")]
    pub trusted_proxies: Vec<IpNet>,
    /// Frames per second one client may send; more are dropped with an `error` event (0 = no limit).
    pub max_client_frames_per_s: u32,
    /// Threads that run client connections and their sessions, each connection pinned to one
    /// (0 = one per CPU the process may use).
    pub session_threads: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            allowed_origins: Vec::new(),
            max_frame_bytes: 4 * 1024 * 1024,
            max_sessions: 10_000,
            max_sessions_per_user: 20,
            drain_timeout_ms: 10_000,
            client_send_timeout_ms: 5_000,
            idle_timeout_ms: 30 * 60 * 1000,
            handshake_timeout_ms: 10_000,
            ping_interval_ms: 20_000,
            allow_unauthenticated_public: false,
            instance_id: None,
            trusted_proxies: Vec::new(),
            max_client_frames_per_s: 500,
            session_threads: 0,
        }
    }
}

impl ServerConfig {
    /// `server.instance_id`, or the hostname when unset.
    pub fn instance_id(&self) -> String {
        self.instance_id.clone().unwrap_or_else(crate::cluster::hostname)
    }
}

/// `server.trusted_proxies` entries: an address (`10.0.0.1`, `::1`: that host alone) or a network
/// (`10.42.0.0/16`).
fn addresses_or_networks<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<IpNet>, D::Error> {
    Vec::<String>::deserialize(deserializer)?
        .iter()
        .map(|entry| {
            let entry = entry.trim();
            entry
                .parse::<IpNet>()
                .map(|net| net.trunc())
                // An IPv4 host written IPv4-mapped (`::ffff:10.0.0.1`) is matched as IPv4, like peers.
                .or_else(|_| entry.parse::<IpAddr>().map(|ip| IpNet::from(ip.to_canonical())))
                .map_err(|_| serde::de::Error::custom(format!("{entry:?} is not an IP address or network")))
        })
        .collect()
}
