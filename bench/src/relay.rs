//! The bare relay: the least a Rust WebSocket relay can do. Each client connection gets its own
//! upstream connection, and frames are piped both ways as they are — no parsing, no channel, no
//! extra task; `forward` feeds frames while more are ready and flushes when the source runs dry.
//! It runs in its own process on a current-thread runtime (the cheaper choice on two cores), so
//! its CPU and memory are read from /proc exactly like voxgate's.
//! Its sockets have voxgate's settings (4 KiB read buffer, writes gathered up to 8 KiB), so the
//! comparison shows voxgate's own costs. With the bench's 16 KiB buffers the relay held ≈ 15 KiB
//! more per active session and spent ≈ 5 % more CPU per frame (tungstenite zero-fills the free part
//! of its read buffer before every read), which flattered voxgate (eighth pass, docs/performance-history.md).

use anyhow::Context;
use futures_util::StreamExt;
use futures_util::future::{Either, select};
use tokio::net::{TcpListener, TcpStream};

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use crate::echo::accept_realtime;

/// Serve until the process is killed.
pub async fn serve(listener: TcpListener, upstream: String) -> anyhow::Result<()> {
    loop {
        let (stream, _) = listener.accept().await.context("accept")?;
        let _ = stream.set_nodelay(true);
        let upstream = upstream.clone();
        tokio::spawn(async move {
            if let Err(err) = pipe(stream, &upstream).await
                && std::env::var_os("BENCH_DEBUG").is_some()
            {
                eprintln!("relay: {err:#}");
            }
        });
    }
}

async fn pipe(stream: TcpStream, upstream: &str) -> anyhow::Result<()> {
    let client = tokio_tungstenite::accept_hdr_async_with_config(stream, accept_realtime, Some(socket_config())).await.context("client handshake")?;
    let (upstream, _) = tokio_tungstenite::connect_async_with_config(upstream, Some(socket_config()), true).await.context("upstream connect")?;
    let (client_tx, client_rx) = client.split();
    let (upstream_tx, upstream_rx) = upstream.split();
    let up = client_rx.forward(upstream_tx);
    let down = upstream_rx.forward(client_tx);
    // Either side ending ends the pair; the other half is dropped, which closes its socket.
    match select(up, down).await {
        Either::Left((result, _)) | Either::Right((result, _)) => result.context("relay")?,
    }
    Ok(())
}

/// voxgate's socket settings (`client_ws_config` in src/server/realtime.rs, `ws_config` in
/// src/upstream/mod.rs), minus its frame-size limits, which cost nothing per frame.
fn socket_config() -> WebSocketConfig {
    WebSocketConfig::default().read_buffer_size(4 * 1024).write_buffer_size(8 * 1024)
}
