//! The processes a run starts: the echo upstream and the bare relay (this same binary, other
//! subcommands) and voxgate's release binary. Each announces its address with a `listening on
//! ADDR` line; everything a child prints is kept in a log file under the run's temp dir for when
//! something goes wrong.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// How long a child has to exit after SIGTERM before it is killed: voxgate's drain with no session
/// left returns at once, but an instrumented build (scripts/build-pgo) writes its profile on the
/// way out, tens of megabytes.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// A running child process; killed when dropped.
pub struct Running {
    pub name: String,
    pub pid: u32,
    pub addr: SocketAddr,
    child: Child,
}

impl Running {
    /// `ws://ADDR/v1/realtime`, the path both voxgate and the bench's servers answer on.
    pub fn url(&self) -> String {
        format!("ws://{}/v1/realtime", self.addr)
    }

    /// Stop the child as production would (SIGTERM: voxgate drains, the bench's servers return
    /// from `main`) and wait for it; SIGKILL after [`STOP_GRACE`]. A clean exit matters beyond
    /// tidiness: a profile-instrumented binary writes its profile only when it exits, so
    /// scripts/build-pgo trains on nothing if its children are killed. An error says how the child
    /// ended when that was not a clean exit, so a run reports it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        let pid = libc::pid_t::try_from(self.pid).context("pid out of range")?;
        // SAFETY: kill(2) with a pid this process spawned and has not yet reaped (the `Child` is
        // still held), so the pid cannot have been reused.
        if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
            let err = std::io::Error::last_os_error();
            let _ = self.child.start_kill();
            bail!("{}: SIGTERM failed: {err}", self.name);
        }
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(status)) => bail!("{} ended with {status} after SIGTERM", self.name),
            Ok(Err(err)) => bail!("{}: waiting for it: {err}", self.name),
            Err(_) => {
                let _ = self.child.start_kill();
                let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
                bail!("{} still running {} s after SIGTERM; killed", self.name, STOP_GRACE.as_secs())
            }
        }
    }
}

/// `bench echo` as a child process.
pub async fn echo(tmp: &Path) -> anyhow::Result<Running> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let mut command = Command::new(exe);
    command.arg("echo");
    start("echo", command, tmp).await
}

/// `bench relay --upstream URL --threads N` as a child process.
pub async fn relay(tmp: &Path, upstream: &str, threads: usize) -> anyhow::Result<Running> {
    let exe = std::env::current_exe().context("locating the bench binary")?;
    let mut command = Command::new(exe);
    command.args(["relay", "--upstream", upstream, "--threads", &threads.to_string()]);
    start("relay", command, tmp).await
}

/// The Python relay (`python_relay.py`, kept in this binary) as a child process of `python`.
pub async fn python_relay(python: &Path, tmp: &Path, upstream: &str) -> anyhow::Result<Running> {
    let script = tmp.join("python_relay.py");
    tokio::fs::write(&script, include_str!("python_relay.py")).await.context("writing the Python relay")?;
    let mut command = Command::new(python);
    command.arg(&script).args(["--upstream", upstream]);
    start("python relay", command, tmp).await
}

/// voxgate's release binary, configured only through the environment: the echo as an `openai`
/// upstream, every session allowed, audit and calendar in the temp dir, warnings only (plus the
/// line that says where it listens); `session_threads` when given, else voxgate's default.
pub async fn voxgate(binary: &Path, tmp: &Path, echo_url: &str, session_threads: Option<usize>) -> anyhow::Result<Running> {
    let mut command = Command::new(binary);
    command.env_clear().current_dir(tmp);
    for key in ["PATH", "HOME", "TMPDIR"] {
        if let Some(value) = std::env::var_os(key) {
            command.env(key, value);
        }
    }
    let settings: [(&str, &str); 11] = [
        ("VOXGATE_SERVER__LISTEN", "127.0.0.1:0"),
        ("VOXGATE_SERVER__MAX_SESSIONS", "20000"),
        ("VOXGATE_UPSTREAM__KIND", "openai"),
        ("VOXGATE_UPSTREAM__URL", echo_url),
        ("VOXGATE_UPSTREAM__API_KEY", "bench"),
        ("VOXGATE_AUDIT__PATH", "audit.jsonl"),
        ("VOXGATE_BACKENDS__CALENDAR__PATH", "cal.ics"),
        ("VOXGATE_TELEMETRY__LOG_LEVEL", "warn,voxgate::server=info"),
        ("VOXGATE_TELEMETRY__LOG_FORMAT", "json"),
        // Every bench session is the same anonymous user: lift the per-user tool budget.
        ("VOXGATE_TOOLS__CALCULATE_MEDICAL_SCORE__RATE_LIMIT_PER_MINUTE", "100000000"),
        ("NO_COLOR", "1"),
    ];
    command.envs(settings);
    if let Some(threads) = session_threads {
        command.env("VOXGATE_SERVER__SESSION_THREADS", threads.to_string());
    }
    start("voxgate", command, tmp).await
}

async fn start(name: &str, mut command: Command, tmp: &Path) -> anyhow::Result<Running> {
    command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().with_context(|| format!("starting {name}"))?;
    let pid = child.id().context("child has no pid")?;
    let log_path = tmp.join(format!("{}-{pid}.log", name.replace(' ', "-")));
    let (lines_tx, mut lines_rx) = mpsc::unbounded_channel::<String>();
    let log = tokio::fs::File::create(&log_path).await.context("creating a child log")?;
    let log = std::sync::Arc::new(tokio::sync::Mutex::new(log));
    if let Some(out) = child.stdout.take() {
        tokio::spawn(copy_lines(BufReader::new(out), lines_tx.clone(), log.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(copy_lines(BufReader::new(err), lines_tx, log));
    }
    let addr = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = lines_rx.recv().await {
            if let Some(addr) = listening_addr(&line) {
                return Some(addr);
            }
        }
        None
    })
    .await;
    match addr {
        Ok(Some(addr)) => Ok(Running { name: name.to_string(), pid, addr, child }),
        _ => {
            let _ = child.start_kill();
            bail!("{name} did not announce its address; see {}", log_path.display())
        }
    }
}

async fn copy_lines<R: tokio::io::AsyncBufRead + Unpin>(
    reader: R,
    lines_tx: mpsc::UnboundedSender<String>,
    log: std::sync::Arc<tokio::sync::Mutex<tokio::fs::File>>,
) {
    let mut lines = reader.lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut file = log.lock().await;
        let _ = file.write_all(line.as_bytes()).await;
        let _ = file.write_all(b"\n").await;
        drop(file);
        let _ = lines_tx.send(line);
    }
}

/// The address in a `listening on ADDR` line, plain or inside a JSON log record.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    let end = rest.find(|c: char| !(c.is_ascii_hexdigit() || matches!(c, '.' | ':' | '[' | ']'))).unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The voxgate binary next to this one (`target/production/voxgate` for a bench built with the
/// profile the image ships, `target/debug/voxgate` for the CI smoke), or the one given.
pub fn voxgate_binary(given: Option<PathBuf>) -> Option<PathBuf> {
    if let Some(path) = given {
        return path.exists().then_some(path);
    }
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent()?.join("voxgate");
    beside.exists().then_some(beside)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_address_in_text_and_json_lines() {
        assert_eq!(listening_addr("listening on 127.0.0.1:4040").unwrap().port(), 4040);
        let json = r#"{"level":"INFO","fields":{"message":"listening on 127.0.0.1:39999","addr":"127.0.0.1:39999"}}"#;
        assert_eq!(listening_addr(json).unwrap().port(), 39999);
        assert!(listening_addr("starting").is_none());
    }
}
