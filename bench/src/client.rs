//! One realtime client session as a browser would run it: open the socket with the `realtime`
//! subprotocol, wait for `session.created`, send its own `session.update` and wait for
//! `session.updated`. Only then is the session counted as ready, on every path alike.

use std::time::Duration;

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::frames::fast_type;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Socket settings for every bench socket (generator, echo, relay). tungstenite zero-fills the
/// free part of its read buffer before every read, so the default 128 KiB buffer costs a 128 KiB
/// memset per read — more than the frame itself. 16 KiB holds several 2.6 KB frames per read.
pub fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(16 * 1024)
}

const CLIENT_SESSION_UPDATE: &str =
    r#"{"type":"session.update","session":{"type":"realtime","instructions":"bench client","output_modalities":["audio"]}}"#;

/// Connect and finish the session handshake.
pub async fn open(url: &str, timeout: Duration) -> anyhow::Result<Ws> {
    tokio::time::timeout(timeout, open_inner(url)).await.context("session setup timed out")?
}

async fn open_inner(url: &str) -> anyhow::Result<Ws> {
    let mut request = url.into_client_request().context("bad url")?;
    request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("realtime"));
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(request, Some(ws_config()), true).await.context("connect")?;
    wait_for(&mut ws, "session.created").await?;
    ws.send(Message::text(CLIENT_SESSION_UPDATE)).await.context("send session.update")?;
    wait_for(&mut ws, "session.updated").await?;
    Ok(ws)
}

/// Read until a frame of `kind` arrives; anything else before it (voxgate's own events) is skipped.
async fn wait_for(ws: &mut Ws, kind: &str) -> anyhow::Result<()> {
    while let Some(frame) = ws.next().await {
        match frame.context("socket failed during setup")? {
            Message::Text(text) if type_of(text.as_bytes()).as_deref() == Some(kind) => return Ok(()),
            Message::Close(close) => bail!("closed during setup: {close:?}"),
            _ => {}
        }
    }
    bail!("socket ended during setup")
}

/// The `type` of any frame: the fast path for frames that put it first, a real parse otherwise.
pub fn type_of(bytes: &[u8]) -> Option<String> {
    if let Some(kind) = fast_type(bytes) {
        return Some(kind.to_string());
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    value.get("type")?.as_str().map(str::to_string)
}

/// Open `n` sessions, at most `parallel` handshakes at a time.
pub async fn open_many(url: &str, n: usize, parallel: usize) -> anyhow::Result<Vec<Ws>> {
    let limit = std::sync::Arc::new(tokio::sync::Semaphore::new(parallel.max(1)));
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let permit = limit.clone().acquire_owned().await.context("semaphore closed")?;
        let url = url.to_string();
        handles.push(tokio::spawn(async move {
            let result = open(&url, Duration::from_secs(60)).await;
            drop(permit);
            result
        }));
    }
    let mut sessions = Vec::with_capacity(n);
    for (i, handle) in handles.into_iter().enumerate() {
        let ws = handle.await.context("setup task panicked")?.with_context(|| format!("session {i} of {n}"))?;
        sessions.push(ws);
    }
    Ok(sessions)
}

/// Close every session, politely but without waiting long for the peer.
pub async fn close_all(sessions: Vec<Ws>) {
    let closes = sessions.into_iter().map(|mut ws| async move {
        let _ = tokio::time::timeout(Duration::from_secs(2), ws.close(None)).await;
    });
    futures_util::future::join_all(closes).await;
}
