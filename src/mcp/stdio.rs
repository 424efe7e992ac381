//! A stdio MCP server's process: started with only the environment it needs, in a process group of
//! its own that is killed with its connection.
//!
//! voxgate's environment holds its secrets (`OPENAI_API_KEY`, `VOXGATE_AUTH__ADMIN_TOKEN`, cloud
//! credentials): a server gets [`PASSED_THROUGH`] and its configured `env`, nothing else. A server
//! is often started through a wrapper (`sh -c`, `npx`, `uv run`) whose children do the work; rmcp
//! kills only the process it started, so the whole group is killed too ([`ProcessGroup`]), else
//! every restart and every stop would leave the real server running.

use std::process::Stdio;

use rmcp::transport::TokioChildProcess;

use crate::config::mcp::McpServerConfig;

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
pub(super) fn spawn(config: &McpServerConfig) -> std::io::Result<(TokioChildProcess, ProcessGroup)> {
    let Some((program, args)) = config.command.split_first() else {
        return Err(std::io::Error::other("no command"));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .env_clear()
        .envs(PASSED_THROUGH.iter().filter_map(|name| Some((name, std::env::var_os(name)?))))
        .envs(config.env.iter().map(|(name, value)| (name, value.expose())))
        .kill_on_drop(true)
        // A group of its own, led by the server: its id is the server's pid.
        .process_group(0);
    let (transport, _) = TokioChildProcess::builder(command).stderr(Stdio::null()).spawn()?;
    let leader = transport.id().and_then(|pid| libc::pid_t::try_from(pid).ok());
    Ok((transport, ProcessGroup(leader)))
}

/// A stdio server's process group, killed (SIGKILL, as `kill_on_drop` does to the server) when
/// this is dropped: when its connection ends, fails, is abandoned or voxgate stops.
pub(super) struct ProcessGroup(Option<libc::pid_t>);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let Some(leader) = self.0 else { return };
        // SAFETY: kill(2) touches no memory of ours. While any process of the group lives the
        // kernel does not hand its id to another; when none is left the call fails with ESRCH.
        // (Only a pid reused in the instant between the server being reaped and this kill could
        // be hit: it comes right after the connection ends, long before the pid space wraps.)
        unsafe {
            libc::kill(-leader, libc::SIGKILL);
        }
    }
}
