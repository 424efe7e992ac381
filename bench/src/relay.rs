//! The bare relay: the least a Rust WebSocket relay can do. Each client connection gets its own
//! upstream connection, and frames are piped both ways as they are — no parsing, no channel, no
//! extra task; `forward` feeds frames while more are ready and flushes when the source runs dry.
//! It runs in its own process, so its CPU and memory are read from /proc exactly like voxgate's.
//! Its sockets have voxgate's settings (4 KiB read buffer, writes gathered up to 8 KiB), so the
//! comparison shows voxgate's own costs. With the bench's 16 KiB buffers the relay held ≈ 15 KiB
//! more per active session and spent ≈ 5 % more CPU per frame (tungstenite zero-fills the free part
//! of its read buffer before every read), which flattered voxgate (eighth pass, docs/performance-history.md).
//!
//! Threads: voxgate's shape (src/server/shards.rs), minimal. The accept loop hands each connection
//! to the least-loaded of `threads` single-threaded runtimes, where it stays for its whole life and
//! is counted until it ends. `bench run` gives it voxgate's session thread count: a relay on one
//! thread against voxgate on two compared one core with two (rev22). `GET /metrics` answers the
//! per-thread counts (`bench_relay_thread_connections{thread="i"}`, voxgate's format), so the bench
//! checks the relay's spread as it checks voxgate's.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use futures_util::future::{Either, select};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use crate::echo::accept_realtime;

/// The series the relay's per-thread connection counts are served under.
pub const THREAD_SERIES: &str = "bench_relay_thread_connections";
const METRICS_REQUEST: &[u8] = b"GET /metrics ";

/// Connections running on each thread, by thread index.
type Loads = Arc<Vec<AtomicUsize>>;

/// Counts one connection on its thread until dropped, when the connection ends.
pub(crate) struct Placed {
    loads: Loads,
    thread: usize,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.loads[self.thread].fetch_sub(1, Ordering::Relaxed);
    }
}

/// The index of the thread with the fewest connections (the first of equals).
pub(crate) fn least_loaded(loads: &[usize]) -> usize {
    loads.iter().enumerate().min_by_key(|&(_, n)| *n).map_or(0, |(i, _)| i)
}

/// The pinned threads and their counts.
pub(crate) struct Threads {
    queues: Vec<mpsc::UnboundedSender<(std::net::TcpStream, Placed)>>,
    loads: Loads,
}

impl Threads {
    /// Start `count` (at least one) threads, each serving its connections to `upstream`.
    pub(crate) fn start(count: usize, upstream: String) -> anyhow::Result<Self> {
        let loads: Loads = Arc::new((0..count.max(1)).map(|_| AtomicUsize::new(0)).collect());
        let upstream: Arc<str> = upstream.into();
        let mut queues = Vec::with_capacity(loads.len());
        for index in 0..loads.len() {
            let (queue, mut jobs) = mpsc::unbounded_channel::<(std::net::TcpStream, Placed)>();
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().context("relay thread runtime")?;
            let (upstream, all) = (upstream.clone(), loads.clone());
            std::thread::Builder::new()
                .name(format!("relay-{index}"))
                .spawn(move || {
                    runtime.block_on(async move {
                        while let Some((stream, placed)) = jobs.recv().await {
                            let (upstream, all) = (upstream.clone(), all.clone());
                            tokio::spawn(async move {
                                let _placed = placed;
                                // Registered with this thread's reactor: the socket stays here.
                                let Ok(stream) = TcpStream::from_std(stream) else { return };
                                if let Err(err) = connection(stream, &upstream, &all).await
                                    && std::env::var_os("BENCH_DEBUG").is_some()
                                {
                                    eprintln!("relay: {err:#}");
                                }
                            });
                        }
                    });
                })
                .context("starting a relay thread")?;
            queues.push(queue);
        }
        Ok(Self { queues, loads })
    }

    /// Hand `stream` to the least-loaded thread, counted there from now until it ends.
    pub(crate) fn place(&self, stream: TcpStream) -> anyhow::Result<()> {
        let thread = least_loaded(&self.counts());
        // Counted before the thread picks it up, so the next placement sees it.
        self.loads[thread].fetch_add(1, Ordering::Relaxed);
        let placed = Placed { loads: self.loads.clone(), thread };
        let stream = stream.into_std().context("detaching the socket")?;
        self.queues[thread].send((stream, placed)).map_err(|_| anyhow::anyhow!("relay thread {thread} is gone"))
    }

    /// Connections on each thread, in thread order.
    pub(crate) fn counts(&self) -> Vec<usize> {
        counts(&self.loads)
    }
}

fn counts(loads: &Loads) -> Vec<usize> {
    loads.iter().map(|n| n.load(Ordering::Relaxed)).collect()
}

/// Serve until the process ends (SIGTERM, main.rs): accept here, relay on `threads` pinned threads.
pub async fn serve(listener: TcpListener, upstream: String, threads: usize) -> anyhow::Result<()> {
    let threads = Threads::start(threads, upstream)?;
    loop {
        let (stream, _) = listener.accept().await.context("accept")?;
        let _ = stream.set_nodelay(true);
        threads.place(stream)?;
    }
}

/// A metrics scrape or a relayed session.
async fn connection(mut stream: TcpStream, upstream: &str, loads: &Loads) -> anyhow::Result<()> {
    if is_metrics_request(&stream).await {
        return answer_metrics(&mut stream, loads).await;
    }
    pipe(stream, upstream).await
}

/// Does the request start with `GET /metrics `? A WebSocket client's `GET /v1/…` differs by its
/// sixth byte, so this is one `peek` for a session.
async fn is_metrics_request(stream: &TcpStream) -> bool {
    let mut head = [0u8; METRICS_REQUEST.len()];
    for _ in 0..100 {
        let Ok(n) = stream.peek(&mut head).await else { return false };
        if n == 0 || !METRICS_REQUEST.starts_with(&head[..n]) {
            return false;
        }
        if n == head.len() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    false
}

async fn answer_metrics(stream: &mut TcpStream, loads: &Loads) -> anyhow::Result<()> {
    // Read the request to its end, so closing does not reset the connection under the answer.
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        let n = stream.read(&mut buf).await.context("metrics request")?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let body = metrics_text(&counts(loads));
    let head = format!("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
    stream.write_all(head.as_bytes()).await.context("metrics answer")?;
    stream.write_all(body.as_bytes()).await.context("metrics answer")?;
    stream.shutdown().await.context("metrics answer")?;
    Ok(())
}

/// The per-thread counts in voxgate's exposition format.
pub(crate) fn metrics_text(counts: &[usize]) -> String {
    counts.iter().enumerate().map(|(i, n)| format!("{THREAD_SERIES}{{thread=\"{i}\"}} {n}\n")).collect()
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

/// voxgate's default session thread count (`server.session_threads = 0`): one per CPU the
/// process may use. The relay's default, so the two run on as many threads.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{client, echo, placement};

    #[test]
    fn the_least_loaded_thread_is_chosen_first_of_equals() {
        assert_eq!(least_loaded(&[0, 0]), 0);
        assert_eq!(least_loaded(&[1, 0]), 1);
        assert_eq!(least_loaded(&[2, 1, 1]), 1);
        assert_eq!(least_loaded(&[]), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sessions_spread_over_the_threads_and_count_for_their_whole_life() {
        let echo_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_url = format!("ws://{}/v1/realtime", echo_listener.local_addr().unwrap());
        tokio::spawn(echo::serve(echo_listener));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, echo_url, 2));
        let url = format!("ws://{addr}/v1/realtime");
        // One after another: each found the threads with the earlier ones still counted.
        let mut sessions = Vec::new();
        for _ in 0..3 {
            sessions.push(client::open(&url, Duration::from_secs(10)).await.unwrap());
        }
        let scraped = placement::scrape(addr, THREAD_SERIES).await.unwrap();
        // 2 + 1, the scrape on the thread with one.
        assert_eq!(scraped, vec![2, 2]);
        assert_eq!(placement::without_scrape(&scraped), vec![2, 1]);
        assert_eq!(placement::imbalance(&placement::without_scrape(&scraped), 3), None);
        client::close_all(sessions.split_off(1)).await;
        let mut left = Vec::new();
        for _ in 0..200 {
            left = placement::scrape(addr, THREAD_SERIES).await.unwrap();
            if left.iter().sum::<i64>() == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // The session still open, and the scrape.
        assert_eq!(left.iter().sum::<i64>(), 2, "{left:?}");
        client::close_all(sessions).await;
    }
}
