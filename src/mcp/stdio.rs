//! A stdio MCP server's process: started with only the environment it needs, in a process group of
//! its own that is killed with its connection, and the connection's transport ([`StdioServer`]).
//!
//! voxgate's environment holds its secrets (`OPENAI_API_KEY`, `VOXGATE_AUTH__ADMIN_TOKEN`, cloud
//! credentials): a server gets [`PASSED_THROUGH`] and its configured `env`, nothing else. A server
//! is often started through a wrapper (`sh -c`, `npx`, `uv run`) whose children do the work; rmcp
//! kills only the process it started, so the whole group is killed ([`ServerProcess`]), else every
//! restart and every stop would leave the real server running.
//!
//! The group's id is the server's pid, which the kernel may hand to a new process once the server
//! has been reaped and nothing else is left in its group. So the group is killed while the server
//! is known to exist (running, or exited and not yet reaped), and only then is the server reaped:
//! this transport replaces rmcp's `TokioChildProcess`, which reaps the server when it closes.

use std::io;
use std::process::Stdio;
use std::time::Duration;

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::config::mcp::McpServerConfig;

/// How long a server has, once its stdin is closed, to exit on its own (the MCP way of ending a
/// stdio connection) before its group is killed. Real servers exit within milliseconds.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How often the grace looks whether the server has exited.
const EXIT_POLL: Duration = Duration::from_millis(20);
/// Bound on reaping the killed server: one stuck in the kernel (a hung disk) is left to tokio's
/// reaper rather than hold up the end of the connection.
const REAP_TIMEOUT: Duration = Duration::from_secs(2);

/// Variables of voxgate's environment a stdio server gets (when set), besides its `env`:
/// - `PATH`: finds the interpreter or launcher (`python`, `npx`, `uv`) as a shell would;
/// - `HOME`: where npm, uv and pip keep caches and per-user config;
/// - `LANG`, `LC_ALL`: the text encoding of the server's I/O (Python chooses UTF-8 from them);
/// - `TMPDIR`: where temporary files go in a container with a read-only root;
/// - `VIRTUAL_ENV`, `PYTHONPATH`, `LD_LIBRARY_PATH`: a server started from a Python venv or a
///   non-system build (conda) finds its packages and libraries;
/// - the proxy (`HTTP_PROXY`, `HTTPS_PROXY`, `NO_PROXY`, either case) and the CA bundle
///   (`SSL_CERT_FILE`, `SSL_CERT_DIR`, `REQUESTS_CA_BUNDLE`, `NODE_EXTRA_CA_CERTS`) of a hospital
///   network: without them `npx` and `uvx` cannot fetch a server, nor a server reach its backend;
/// - `TZ`: a server that reads dates means the clinic's local time, not the container's UTC;
/// - `USER`, `LOGNAME`, `XDG_CACHE_HOME`, `XDG_CONFIG_HOME`, `XDG_DATA_HOME`: where tools that
///   ignore `HOME` keep their caches and config.
///
/// These are the host's plumbing, not voxgate's secrets (a proxy URL may carry the proxy's
/// credentials, which the server needs to go through it). Anything else a server needs goes in its
/// `env` (docs/tools-mcp.md).
const PASSED_THROUGH: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "TZ",
    "USER",
    "LOGNAME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
];

/// Start `config`'s server (`config.command` is not empty: checked at load) with its stderr
/// discarded, since a clinic's server may print patient data there.
pub(super) fn spawn(config: &McpServerConfig) -> io::Result<StdioServer> {
    let Some((program, args)) = config.command.split_first() else {
        return Err(io::Error::other("no command"));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(PASSED_THROUGH.iter().filter_map(|name| Some((name, std::env::var_os(name)?))))
        .envs(config.env.iter().map(|(name, value)| (name, value.expose())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        // A group of its own, led by the server: its id is the server's pid.
        .process_group(0);
    let mut child = command.spawn()?;
    // Just started, the server is unreaped: its pid is there.
    let Some(group) = child.id().and_then(|pid| libc::pid_t::try_from(pid).ok()) else {
        return Err(io::Error::other("the server has no pid"));
    };
    let (stdin, stdout) = (child.stdin.take(), child.stdout.take());
    // From here on the group is killed however this ends.
    let process = ServerProcess { child: Some(child), group };
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err(io::Error::other("the server's stdio is missing"));
    };
    Ok(StdioServer { io: AsyncRwTransport::new_client(stdout, stdin), process })
}

/// A stdio server's connection: MCP messages over its stdin and stdout, and its process. Closing it
/// (the connection ends, fails or voxgate stops) ends the server's stdin, gives the server
/// [`EXIT_GRACE`] to exit, kills its group and reaps it; dropping it (a connection attempt
/// abandoned) kills the group at once.
pub(super) struct StdioServer {
    io: AsyncRwTransport<RoleClient, ChildStdout, ChildStdin>,
    process: ServerProcess,
}

impl StdioServer {
    /// The server's pid (the group's id).
    #[cfg(test)]
    fn id(&self) -> libc::pid_t {
        self.process.group
    }
}

impl Transport<RoleClient> for StdioServer {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.io.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.io.receive()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        // The end of its stdin tells the server to exit. A server that stopped reading leaves a
        // send blocked on its full pipe, holding the writer that closing needs: the close is
        // bounded, and the group is killed either way (which fails that send).
        let closed = tokio::time::timeout(EXIT_GRACE, self.io.close()).await;
        let grace = if closed.is_ok() { EXIT_GRACE } else { Duration::ZERO };
        self.process.stop(grace).await;
        closed.unwrap_or_else(|_| Err(io::Error::new(io::ErrorKind::TimedOut, "the server's stdin could not be closed")))
    }
}

/// A stdio server's process and its group, killed (SIGKILL, as `kill_on_drop` does to the server)
/// before the server is reaped, or when this is dropped with the server unreaped.
struct ServerProcess {
    /// `None` once reaped: from then on the group's id may belong to someone else.
    child: Option<Child>,
    group: libc::pid_t,
}

impl ServerProcess {
    /// Give the server `grace` to exit, kill its group, reap it. Cancelled part-way, the server is
    /// still unreaped and `drop` kills the group.
    async fn stop(&mut self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while self.child.is_some() && !self.exited() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(EXIT_POLL).await;
        }
        let Some(child) = self.child.as_mut() else { return };
        kill_group(self.group);
        if tokio::time::timeout(REAP_TIMEOUT, child.wait()).await.is_err() {
            tracing::warn!("a stopped MCP server could not be reaped in time; left to the runtime's reaper");
        }
        // Reaped (or handed to tokio's reaper when dropped): the group's id is no longer ours.
        self.child = None;
    }

    /// Whether the server has exited, without reaping it: it stays a zombie, so its pid and its
    /// group's id stay reserved until `stop` reaps it.
    fn exited(&self) -> bool {
        let Ok(pid) = libc::id_t::try_from(self.group) else { return true };
        // SAFETY: all-zero bytes are a valid `siginfo_t` (plain integers), and `waitid` writes only
        // into it. `WNOWAIT` leaves the server to be reaped by its `Child`.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let found = libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT | libc::WNOHANG);
            // With WNOHANG a server still running leaves `si_pid` 0; an error (ECHILD) means there
            // is nothing left to wait for.
            found != 0 || info.si_pid() != 0
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if self.child.is_some() {
            kill_group(self.group);
        }
        // Then `child` is dropped: tokio reaps it in the background.
    }
}

/// SIGKILL to every process of `group`. Called only while the group's leader is unreaped, so the id
/// cannot have been given to another process.
fn kill_group(group: libc::pid_t) {
    // A group id is a pid, never 0 or less (`kill(0, …)` would be voxgate's own group).
    if group > 0 {
        // SAFETY: kill(2) touches no memory of ours.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rmcp::ServiceExt;

    use super::*;

    /// A stdio server (a shell script speaking just enough MCP) with a helper in its group: it
    /// writes the helper's pid to `$1/helper.pid`, answers `initialize`, then reads until its stdin
    /// closes and exits, as a well-behaved server does when its client goes; with `$2` = `stays`
    /// it ignores the end of its stdin instead.
    const WITH_A_HELPER: &str = r#"sleep 300 & echo $! > "$1/helper.pid"
read -r line
id=$(printf '%s' "$line" | sed 's/.*"id":\([0-9]*\).*/\1/')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-03-26","capabilities":{},"serverInfo":{"name":"helper","version":"1"}}}\n' "$id"
[ "$2" = stays ] && exec sleep 300
while read -r line; do :; done"#;

    fn server(dir: &std::path::Path, stays: bool) -> McpServerConfig {
        let mode = if stays { "stays" } else { "exits" };
        let script = ["sh", "-c", WITH_A_HELPER, "sh", &dir.display().to_string(), mode].map(String::from);
        McpServerConfig { command: script.to_vec(), ..Default::default() }
    }

    /// Is `pid` a live process (not gone, not a zombie waiting to be reaped)?
    fn alive(pid: u32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"))
    }

    /// Gone from `/proc`: reaped.
    fn reaped(pid: u32) -> bool {
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
    }

    /// Whether `done` holds within 5 s: a signal is delivered, an orphan reaped and a script run
    /// asynchronously.
    async fn soon(done: impl Fn() -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !done() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        done()
    }

    /// The helper's pid, once the script has written it.
    async fn helper(dir: &std::path::Path) -> u32 {
        let read = || std::fs::read_to_string(dir.join("helper.pid")).ok().and_then(|pid| pid.trim().parse().ok());
        assert!(soon(|| read().is_some()).await, "the script did not start its helper");
        read().unwrap_or_default()
    }

    /// A connected client, the server's pid and its helper's.
    async fn connected(dir: &std::path::Path, stays: bool) -> (rmcp::service::RunningService<RoleClient, ()>, u32, u32) {
        let transport = spawn(&server(dir, stays)).unwrap();
        let server = u32::try_from(transport.id()).unwrap();
        let client = tokio::time::timeout(Duration::from_secs(10), ().serve(transport)).await.unwrap().unwrap();
        let helper = helper(dir).await;
        assert!(alive(helper) && alive(server));
        (client, server, helper)
    }

    /// The group must be signalled while its leader is known to exist: by the time the
    /// connection has ended and the server has been reaped, nothing of its group may be left.
    /// Before the fix rmcp reaped the server first and the group was killed only afterwards, when
    /// its id could already be free (no member left) or another group's: the helper was still
    /// running when the server had been reaped.
    #[tokio::test]
    async fn the_group_is_killed_before_the_server_is_reaped() {
        for stays in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (client, server, helper) = connected(dir.path(), stays).await;
            // Ends the connection: the server reads the end of its stdin and exits, or is killed
            // after the grace.
            tokio::time::timeout(Duration::from_secs(15), client.cancel()).await.unwrap().unwrap();
            assert!(reaped(server), "the server was not reaped ({stays})");
            assert!(soon(|| !alive(helper)).await, "the server's helper outlived the connection ({stays})");
        }
    }

    /// A server that stopped reading its stdin, with a request blocked on the full pipe: the send
    /// holds the writer that closing the stdin needs. The close is bounded and the group killed
    /// anyway (before, the close waited for ever and the server and its group were left running).
    #[tokio::test]
    async fn a_server_that_stopped_reading_is_still_killed_when_the_connection_ends() {
        use rmcp::model::{CallToolRequestParams, ClientRequest, Request};
        use rmcp::service::PeerRequestOptions;
        let dir = tempfile::tempdir().unwrap();
        let (client, server, helper) = connected(dir.path(), true).await;
        // Far more than a pipe holds (64 KiB): the write blocks, as the server never reads.
        let mut arguments = serde_json::Map::new();
        arguments.insert("blob".into(), serde_json::Value::String("x".repeat(4 << 20)));
        let request = ClientRequest::CallToolRequest(Request::new(CallToolRequestParams::new("t").with_arguments(arguments)));
        let peer = client.peer().clone();
        let blocked = tokio::spawn(async move { peer.send_request_with_option(request, PeerRequestOptions::no_options()).await.map(drop) });
        // Nothing tells when the write has filled the pipe and blocked (the pipe is the server's):
        // it needs a few scheduler turns, and the test fails on the old close either way once it
        // has (the wait below is not what is tested).
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::time::timeout(Duration::from_secs(10), client.cancel()).await.expect("the connection ended").unwrap();
        assert!(soon(|| reaped(server)).await, "the server was left running");
        assert!(soon(|| !alive(helper)).await, "the server's helper outlived the connection");
        blocked.abort();
    }

    /// A connection given up before it is established (its transport dropped, not closed) kills
    /// the group at once, and the server is still reaped: no zombie per abandoned attempt.
    #[tokio::test]
    async fn a_dropped_transport_kills_the_group_and_leaves_no_zombie() {
        let dir = tempfile::tempdir().unwrap();
        let transport = spawn(&server(dir.path(), true)).unwrap();
        let server = u32::try_from(transport.id()).unwrap();
        let helper = helper(dir.path()).await;
        drop(transport);
        assert!(soon(|| !alive(helper)).await, "the server's helper outlived its transport");
        assert!(soon(|| reaped(server)).await, "the server was left a zombie");
    }
}
