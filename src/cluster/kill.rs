//! The admin-kill listener: each instance subscribes to its own channel (`voxgate:kill:{instance}`)
//! and ends the sessions whose ids arrive there, so `DELETE /admin/sessions/{id}` works on any
//! instance. The subscription is re-made after any Redis outage, and checked with a `PING` as
//! often as the registry is refreshed: a connection that went half-open (a failover, a dropped
//! NAT entry) stays subscribed in Redis's eyes, so publishers count it as listening while nothing
//! arrives, and without the check every kill forwarded here would be lost until TCP noticed.
//!
//! Each kill is answered under its nonce ([`registry::acknowledge_kill`]): `ended`, or `unknown`
//! when this instance holds no such session (its registry entry outlived it). The deleter waits a
//! bounded time for the answer, so it never reports a kill that was heard by nobody as done.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use super::registry::{self, KillAck};
use crate::session::live::LiveSessions;

/// Pause between subscription attempts while Redis is down.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Opening the pub/sub connection may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Runs until `stop`: subscribe, end the sessions named, re-subscribe when the connection drops.
/// `conn`: where the answers to kills are written.
pub(super) async fn listen(
    client: redis::Client,
    conn: ConnectionManager,
    channel: String,
    live: Arc<LiveSessions>,
    stop: CancellationToken,
    check_every: Duration,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            ended = subscribe_and_serve(&client, &conn, &channel, &live, check_every) => {
                if let Err(err) = ended {
                    tracing::debug!(error = ?err.kind(), "admin-kill subscription lost; retrying");
                }
            }
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(RETRY_AFTER) => {}
        }
    }
}

async fn subscribe_and_serve(
    client: &redis::Client,
    conn: &ConnectionManager,
    channel: &str,
    live: &LiveSessions,
    check_every: Duration,
) -> redis::RedisResult<()> {
    let timed_out = |what: &'static str| redis::RedisError::from((redis::ErrorKind::Io, what));
    let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_pubsub())
        .await
        .map_err(|_| timed_out("pub/sub connect timed out"))??;
    tokio::time::timeout(CONNECT_TIMEOUT, pubsub.subscribe(channel))
        .await
        .map_err(|_| timed_out("subscribe timed out"))??;
    let (mut sink, mut messages) = pubsub.split();
    let mut checks = tokio::time::interval_at(tokio::time::Instant::now() + check_every, check_every);
    checks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else { return Ok(()) };
                let Ok(payload) = message.get_payload::<String>() else { continue };
                let (id, nonce) = registry::parse_kill_message(&payload);
                let ack = if live.kill(id) {
                    tracing::info!(session.id = %id, "session ended by an administrator (forwarded)");
                    KillAck::Ended
                } else {
                    KillAck::Unknown
                };
                // Bounded: a Redis too slow to take the answer leaves the deleter to answer 503.
                if let Some(nonce) = nonce
                    && let Err(err) = registry::acknowledge_kill(conn, nonce, ack).await
                {
                    tracing::warn!(error = %err, "could not answer an admin kill");
                }
            }
            _ = checks.tick() => {
                // Any answer will do (subscribed, Redis answers PING as a message-shaped array).
                tokio::time::timeout(CONNECT_TIMEOUT, sink.ping::<redis::Value>())
                    .await
                    .map_err(|_| timed_out("the subscription stopped answering"))??;
            }
        }
    }
}
