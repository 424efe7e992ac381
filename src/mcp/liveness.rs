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
//! hangs ends at its own timeout, and the next ping decides. Nor is a server dropped that answers
//! calls while a ping waits, whether or not a call is still running when the ping times out: its
//! connection's transport counts the server's answers ([`Answers`]), and an answer is an answer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{ClientRequest, JsonRpcMessage, NumberOrString, PingRequest, RequestId};
use rmcp::service::{Peer, RoleClient, RxJsonRpcMessage, ServiceError, TxJsonRpcMessage};

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
    /// Send the server a `ping`; `answers`: its connection's. A late ping counts as answered if the
    /// server answered other requests meanwhile.
    pub async fn ping(&self, peer: &Peer<RoleClient>, answers: &Answers) -> Ping {
        let before = answers.count();
        let ping = peer.send_request(ClientRequest::PingRequest(PingRequest::default()));
        match tokio::time::timeout(self.timeout, ping).await {
            Ok(Ok(_) | Err(ServiceError::McpError(_) | ServiceError::UnexpectedResponse)) => Ping::Answered,
            Ok(Err(_)) => Ping::Failed,
            Err(_) if answers.count() != before => Ping::Answered,
            Err(_) => Ping::Late,
        }
    }
}

/// Pings whose ids are remembered so that their late answers are not counted; older ones are
/// forgotten (a server that never answers pings would otherwise grow the list).
const PINGS_REMEMBERED: usize = 4;

/// The answers one connection's server has sent to voxgate's requests other than `ping`, shared by
/// its transport ([`Observed`](super::observed::Observed)) and the supervisor's pings. A ping's own late answer is
/// left out: it would otherwise make a server that takes longer than the next ping to answer one
/// count as answering.
#[derive(Debug, Default, Clone)]
pub(super) struct Answers(Arc<AnswersInner>);

#[derive(Debug, Default)]
struct AnswersInner {
    count: AtomicU64,
    pings: Mutex<VecDeque<RequestId>>,
}

impl Answers {
    fn count(&self) -> u64 {
        self.0.count.load(Ordering::Relaxed)
    }

    /// A message on its way to the server ([`Observed`](super::observed::Observed) tells).
    pub fn sent(&self, message: &TxJsonRpcMessage<RoleClient>) {
        if let JsonRpcMessage::Request(request) = message
            && matches!(request.request, ClientRequest::PingRequest(_))
        {
            let mut pings = self.0.pings.lock().unwrap_or_else(PoisonError::into_inner);
            if pings.len() == PINGS_REMEMBERED {
                pings.pop_front();
            }
            pings.push_back(request.id.clone());
        }
    }

    /// A message from the server ([`Observed`](super::observed::Observed) tells).
    pub fn received(&self, message: &RxJsonRpcMessage<RoleClient>) {
        // Results only: rmcp makes up error answers of its own when a connection breaks.
        let JsonRpcMessage::Response(response) = message else { return };
        let mut pings = self.0.pings.lock().unwrap_or_else(PoisonError::into_inner);
        match pings.iter().position(|id| answers_ping(id, &response.id)) {
            Some(ping) => {
                pings.remove(ping);
            }
            None => {
                self.0.count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Is `answer` the answer to ping `ping`? As rmcp matches answers to requests: the same id, or a
/// numeric id answered as its decimal string (`7` as `"7"`), which some servers send back.
fn answers_ping(ping: &RequestId, answer: &RequestId) -> bool {
    ping == answer
        || matches!((ping, answer), (NumberOrString::Number(n), NumberOrString::String(s)) if s.parse::<i64>() == Ok(*n))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_ping_answered_with_its_id_as_a_string_is_its_answer() {
        use super::{NumberOrString, answers_ping};
        let seven = NumberOrString::Number(7);
        assert!(answers_ping(&seven, &NumberOrString::Number(7)));
        assert!(answers_ping(&seven, &NumberOrString::String("7".into())));
        assert!(!answers_ping(&seven, &NumberOrString::String("8".into())));
        assert!(!answers_ping(&seven, &NumberOrString::Number(8)));
        assert!(answers_ping(&NumberOrString::String("p".into()), &NumberOrString::String("p".into())));
    }

    use std::collections::BTreeMap;
    use std::io::{BufRead, BufReader};
    use std::path::PathBuf;
    use std::process::{Command, Stdio};
    use std::sync::Arc;

    use super::*;
    use crate::config::mcp::{McpConfig, McpServerConfig};
    use crate::mcp::{LinkState, McpHub};
    use crate::tools::registry::ToolRegistry;
    use crate::tools::{ToolError, ToolOutput};

    /// The lab server of the integration tests (tests/mcp/lab_server.py) over Streamable HTTP, on
    /// a free port, taking `ping` as `LAB_PING` says ("" answers at once); returns the process
    /// and its MCP URL.
    fn http_lab(dir: &std::path::Path, ping: &str) -> (std::process::Child, String) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = std::env::var_os("VOXGATE_TEST_PYTHON")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".venv-test/bin/python"));
        let mut child = Command::new(python)
            .arg(root.join("tests/mcp/lab_server.py"))
            .arg("--http")
            .env("LAB_DIR", dir)
            .env("LAB_PING", ping)
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

    /// A hub with the HTTP lab server at `url` as `hlab`, pinged every 300 ms and given 1 s to
    /// answer.
    async fn fast_checked_hub(url: String) -> Arc<McpHub> {
        let allow = vec!["lookup_result".into(), "busy".into()];
        let config = McpConfig {
            connect_timeout_ms: 20_000,
            servers: BTreeMap::from([(
                "hlab".to_string(),
                McpServerConfig { url: Some(url), allow, ..Default::default() },
            )]),
        };
        let names = crate::mcp::intern_names(&config);
        let liveness = Liveness { every: Duration::from_millis(300), timeout: Duration::from_secs(1) };
        let hub = McpHub::start_with(&config, &names, Arc::new(ToolRegistry::default()), liveness).await;
        assert_eq!(hub.health()[0].state, LinkState::Up);
        hub
    }

    /// Call `tool` (a catalogue name) with `args`; fails the test if the tool left the catalogue.
    async fn call(hub: &McpHub, tool: &str, args: serde_json::Value) -> Result<ToolOutput, ToolError> {
        let tool = hub.registry().get(tool).expect("the tool is in the catalogue").tool.clone();
        tool.call(args, crate::tools::test_support::ctx()).await
    }

    async fn lookup(hub: &McpHub) -> Result<ToolOutput, ToolError> {
        call(hub, "hlab__lookup_result", serde_json::json!({"order_id": "A1"})).await
    }

    /// Still up, never reconnected.
    fn assert_never_dropped(hub: &McpHub) {
        let health = &hub.health()[0];
        assert_eq!((health.state, health.restarts), (LinkState::Up, 0), "dropped: {:?}", health.last_error);
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
        let (mut server, url) = http_lab(dir.path(), "");
        let hub = fast_checked_hub(url).await;
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

    /// MCP servers need not implement `ping`: "method not found" is an answer.
    #[tokio::test]
    async fn a_server_that_answers_ping_with_an_error_stays_up() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, url) = http_lab(dir.path(), "missing");
        let hub = fast_checked_hub(url).await;
        // Some six pings; two misses would drop it after ~0.6 s.
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_never_dropped(&hub);
        lookup(&hub).await.expect("the server answers calls");
    }

    /// A server that handles one request at a time cannot answer pings during a long call: the
    /// pings are late, and neither the server nor the call is dropped for it.
    #[tokio::test]
    async fn late_pings_during_a_long_call_drop_neither_the_server_nor_the_call() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, url) = http_lab(dir.path(), "");
        let hub = fast_checked_hub(url).await;
        // 3 s on the server's event loop: about three pings late in a row.
        call(&hub, "hlab__busy", serde_json::json!({"seconds": 3.0})).await.expect("the long call completes");
        assert_never_dropped(&hub);
    }

    /// Pings answered late (here after 1.5 s, the timeout is 1 s) while the server answers calls:
    /// it is there, so it stays up. Before the fix a late ping counted as a miss unless a call was
    /// running at the very moment it timed out, so short calls did not save the server.
    #[tokio::test]
    async fn late_pings_while_the_server_answers_calls_do_not_drop_it() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, url) = http_lab(dir.path(), "slow");
        let hub = fast_checked_hub(url).await;
        let begun = tokio::time::Instant::now();
        // Short calls, one every ~100 ms, across three ping timeouts.
        while begun.elapsed() < Duration::from_millis(3500) {
            assert_never_dropped(&hub);
            lookup(&hub).await.expect("the server answers calls");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_never_dropped(&hub);
    }

    /// A server that answers nothing but late pings is still dropped: each ping's answer comes
    /// while the next one waits, and is not taken for an answer to something else.
    #[tokio::test]
    async fn a_server_that_only_answers_pings_late_goes_down() {
        let dir = tempfile::tempdir().unwrap();
        let (_server, url) = http_lab(dir.path(), "slow");
        let hub = fast_checked_hub(url).await;
        let begun = tokio::time::Instant::now();
        while hub.health()[0].state == LinkState::Up {
            // Two misses take ~2.3 s here.
            assert!(begun.elapsed() < Duration::from_secs(15), "still up after 15 s of late pings");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(hub.health()[0].last_error.as_deref(), Some("the server stopped answering"));
    }
}
