//! Is a connected MCP server still there? A stdio server that dies ends its connection by itself,
//! but rmcp's Streamable HTTP client keeps its worker running while every request fails (and
//! reconnects its event stream forever), so a dead HTTP server would stay `up` with its tools in
//! the catalogue. The supervisor therefore pings each connected server every [`Liveness::every`]
//! (MCP `ping`, answered by every server) and treats two pings in a row that fail, or take longer
//! than [`Liveness::timeout`], as a lost connection: the server's tools leave the catalogue and it
//! is reconnected with the usual back-off. One lost request (a proxy's hiccup) does not end the
//! connection and the calls running on it. An error answer ("method not found" from a server
//! without `ping`) is an answer: the server is there.
//!
//! A server that handles one request at a time cannot answer a ping while a long call runs; it
//! is not dropped (and the call with it) for a slow ping while calls are running. A call that
//! hangs ends at its own timeout, and the next ping decides.

use std::time::Duration;

use rmcp::model::{ClientRequest, PingRequest};
use rmcp::service::{Peer, RoleClient, ServiceError};

/// How often, and how patiently, the supervisor checks a connected server.
#[derive(Debug, Clone, Copy)]
pub(super) struct Liveness {
    pub every: Duration,
    pub timeout: Duration,
}

impl Default for Liveness {
    /// A dead server leaves the catalogue within ~30 s (pings that fail) to ~40 s (pings that hang);
    /// a ping every 15 s costs nothing.
    fn default() -> Self {
        Self { every: Duration::from_secs(15), timeout: Duration::from_secs(10) }
    }
}

/// Pings in a row not answered before the connection counts as lost.
pub(super) const MISSES: u32 = 2;

/// How a server took a `ping`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ping {
    Answered,
    /// The request failed: the connection is broken.
    Failed,
    /// No answer within [`Liveness::timeout`].
    Late,
}

impl Ping {
    /// Pings missed in a row after this one, `missed` before it. A late answer while calls run
    /// is not a miss: a server that handles one request at a time is busy, not gone.
    pub fn missed_after(self, missed: u32, calls_running: bool) -> u32 {
        match self {
            Ping::Answered => 0,
            Ping::Late if calls_running => missed,
            Ping::Failed | Ping::Late => missed + 1,
        }
    }
}

impl Liveness {
    /// Send the server a `ping`.
    pub async fn ping(&self, peer: &Peer<RoleClient>) -> Ping {
        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
        match tokio::time::timeout(self.timeout, ping).await {
            Ok(Ok(_) | Err(ServiceError::McpError(_) | ServiceError::UnexpectedResponse)) => Ping::Answered,
            Ok(Err(_)) => Ping::Failed,
            Err(_) => Ping::Late,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::Arc;

    use super::*;
    use crate::config::mcp::{McpConfig, McpServerConfig};
    use crate::mcp::{LinkState, McpHub};
    use crate::tools::registry::ToolRegistry;

    /// The lab server of the integration tests (tests/mcp/lab_server.py) over Streamable HTTP, on
    /// a free port; returns the process and its MCP URL.
    fn http_lab(dir: &std::path::Path) -> (std::process::Child, String) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = std::env::var_os("VOXGATE_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".venv-test/bin/python"));
        let mut child = Command::new(python)
            .arg(root.join("tests/mcp/lab_server.py"))
            .arg("--http")
            .env("LAB_DIR", dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test venv's python (scripts/test makes it)");
        let stdout = child.stdout.take().unwrap();
        let port = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|line| line.strip_prefix("listening on ").map(|p| p.trim().to_string()))
            .expect("the HTTP MCP server did not start");
        (child, format!("http://127.0.0.1:{port}/mcp"))
    }

    #[test]
    fn a_connection_is_lost_after_two_misses_in_a_row_not_one() {
        let after = |pings: &[Ping], calls_running: bool| pings.iter().fold(0, |m, p| p.missed_after(m, calls_running));
        assert!(after(&[Ping::Failed], false) < MISSES, "one lost request is not a lost server");
        assert!(after(&[Ping::Failed, Ping::Answered, Ping::Late], false) < MISSES, "an answer resets the count");
        assert!(after(&[Ping::Failed, Ping::Late], false) >= MISSES);
        assert!(after(&[Ping::Late, Ping::Late, Ping::Late], true) < MISSES, "busy with a call");
        assert!(after(&[Ping::Failed, Ping::Failed], true) >= MISSES, "a failure is a failure, calls or not");
    }

    /// Real server, real time: the bug was that nothing noticed.
    #[tokio::test]
    async fn a_dead_http_server_goes_down_and_its_tools_leave_the_catalogue() {
        let dir = tempfile::tempdir().unwrap();
        let (mut server, url) = http_lab(dir.path());
        let config = McpConfig {
            connect_timeout_ms: 20_000,
            servers: BTreeMap::from([(
                "hlab".to_string(),
                McpServerConfig { url: Some(url), allow: vec!["lookup_result".into()], ..Default::default() },
            )]),
        };
        let names = crate::mcp::intern_names(&config);
        let liveness = Liveness { every: Duration::from_millis(300), timeout: Duration::from_secs(1) };
        let hub = McpHub::start_with(&config, &names, Arc::new(ToolRegistry::default()), liveness).await;
        assert_eq!(hub.health()[0].state, LinkState::Up);
        assert!(hub.registry().get("hlab__lookup_result").is_some());

        // Gone without a word (a crash, a pulled cable).
        server.kill().unwrap();
        server.wait().unwrap();
        let killed = tokio::time::Instant::now();
        while hub.health()[0].state == LinkState::Up || hub.registry().get("hlab__lookup_result").is_some() {
            // Two misses take ~2.6 s here; the bug was "never", so the bound is loose for a loaded CI.
            assert!(killed.elapsed() < Duration::from_secs(15), "still up 15 s after the server died");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(hub.health()[0].state, LinkState::Down);
        assert!(hub.health()[0].restarts >= 1);
    }
}
