//! The accept loop. axum's own `serve` cannot bound how long a connection may take to send its
//! request head, so a client that opens a socket and says nothing would hold it forever; here
//! every connection gets hyper's `header_read_timeout` (`server.handshake_timeout_ms`), keeps
//! HTTP/1.1 upgrades (the realtime WebSocket), and is told to finish when the drain begins.
//! Each accepted socket moves to a session thread ([`super::shards`]) and lives there.
//!
//! Before its upgrade a connection is anyone's, unauthenticated: at most
//! [`MAX_HTTP_CONNECTIONS_PER_PEER`] of them from one address that is not a trusted proxy and
//! [`MAX_HTTP_CONNECTIONS`] in all ([`Admission`]; past either, a new connection is accepted and
//! closed at once, so the accept loop never stalls and the probes on this port are answered
//! while one host floods it), request heads of at most [`MAX_BUF_BYTES`] (a larger one is
//! answered 431), and a response the client does not read fails once it has made no progress for
//! `server.handshake_timeout_ms` ([`ClientIo`]). Sessions are not counted: hyper's connection
//! future ends at the upgrade, and `server.max_sessions` caps them.

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use ipnet::IpNet;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;

use super::client_addr;
use super::shards::{ShardLoad, Shards};

/// Connections not yet upgraded nor closed, from everyone: request heads being read, requests
/// being answered, idle keep-alive connections (closed after `server.handshake_timeout_ms`). A
/// handshake takes milliseconds, so this is far above real use. With [`MAX_BUF_BYTES`] it bounds
/// what unauthenticated clients can hold to this many descriptors and at most about 256 MiB of
/// read buffers (under 128 KiB each, see there; a quarter of the 1 GiB memory limit in
/// `deploy/k8s`), and to fill it takes [`MAX_HTTP_CONNECTIONS`] / [`MAX_HTTP_CONNECTIONS_PER_PEER`]
/// = 8 addresses (or trusted proxies). Past it a new connection is shed: accepted and closed.
const MAX_HTTP_CONNECTIONS: usize = 2048;

/// Connections not yet upgraded nor closed from one address (an IPv6 peer's /64: a host is given
/// a whole /64) that is not in `server.trusted_proxies`. A browser opens at most six per host,
/// and keeps them for `server.handshake_timeout_ms` at most once idle; the workstations behind
/// one NAT share the bound, and 256 leaves room for a ward's worth loading the page at the same
/// moment, or a load test opening sessions 64 at a time (a session's connection leaves the count
/// at its upgrade), while one host holding partial request heads cannot take the slots everyone
/// else (the kubelet's probes included) needs. A trusted proxy (an ingress) carries many clients
/// and reads their heads itself, so only [`MAX_HTTP_CONNECTIONS`] bounds it. Past it the new
/// connection is shed.
const MAX_HTTP_CONNECTIONS_PER_PEER: usize = 256;

/// The largest request head, and hyper's read buffer limit per connection (a limit on growth:
/// hyper reads into whatever its buffer's allocation holds, at most about twice this). A
/// WebSocket handshake with a JWT in a subprotocol and a browser's cookies takes a few KiB. A
/// larger head is answered 431.
const MAX_BUF_BYTES: usize = 64 * 1024;

/// While connections are shed, the accept loop says so at most this often (for each reason).
const SHED_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Why a new connection was shed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shed {
    /// Its address holds [`MAX_HTTP_CONNECTIONS_PER_PEER`] already.
    Peer,
    /// Every one of the [`MAX_HTTP_CONNECTIONS`] slots is taken.
    Full,
}

/// The slots for connections still in HTTP: overall, and per address.
struct Admission {
    slots: Arc<Semaphore>,
    /// Connections held per address (see [`peer_key`]); an address holding none has no entry.
    peers: Arc<DashMap<IpAddr, usize>>,
    trusted: Vec<IpNet>,
    per_peer: usize,
}

/// A connection's slots, given up when it is dropped: at the upgrade, or when the connection ends.
struct Admitted {
    _peer: Option<PeerSlot>,
    _slot: OwnedSemaphorePermit,
}

/// One of an address's slots.
struct PeerSlot {
    peers: Arc<DashMap<IpAddr, usize>>,
    key: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        // Under the entry's lock: an admission of the same address waits, then finds the count
        // (or no entry, never a stale zero).
        if let Entry::Occupied(mut count) = self.peers.entry(self.key) {
            if *count.get() <= 1 {
                count.remove();
            } else {
                *count.get_mut() -= 1;
            }
        }
    }
}

impl Admission {
    fn new(trusted: Vec<IpNet>, total: usize, per_peer: usize) -> Admission {
        Admission { slots: Arc::new(Semaphore::new(total)), peers: Arc::new(DashMap::new()), trusted, per_peer }
    }

    /// Slots for a connection from `peer`, or why there are none. Never waits.
    fn admit(&self, peer: IpAddr) -> Result<Admitted, Shed> {
        let peer_slot = if client_addr::is_trusted(&self.trusted, &peer) {
            None
        } else {
            let key = peer_key(peer);
            let mut count = self.peers.entry(key).or_insert(0);
            if *count >= self.per_peer {
                return Err(Shed::Peer);
            }
            *count += 1;
            drop(count);
            Some(PeerSlot { peers: self.peers.clone(), key })
        };
        // Without a slot, the address's is given back as `peer_slot` drops.
        let slot = self.slots.clone().try_acquire_owned().map_err(|_| Shed::Full)?;
        Ok(Admitted { _peer: peer_slot, _slot: slot })
    }
}

/// Whom a peer address counts as: itself, or for IPv6 its /64 (a host given a /64 could
/// otherwise open connections from any number of addresses).
fn peer_key(peer: IpAddr) -> IpAddr {
    match peer.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !(u128::from(u64::MAX)))),
        v4 => v4,
    }
}

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
/// `trusted_proxies` (`server.trusted_proxies`) are not held to [`MAX_HTTP_CONNECTIONS_PER_PEER`].
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    handshake_timeout: Duration,
    trusted_proxies: Vec<IpNet>,
    stop: CancellationToken,
    shards: Shards,
) -> Shards {
    let admission = Admission::new(trusted_proxies, MAX_HTTP_CONNECTIONS, MAX_HTTP_CONNECTIONS_PER_PEER);
    let mut warned_peer: Option<Instant> = None;
    let mut warned_full: Option<Instant> = None;
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
        // Held by the connection until its future ends: at the upgrade, or when it closes.
        let slot = match admission.admit(peer.ip()) {
            Ok(slot) => slot,
            Err(shed) => {
                // Closed here and now: waiting for a slot would leave every later connection,
                // the probes included, in the listen backlog behind this one.
                drop(stream);
                let (warned, message) = match shed {
                    Shed::Peer => (&mut warned_peer, "an address holds its share of connections not yet upgraded; its new ones are closed"),
                    Shed::Full => (&mut warned_full, "every connection slot is taken by connections not yet upgraded; new ones are closed"),
                };
                if warned.is_none_or(|at| at.elapsed() >= SHED_WARNING_INTERVAL) {
                    *warned = Some(Instant::now());
                    // Not the address: it identifies a client, and logs are not the audit log.
                    tracing::warn!(per_peer = MAX_HTTP_CONNECTIONS_PER_PEER, limit = MAX_HTTP_CONNECTIONS, "{message}");
                }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    /// An address past its share, and anyone past the total, is refused at once; a trusted proxy
    /// is held to the total alone; a slot given up is free again and an address holding none has
    /// no entry left.
    #[test]
    fn admission_sheds_per_address_and_in_all() {
        let admission = Admission::new(vec!["10.0.0.0/8".parse().unwrap()], 5, 2);
        let first = [admission.admit(ip("192.0.2.1")).unwrap(), admission.admit(ip("192.0.2.1")).unwrap()];
        assert_eq!(admission.admit(ip("192.0.2.1")).err(), Some(Shed::Peer));
        // The same address on a dual-stack listener.
        assert_eq!(admission.admit(ip("::ffff:192.0.2.1")).err(), Some(Shed::Peer));
        let proxy = [admission.admit(ip("10.1.2.3")).unwrap(), admission.admit(ip("10.1.2.3")).unwrap(), admission.admit(ip("::ffff:10.1.2.3")).unwrap()];
        assert_eq!(admission.admit(ip("198.51.100.7")).err(), Some(Shed::Full));
        assert_eq!(admission.admit(ip("10.1.2.3")).err(), Some(Shed::Full));
        // Refused for want of a slot, the address kept none of its own.
        assert!(!admission.peers.contains_key(&ip("198.51.100.7")));
        drop(proxy);
        let [one, two] = first;
        drop(one);
        let again = admission.admit(ip("192.0.2.1")).unwrap();
        drop((two, again));
        assert!(admission.peers.is_empty());
        assert_eq!(admission.slots.available_permits(), 5);
    }

    #[test]
    fn an_ipv6_host_counts_as_its_64() {
        let admission = Admission::new(Vec::new(), 10, 2);
        let _held = [admission.admit(ip("2001:db8:1:2::1")).unwrap(), admission.admit(ip("2001:db8:1:2:aaaa::9")).unwrap()];
        assert_eq!(admission.admit(ip("2001:db8:1:2:ffff::1")).err(), Some(Shed::Peer));
        assert!(admission.admit(ip("2001:db8:1:3::1")).is_ok());
    }
}
