//! Integration-test harness: the real server on 127.0.0.1:0 ([`TestProxy`]), a scriptable fake
//! realtime upstream ([`FakeUpstream`]) that also replays `proto-fixtures/` transcripts, and a
//! WebSocket test client ([`Client`]); a real Redis ([`redis`]), an OTLP receiver ([`otlp`])
//! and Radicale ([`radicale`]).
#![allow(dead_code)]

pub mod client_tools;
mod fake_upstream;
pub mod otlp;
pub mod radicale;
pub mod redis;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use fake_upstream::{FakeConn, FakeMode, FakeUpstream, TranscriptFrame, event_args, model_calls, transcript};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub const WAIT: Duration = Duration::from_secs(10);

/// The next text frame from `ws` (pings and pongs skipped), within [`WAIT`]; `who` names the
/// socket when it panics.
pub async fn next_text_from<S>(ws: &mut S, who: &str) -> String
where
    S: futures::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::time::timeout(WAIT, ws.next()).await.unwrap_or_else(|_| panic!("{who}: timed out"));
        match message.unwrap_or_else(|| panic!("{who}: closed")).unwrap() {
            Message::Text(t) => return t.to_string(),
            Message::Close(frame) => panic!("{who}: closed: {frame:?}"),
            _ => {}
        }
    }
}

/// A voxgate server running in this test process.
pub struct TestProxy {
    pub server: voxgate::server::RunningServer,
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl TestProxy {
    /// Start with the given TOML (merged over test defaults: port 0, files in a temp dir).
    pub async fn start(extra_toml: &str) -> TestProxy {
        let dir = tempfile::tempdir().unwrap();
        // A test that configures its own calendar backend keeps it.
        let calendar = if extra_toml.contains("[backends.calendar]") {
            String::new()
        } else {
            format!("[backends.calendar]\npath = \"{}\"\n", dir.path().join("calendar.ics").display())
        };
        let mut table: toml::Table = toml::from_str(&format!("{extra_toml}\n{calendar}")).unwrap();
        // The audit log goes in the temp dir, also when the test sets other `[audit]` keys.
        let audit = table.entry("audit").or_insert(toml::Value::Table(Default::default()));
        let audit_path = dir.path().join("audit.jsonl").display().to_string();
        audit.as_table_mut().unwrap().insert("path".into(), audit_path.into());
        let server = table.entry("server").or_insert(toml::Value::Table(Default::default()));
        server.as_table_mut().unwrap().entry("listen").or_insert("127.0.0.1:0".into());
        let config = voxgate::config::Config::from_table(table).unwrap();
        voxgate::config::validate(&config).unwrap();
        let server = voxgate::server::start(config).await.unwrap();
        let addr = server.local_addr();
        TestProxy { server, addr, dir }
    }

    /// Start against a fake upstream.
    pub async fn with_upstream(fake: &FakeUpstream, extra_toml: &str) -> TestProxy {
        let toml = format!(
            "[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-test-upstream-key\"\n{extra_toml}",
            fake.addr
        );
        Self::start(&toml).await
    }

    pub fn url(&self, query: &str) -> String {
        format!("ws://{}/v1/realtime{query}", self.addr)
    }

    pub fn audit_path(&self) -> PathBuf {
        self.dir.path().join("audit.jsonl")
    }

    pub fn calendar_path(&self) -> PathBuf {
        self.dir.path().join("calendar.ics")
    }

    /// Audit records written so far.
    pub fn audit_records(&self) -> Vec<Value> {
        read_jsonl(&self.audit_path())
    }

    /// A client asking for voxgate events.
    pub async fn client(&self) -> Client {
        Client::connect(&self.url(""), &["realtime", "voxgate.v1"]).await
    }

    /// A client asking for voxgate events, with its upstream connection accepted by `fake` and
    /// the session open (`voxgate.session.ready` seen).
    pub async fn ready_session(&self, fake: &mut FakeUpstream) -> (Client, FakeConn) {
        let mut client = self.client().await;
        let mut up = fake.accept().await;
        up.open_session().await;
        client.until("voxgate.session.ready").await;
        (client, up)
    }

    pub async fn http_get(&self, path: &str) -> (u16, String) {
        let response = reqwest::get(format!("http://{}{path}", self.addr)).await.unwrap();
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    }

    pub async fn stop(self) {
        self.server.shutdown().await.unwrap();
    }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A WebSocket client of voxgate.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub protocol: Option<String>,
}

impl Client {
    pub async fn connect(url: &str, protocols: &[&str]) -> Client {
        Self::try_connect(url, protocols, &[]).await.unwrap()
    }

    pub async fn try_connect(
        url: &str,
        protocols: &[&str],
        headers: &[(&str, &str)],
    ) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
        let mut request = url.into_client_request().unwrap();
        if !protocols.is_empty() {
            request.headers_mut().insert("sec-websocket-protocol", protocols.join(", ").parse().unwrap());
        }
        for (name, value) in headers {
            let name: http::HeaderName = name.parse().unwrap();
            request.headers_mut().insert(name, value.parse().unwrap());
        }
        let (ws, response) = tokio_tungstenite::connect_async(request).await?;
        let protocol = response
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap().to_string());
        Ok(Client { ws, protocol })
    }

    pub async fn send_json(&mut self, value: Value) {
        self.ws.send(Message::text(value.to_string())).await.unwrap();
    }

    pub async fn send_text(&mut self, text: &str) {
        self.ws.send(Message::text(text.to_string())).await.unwrap();
    }

    /// The next text frame (raw).
    pub async fn next_text(&mut self) -> String {
        next_text_from(&mut self.ws, "client").await
    }

    pub async fn next_json(&mut self) -> Value {
        serde_json::from_str(&self.next_text().await).unwrap()
    }

    /// Skip frames until one of this type arrives; returns it and the types skipped.
    pub async fn until(&mut self, kind: &str) -> Value {
        loop {
            let event = self.next_json().await;
            if event["type"] == kind {
                return event;
            }
        }
    }

    /// Collect frames until one of this type arrives (inclusive).
    pub async fn collect_until(&mut self, kind: &str) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next_json().await;
            let done = event["type"] == kind;
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// Wait for the close frame; returns (code, reason).
    pub async fn closed(&mut self) -> (u16, String) {
        loop {
            match tokio::time::timeout(WAIT, self.ws.next()).await.expect("timed out") {
                Some(Ok(Message::Close(Some(frame)))) => return (frame.code.into(), frame.reason.to_string()),
                Some(Ok(Message::Close(None))) | None => return (1005, String::new()),
                Some(Ok(_)) => {}
                Some(Err(_)) => return (1006, String::new()),
            }
        }
    }
}

/// `GET /admin/sessions` on the instance at `addr`, with the admin token.
pub async fn admin_sessions(addr: impl std::fmt::Display, admin_token: &str) -> Value {
    reqwest::Client::new()
        .get(format!("http://{addr}/admin/sessions"))
        .bearer_auth(admin_token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// A single-use ticket minted by `POST /v1/sessions` with `body` (`{"sub", "roles"?, "ttl_s"?}`).
pub async fn mint_ticket(addr: impl std::fmt::Display, admin_token: &str, body: Value) -> String {
    let response = reqwest::Client::new()
        .post(format!("http://{addr}/v1/sessions"))
        .bearer_auth(admin_token)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["token"].as_str().unwrap().to_string()
}

/// The voxgate binary under test (`VOXGATE_BIN` overrides the one cargo built).
pub fn binary() -> PathBuf {
    std::env::var_os("VOXGATE_BIN").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_voxgate")))
}

/// Start the binary; returns the child and the address it logged.
pub async fn spawn_voxgate(config: &str, dir: &std::path::Path) -> (tokio::process::Child, String) {
    spawn_voxgate_with_env(config, dir, &[]).await
}

/// voxgate as a process with its config in `dir`, `RUST_LOG` set to `rust_log` (unset when
/// `None`: the configured `info` applies) and `env` added to its environment. Returns the child,
/// its address and every line it has written so far.
pub async fn spawn_voxgate_logged(
    config: &str,
    dir: &Path,
    rust_log: Option<&str>,
    env: &[(&str, &str)],
) -> (tokio::process::Child, String, std::sync::Arc<std::sync::Mutex<String>>) {
    let path = dir.join("voxgate.toml");
    std::fs::write(&path, config).unwrap();
    let mut command = tokio::process::Command::new(binary());
    command.arg("--config").arg(&path).envs(env.iter().copied()).env_remove("RUST_LOG");
    if let Some(level) = rust_log {
        command.env("RUST_LOG", level);
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let logs = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let (addr_tx, mut addr_rx) = tokio::sync::mpsc::channel::<String>(1);
    let readers = [
        Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(child.stderr.take().unwrap()),
    ];
    for reader in readers {
        let logs = logs.clone();
        let addr_tx = addr_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap().trim_matches('"').to_string();
                    let _ = addr_tx.send(addr).await;
                }
                let mut all = logs.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
    }
    let addr = tokio::time::timeout(Duration::from_secs(60), addr_rx.recv()).await.unwrap().unwrap();
    (child, addr, logs)
}

/// [`spawn_voxgate`] with more environment variables for the process.
pub async fn spawn_voxgate_with_env(config: &str, dir: &std::path::Path, env: &[(&str, &std::path::Path)]) -> (tokio::process::Child, String) {
    let path = dir.join("voxgate.toml");
    std::fs::write(&path, config).unwrap();
    let mut child = tokio::process::Command::new(binary())
        .arg("--config")
        .arg(&path)
        .envs(env.iter().copied())
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(64);
    for reader in [Box::new(stdout) as Box<dyn tokio::io::AsyncRead + Unpin + Send>, Box::new(stderr)] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line).await;
            }
        });
    }
    let addr = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = rx.recv().await {
            if let Some(rest) = line.split("listening on ").nth(1) {
                return rest.split_whitespace().next().unwrap().trim_matches('"').to_string();
            }
        }
        panic!("voxgate exited before listening");
    })
    .await
    .expect("voxgate did not start");
    // Keep draining the logs so the child never blocks on a full pipe.
    tokio::spawn(async move { while rx.recv().await.is_some() {} });
    (child, addr)
}


/// The HTTP status of a WebSocket handshake: 101 when it succeeded.
pub async fn handshake_status(url: &str, protocols: &[&str], headers: &[(&str, &str)]) -> u16 {
    match Client::try_connect(url, protocols, headers).await {
        Ok(_) => 101,
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("unexpected: {other}"),
    }
}

/// The test venv's Python (`VOXGATE_TEST_PYTHON`, else `.venv-test/` made by scripts/test).
pub fn test_python() -> PathBuf {
    let path = std::env::var_os("VOXGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python"));
    assert!(path.exists(), "{} is missing: run scripts/test to create the test venv", path.display());
    path
}
