//! The accept loop. axum's own `serve` cannot bound how long a connection may take to send its
//! request head, so a client that opens a socket and says nothing would hold it forever; here
//! every connection gets hyper's `header_read_timeout` (`server.handshake_timeout_ms`), keeps
//! HTTP/1.1 upgrades (the realtime WebSocket), and is told to finish when the drain begins.
//! Each accepted socket moves to a session thread ([`super::shards`]) and lives there.
//!
//! Before its upgrade a connection is anyone's, unauthenticated: at most
//! [`MAX_HTTP_CONNECTIONS`] of them at once (past that the next ones wait in the listen backlog),
//! request heads of at most [`MAX_BUF_BYTES`] (a larger one is answered 431), and a
//! response the client does not read fails once it has made no progress for
//! `server.handshake_timeout_ms` ([`ClientIo`]). Sessions are not counted: hyper's connection
//! future ends at the upgrade, and `server.max_sessions` caps them.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::shards::{ShardLoad, Shards};

/// Connections not yet upgraded nor closed: request heads being read, requests being answered,
/// idle keep-alive connections (closed after `server.handshake_timeout_ms`). A handshake takes
/// milliseconds, so this is far above real use; it bounds what unauthenticated clients can hold
/// to this many descriptors and, with [`MAX_BUF_BYTES`], about 128 MiB of read buffers (before,
/// hyper's default of about 408 KiB each, for any number of connections). Past it the accept loop
/// waits rather than refuses: connections queue in the listen backlog and are served in turn.
const MAX_HTTP_CONNECTIONS: usize = 1024;

/// The largest request head, and hyper's read buffer limit per connection (a limit on growth:
/// hyper reads into whatever its buffer's allocation holds, at most about twice this). A
/// WebSocket handshake with a JWT in a subprotocol and a browser's cookies takes a few KiB. A
/// larger head is answered 431.
const MAX_BUF_BYTES: usize = 64 * 1024;

/// While every connection slot is taken, the accept loop says so at most this often.
const FULL_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// What hyper serves each connection over: the socket, with a bound on how long a write may wait
/// for the client to read. `realtime` takes the socket back out of an upgraded connection by this
/// type (`Upgraded::downcast`, then [`ClientIo::into_inner`]), so both sides name it here; the
/// session then uses the bare socket, without this bound (it has `server.client_send_timeout_ms`).
pub(crate) struct ClientIo {
    io: TokioIo<TcpStream>,
    /// A response that makes no progress for this long fails: a client that asks for one (the
    /// metrics, an asset) and never reads it would otherwise hold its connection and slot forever.
    write_stall: Duration,
    /// Armed while a write waits, cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl ClientIo {
    fn new(stream: TcpStream, write_stall: Duration) -> ClientIo {
        ClientIo { io: TokioIo::new(stream), write_stall, stalled: None }
    }

    /// The socket.
    pub(crate) fn into_inner(self) -> TcpStream {
        self.io.into_inner()
    }

    /// `poll` (a write or a flush) under the stall bound.
    fn bounded<T>(
        &mut self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(Pin<&mut TokioIo<TcpStream>>, &mut Context<'_>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let Poll::Ready(result) = poll(Pin::new(&mut self.io), cx) {
            self.stalled = None;
            return Poll::Ready(result);
        }
        let limit = self.write_stall;
        let timer = self.stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client did not read its response"))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl hyper::rt::Read for ClientIo {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: hyper::rt::ReadBufCursor<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for ClientIo {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().bounded(cx, |io, cx| io.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().bounded(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        self.get_mut().bounded(cx, |io, cx| io.poll_write_vectored(cx, bufs))
    }
}

/// Serve `app` on `listener` until `stop` is cancelled, each connection on one of `shards`; the
/// shards are handed back then, still running the connections and sessions that remain (the
/// drain tracks those, see `crate::shutdown`).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    handshake_timeout: Duration,
    stop: CancellationToken,
    shards: Shards,
) -> Shards {
    let slots = Arc::new(Semaphore::new(MAX_HTTP_CONNECTIONS));
    let mut warned: Option<Instant> = None;
    loop {
        // Held by the connection until its future ends: at the upgrade, or when it closes.
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if warned.is_none_or(|at| at.elapsed() >= FULL_WARNING_INTERVAL) {
                    warned = Some(Instant::now());
                    tracing::warn!(limit = MAX_HTTP_CONNECTIONS, "every connection slot is taken by connections not yet upgraded; new ones wait");
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        // Never closed.
                        Err(_) => return shards,
                    },
                    _ = stop.cancelled() => return shards,
                }
            }
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => return shards,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) => {
                // Out of file descriptors and the like: back off rather than spin.
                tracing::warn!(error = %err, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Audio frames are small and latency-bound.
        let _ = stream.set_nodelay(true);
        let inner = TowerToHyperService::new(app.clone());
        // Deregistered from this runtime's reactor, registered with the shard's when it starts.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(err) => {
                tracing::debug!(error = %err, "accepted socket could not be moved to a session thread");
                continue;
            }
        };
        let stop = stop.clone();
        let placed = shards.place(Box::new(move |load: ShardLoad| {
            let service = hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                // The peer address, for the audit log's client address (see `client_addr`), and
                // the shard's load, which a session holds for its life (see `shards`).
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
                request.extensions_mut().insert(load.clone());
                hyper::service::Service::call(&inner, request)
            });
            Box::pin(async move {
                let _slot = slot;
                let stream = match TcpStream::from_std(stream) {
                    Ok(stream) => stream,
                    Err(err) => {
                        tracing::debug!(error = %err, "accepted socket could not join the session thread");
                        return;
                    }
                };
                let connection = http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(handshake_timeout)
                    .max_buf_size(MAX_BUF_BYTES)
                    // The buffer may hold more than its limit (see `MAX_BUF_BYTES`): the head's
                    // own limit is exact.
                    .max_header_size(MAX_BUF_BYTES)
                    .serve_connection(ClientIo::new(stream, handshake_timeout), service)
                    .with_upgrades();
                let mut connection = std::pin::pin!(connection);
                let result = tokio::select! {
                    result = connection.as_mut() => result,
                    _ = stop.cancelled() => {
                        connection.as_mut().graceful_shutdown();
                        connection.await
                    }
                };
                if let Err(err) = result {
                    tracing::debug!(error = %err, "client connection ended with an error");
                }
            })
        }));
        if placed.is_err() {
            // Every session thread is gone (a panic outside any task); the socket closes with
            // the job.
            tracing::error!("no session thread is running; connection dropped");
        }
    }
}
