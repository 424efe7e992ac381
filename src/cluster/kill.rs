//! The admin-kill listener: each instance subscribes to its own channel (`voxgate:kill:{instance}`)
//! and to the broadcast one (`voxgate:kill-all`, for sessions the registry does not know), and
//! ends the sessions whose ids arrive there, so `DELETE /admin/sessions/{id}` works on any
//! instance. The subscription is re-made after any Redis outage, and checked with a `PING` as
//! often as the registry is refreshed: a connection that went half-open (a failover, a dropped
//! NAT entry) stays subscribed in Redis's eyes, so publishers count it as listening while nothing
//! arrives, and without the check every kill forwarded here would be lost until TCP noticed.
//!
//! Each kill is answered under its nonce ([`acknowledge_kill`], with this instance's id
//! for a broadcast one): `ended`, or `unknown` when this instance holds no such session. The
//! deleter waits a bounded time for the answers, so it never reports a kill heard by nobody as done.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use redis::aio::ConnectionManager;
use tokio_util::sync::CancellationToken;

use super::ClusterError;
use super::registry::{self, KillAck};
use crate::session::live::LiveSessions;

/// Pause between subscription attempts while Redis is down.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Opening the pub/sub connection may take this long.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// What the listener needs: its own pub/sub connection (`client`), where answers are written
/// (`conn`), this instance's id (its channel, and its name in answers to broadcast kills), and
/// the sessions it can end.
pub(super) struct Listener {
    pub client: redis::Client,
    pub conn: ConnectionManager,
    pub instance: String,
    pub live: Arc<LiveSessions>,
}

impl Listener {
    /// Runs until `stop`: subscribe, end the sessions named, re-subscribe when the connection drops.
    pub(super) async fn run(self, stop: CancellationToken, check_every: Duration) {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                ended = self.subscribe_and_serve(check_every) => {
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

    /// End the session a kill message names, and answer it: under its nonce alone on this
    /// instance's channel, under the nonce and this instance's id on the broadcast channel.
    async fn obey(&self, channel: &str, payload: &str) {
        let (id, nonce) = registry::parse_kill_message(payload);
        let ack = if self.live.kill(id) {
            tracing::info!(session.id = %id, "session ended by an administrator (forwarded)");
            KillAck::Ended
        } else {
            KillAck::Unknown
        };
        let Some(nonce) = nonce else { return };
        // Bounded: a Redis too slow to take the answer leaves the deleter to answer 503.
        let answered = if channel == registry::BROADCAST_CHANNEL {
            acknowledge_broadcast_kill(&self.conn, nonce, &self.instance, ack).await
        } else {
            acknowledge_kill(&self.conn, nonce, ack).await
        };
        if let Err(err) = answered {
            tracing::warn!(error = %err, "could not answer an admin kill");
        }
    }

    async fn subscribe_and_serve(&self, check_every: Duration) -> redis::RedisResult<()> {
        let timed_out = |what: &'static str| redis::RedisError::from((redis::ErrorKind::Io, what));
        let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| timed_out("pub/sub connect timed out"))??;
        let channels = [registry::kill_channel(&self.instance), registry::BROADCAST_CHANNEL.to_string()];
        tokio::time::timeout(CONNECT_TIMEOUT, pubsub.subscribe(&channels))
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
                    self.obey(message.get_channel_name(), &payload).await;
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
}

/// The owner's answer to the kill sent with `nonce`.
async fn acknowledge_kill(
    conn: &ConnectionManager,
    nonce: &str,
    ack: KillAck,
) -> Result<(), ClusterError> {
    let key = registry::ack_key(nonce);
    // A kill heard twice (its PUBLISH retried after a lost reply) finds its session gone the
    // second time: that `unknown` must not replace the first answer, `ended`.
    let mut set = redis::cmd("SET");
    set.arg(&key).arg(ack.as_str()).arg("EX").arg(registry::ACK_TTL_S);
    if ack == KillAck::Unknown {
        set.arg("NX");
    }
    let set = &set;
    registry::bounded(conn, |mut c| async move { set.query_async::<()>(&mut c).await }).await
}

/// This instance's answer to a kill heard on [`BROADCAST_CHANNEL`], sent with `nonce`.
async fn acknowledge_broadcast_kill(
    conn: &ConnectionManager,
    nonce: &str,
    instance: &str,
    ack: KillAck,
) -> Result<(), ClusterError> {
    let key = registry::broadcast_ack_key(nonce);
    let mut pipe = redis::pipe();
    // As for a forwarded kill: an `unknown` heard second never replaces `ended`.
    if ack == KillAck::Unknown {
        pipe.atomic().hset_nx(&key, instance, ack.as_str()).ignore();
    } else {
        pipe.atomic().hset(&key, instance, ack.as_str()).ignore();
    }
    pipe.expire(&key, registry::ACK_TTL_S as i64).ignore();
    let pipe = &pipe;
    registry::bounded(conn, |mut c| async move { pipe.query_async::<()>(&mut c).await }).await
}
