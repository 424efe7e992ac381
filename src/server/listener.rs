//! The accept loop. axum's own `serve` cannot bound how long a connection may take to send its
//! request head, so a client that opens a socket and says nothing would hold it forever; here
//! every connection gets hyper's `header_read_timeout` (`server.handshake_timeout_ms`), keeps
//! HTTP/1.1 upgrades (the realtime WebSocket), and is told to finish when the drain begins.
//! Each accepted socket moves to a session thread ([`super::shards`]) and lives there.

use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use super::shards::{ShardLoad, Shards};

/// What hyper serves each connection over. `realtime` takes the TCP socket back out of an
/// upgraded connection by this type (`Upgraded::downcast`), so both sides name it here.
pub(crate) type ClientIo = TokioIo<TcpStream>;

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
    loop {
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
                    .serve_connection(ClientIo::new(stream), service)
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
