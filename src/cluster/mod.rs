//! Many voxgate instances as one service (CONTRACT §11).
//!
//! Every instance has an identity ([`hostname`] unless `server.instance_id` is set). With
//! `redis.url`, [`Cluster`] also keeps, in Redis ([`registry`]):
//! - a registry of live sessions (id, instance, user hash, model, started), refreshed by the
//!   instance that holds them every third of `redis.session_ttl_ms` and expiring when it dies;
//! - the per-user session cap across instances (`server.max_sessions_per_user`), in the same
//!   atomic admission;
//! - the admin kill: `DELETE /admin/sessions/{id}` on any instance publishes the id to the owner's
//!   channel, whose [`kill`] listener ends the session and answers; the deleter waits a bounded
//!   time for that answer, and releases an entry no instance holds (stale after a restart within
//!   the TTL under the same `instance_id`), so a kill is reported done only when one ended. A
//!   session with no entry (Redis came back empty, it was admitted while Redis was down, or its
//!   instance is cut off from Redis) is asked for on a channel every instance hears: not found only
//!   when every instance that heard it answered that it does not hold it.
//!
//! Redis down degrades, never refuses ([`health`]): caps fall back to this instance's own count, listings show
//! this instance only, `voxgate_redis_up` is 0 and `/readyz` says so; the next successful refresh
//! re-registers every local session and everything is shared again.

mod health;
mod identity;
mod kill;
mod registry;

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use redis::aio::ConnectionManager;
use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, DropGuard};

pub use identity::hostname;
pub use registry::SessionEntry;
pub(crate) use registry::{MIN_SESSION_TTL_MS, bounded};
use health::RedisHealth;
use identity::IdClaim;
use registry::{KillAck, Registry, Seated};

use crate::session::live::{AdmitError, LiveSessions};
use crate::telemetry::metrics::Metrics;

/// Ended sessions waiting to be removed from Redis. When full (Redis far behind), entries are
/// left to expire on their own within one TTL.
const RELEASE_QUEUE: usize = 1024;
/// How long an admin kill waits for the owning instance to answer. Its listener answers as soon
/// as the message arrives; one that has not by then is not hearing (a half-open subscription, a
/// stalled instance) and the admin is told to try again.
const KILL_ACK_WAIT: Duration = Duration::from_secs(2);

/// Why a Redis operation of the cluster failed. Only the kind is kept: a URL may hold a password.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error("redis error ({0:?})")]
    Redis(redis::ErrorKind),
    /// Redis refused `redis.url`'s credentials ([`credentials_refused`]): not an outage that ends
    /// by itself, but a configuration an operator must fix.
    #[error("redis refused the credentials in redis.url ({0})")]
    Credentials(&'static str),
    #[error("redis did not answer in time")]
    Timeout,
    #[error("a registry entry could not be encoded")]
    Encoding,
    #[error("redis was down at the last attempt; the next refresh tries again")]
    Down,
}

impl ClusterError {
    /// A failed Redis call, by kind only (or as refused credentials).
    pub fn from_redis(err: &redis::RedisError) -> Self {
        match credentials_refused(err) {
            Some(code) => Self::Credentials(code),
            None => Self::Redis(err.kind()),
        }
    }
}

/// `Some(what Redis answered)` when `err` says Redis refused the credentials in `redis.url`, by
/// kind or error code only: the error's detail may repeat the user name.
pub fn credentials_refused(err: &redis::RedisError) -> Option<&'static str> {
    match err.kind() {
        // redis-rs's verdict on a refused `AUTH` at connection set-up: a wrong password, or a
        // password Redis does not ask for.
        redis::ErrorKind::AuthenticationFailed => Some("AuthenticationFailed"),
        // Codes redis-rs does not know pass through as extensions: NOAUTH when no password was
        // given where one is required, WRONGPASS when `HELLO … AUTH` (RESP3) is refused.
        redis::ErrorKind::Extension => match err.code() {
            Some("NOAUTH") => Some("NOAUTH"),
            Some("WRONGPASS") => Some("WRONGPASS"),
            _ => None,
        },
        _ => None,
    }
}

/// What became of an admin kill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillOutcome {
    /// The session was on this instance and is closing.
    Ended,
    /// The instance holding it confirmed that it is closing.
    Forwarded,
    /// No instance holds a session with this id (a stale registry entry is released).
    NotFound,
    /// The registry cannot be reached now, or the owning instance did not confirm in time; try
    /// again.
    Unreachable,
}

/// Which sessions a listing covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ListingScope {
    /// Every instance's (from the registry).
    Cluster,
    /// This instance's only (no Redis, or Redis is down).
    Instance,
}

/// The connections the cluster needs when `redis.url` is set.
pub struct RedisLink {
    /// For the kill listener's own pub/sub connection.
    pub client: redis::Client,
    pub conn: ConnectionManager,
    /// `redis.session_ttl_ms`.
    pub ttl: Duration,
}

/// This instance's view of the cluster.
pub struct Cluster {
    instance: String,
    /// Every session this instance holds, as registered; the refresh source and the local listing.
    seats: DashMap<String, Seated>,
    shared: Option<Shared>,
    /// Stops the background tasks when the cluster goes away.
    _stop: DropGuard,
}

struct Shared {
    registry: Registry,
    conn: ConnectionManager,
    id_claim: IdClaim,
    releases: mpsc::Sender<(String, Option<String>)>,
    health: RedisHealth,
    metrics: Metrics,
}

/// A session's place in the cluster; dropping it removes the session from the registry.
#[must_use = "the session is registered only while its seat lives"]
pub struct Seat {
    cluster: Arc<Cluster>,
    id: String,
}

impl Cluster {
    /// Start the cluster view (and, with Redis, its refresh and kill-listener tasks).
    pub fn start(
        instance: String,
        redis: Option<RedisLink>,
        live: Arc<LiveSessions>,
        metrics: Metrics,
    ) -> Arc<Self> {
        let stop = CancellationToken::new();
        metrics.set_instance(&instance);
        let Some(link) = redis else {
            return Arc::new(Self {
                instance,
                seats: DashMap::new(),
                shared: None,
                _stop: stop.drop_guard(),
            });
        };
        let (releases, release_rx) = mpsc::channel(RELEASE_QUEUE);
        let shared = Shared {
            registry: Registry::new(link.conn.clone(), link.ttl),
            conn: link.conn.clone(),
            id_claim: IdClaim::new(&instance, link.ttl, metrics.clone()),
            releases,
            health: RedisHealth::new(metrics.clone()),
            metrics,
        };
        let cluster = Arc::new(Self {
            instance,
            seats: DashMap::new(),
            shared: Some(shared),
            _stop: stop.clone().drop_guard(),
        });
        tokio::spawn(maintain(
            Arc::downgrade(&cluster),
            release_rx,
            link.ttl / 3,
            stop.clone(),
        ));
        let listener = kill::Listener { client: link.client, conn: link.conn.clone(), instance: cluster.instance.clone(), live };
        tokio::spawn(listener.run(stop, link.ttl / 3));
        cluster
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// `None` without Redis, else whether Redis answered last time.
    pub fn redis_up(&self) -> Option<bool> {
        self.shared.as_ref().map(|s| s.health.is_up())
    }

    /// Whether another running instance claimed this one's `server.instance_id` (see
    /// [`identity`]); `false` without Redis.
    pub fn id_conflict(&self) -> bool {
        self.shared.as_ref().is_some_and(|s| s.id_claim.conflict())
    }

    /// The server is stopping: give up the claim on the instance id, so a successor under the
    /// same id (a restarted pod) starts without a conflict. Bounded like every Redis call.
    pub async fn leave(&self) {
        // With Redis down there is nothing to give up that would not expire by itself.
        if let Some(shared) = self.shared.as_ref().filter(|s| s.health.is_up())
            && let Err(err) = shared.id_claim.give_up(&shared.conn).await
        {
            tracing::debug!(error = %err, "the instance id's claim was not given up; it expires within one TTL");
        }
    }

    /// Register a session that this instance's own caps already admitted, enforcing `cap`
    /// (the user's cap key and `server.max_sessions_per_user`) across instances. With Redis down
    /// the session is admitted on the local caps alone and registered once Redis is back; one
    /// admission a second ([`health::PROBE_EVERY`]) tries Redis all the same, so the caps are
    /// shared again as soon as it answers.
    ///
    /// Cancel-safe: dropped while Redis answers (the client went away), the registration it may
    /// have made is released as an ended session's is, not left holding the user's cap for a TTL.
    pub async fn admit(
        self: &Arc<Self>,
        entry: SessionEntry,
        cap: Option<(String, usize)>,
    ) -> Result<Seat, AdmitError> {
        if let Some(shared) = &self.shared {
            // During an outage admissions do not wait on Redis, but for the odd probe.
            let shared_result = match shared.health.is_up() || shared.health.claim_probe() {
                true => {
                    let unfinished = Unfinished { shared, id: &entry.id, cap_key: cap.as_ref().map(|(key, _)| key.as_str()) };
                    let result = shared.registry.admit(&entry, cap.as_ref().map(|(key, max)| (key.as_str(), *max))).await;
                    // A timeout too may have registered it: the seat below releases it, or a
                    // refusal's release removes nothing. Only a drop before this line needs one.
                    std::mem::forget(unfinished);
                    result
                }
                false => Err(ClusterError::Down),
            };
            match shared_result {
                Ok(true) => shared.set_up(),
                Ok(false) => {
                    // A refusal is an answer: Redis is up.
                    shared.set_up();
                    return Err(AdmitError::UserLimit);
                }
                Err(err) => {
                    shared.set_down(err);
                    shared.metrics.redis_fallback("session_cap");
                    tracing::debug!(error = %err, "session registry unavailable; admitted on local caps");
                }
            }
        }
        let id = entry.id.clone();
        self.seats.insert(
            id.clone(),
            Seated {
                entry,
                cap_key: cap.map(|(key, _)| key),
            },
        );
        Ok(Seat {
            cluster: self.clone(),
            id,
        })
    }

    /// The sessions of every instance (or of this one when Redis is absent or down).
    pub async fn list(&self) -> (Vec<SessionEntry>, ListingScope) {
        if let Some(shared) = &self.shared {
            match shared.registry.list().await {
                Ok(entries) => {
                    shared.set_up();
                    return (entries, ListingScope::Cluster);
                }
                Err(err) => {
                    shared.set_down(err);
                    tracing::warn!(error = %err, "session registry unavailable; listing this instance only");
                }
            }
        }
        (self.list_local(), ListingScope::Instance)
    }

    /// This instance's sessions, oldest first, without asking Redis.
    pub(crate) fn list_local(&self) -> Vec<SessionEntry> {
        let mut local: Vec<SessionEntry> = self.seats.iter().map(|s| s.entry.clone()).collect();
        local.sort_by(|a, b| {
            a.started_at
                .cmp(&b.started_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        local
    }

    /// End session `id` wherever it runs: [`KillOutcome::Forwarded`] only once its owner has
    /// confirmed, within [`KILL_ACK_WAIT`].
    pub async fn kill(&self, live: &LiveSessions, id: &str) -> KillOutcome {
        if live.kill(id) {
            return KillOutcome::Ended;
        }
        let Some(shared) = &self.shared else {
            return KillOutcome::NotFound;
        };
        let entry = match shared.registry.find(id).await {
            Ok(Some(entry)) => entry,
            Ok(None) => return self.kill_unregistered(shared, id).await,
            Err(err) => {
                shared.set_down(err);
                tracing::warn!(error = %err, "session registry unavailable; cannot forward an admin kill");
                return KillOutcome::Unreachable;
            }
        };
        // Not live here (a session is live before it is registered), so an entry naming this
        // instance outlived its session: it restarted within the TTL under the same id.
        if entry.instance == self.instance {
            return self.release_stale(shared, &entry).await;
        }
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let heard = shared.registry.publish_kill(&entry.instance, id, &nonce).await;
        let ack = match heard {
            Ok(0) => return KillOutcome::Unreachable,
            Ok(_) => shared.registry.kill_ack(&nonce, KILL_ACK_WAIT).await,
            Err(err) => Err(err),
        };
        match ack {
            Ok(Some(KillAck::Ended)) => KillOutcome::Forwarded,
            Ok(Some(KillAck::Unknown)) => self.release_stale(shared, &entry).await,
            Ok(None) => {
                tracing::warn!(instance = %entry.instance, "an admin kill was not confirmed in time");
                KillOutcome::Unreachable
            }
            Err(err) => {
                shared.set_down(err);
                tracing::warn!(error = %err, "cannot forward an admin kill");
                KillOutcome::Unreachable
            }
        }
    }

    /// End session `id`, which the registry does not know, on whichever instance holds it: every
    /// instance that hears the broadcast answers, and `NotFound` only when all of them said they
    /// do not hold it. Nobody hearing it (not even this instance's own listener) or not everyone
    /// answering in [`KILL_ACK_WAIT`] leaves it unknown: `Unreachable`. Instances that predate the
    /// broadcast do not hear it and are not counted.
    async fn kill_unregistered(&self, shared: &Shared, id: &str) -> KillOutcome {
        let nonce = uuid::Uuid::new_v4().simple().to_string();
        let verdict = match shared.registry.broadcast_kill(id, &nonce).await {
            Ok(0) => {
                tracing::warn!("an admin kill of an unregistered session was heard by no instance");
                return KillOutcome::Unreachable;
            }
            Ok(heard) => shared.registry.broadcast_acks(&nonce, heard, KILL_ACK_WAIT).await,
            Err(err) => Err(err),
        };
        match verdict {
            Ok(Some(KillAck::Ended)) => KillOutcome::Forwarded,
            Ok(Some(KillAck::Unknown)) => KillOutcome::NotFound,
            Ok(None) => {
                tracing::warn!("an admin kill of an unregistered session was not answered by every instance in time");
                KillOutcome::Unreachable
            }
            Err(err) => {
                shared.set_down(err);
                tracing::warn!(error = %err, "cannot broadcast an admin kill");
                KillOutcome::Unreachable
            }
        }
    }

    /// Remove the entry of a session its instance does not hold (its place in the user's cap
    /// too: the cap key is the entry's user when a cap applies); nothing ended, so `NotFound`.
    async fn release_stale(&self, shared: &Shared, entry: &SessionEntry) -> KillOutcome {
        let result = shared.registry.release(&entry.id, Some(&entry.user)).await;
        shared.record(&result);
        if let Err(err) = result {
            tracing::warn!(error = %err, "a stale session entry could not be released; it expires within one TTL");
        }
        KillOutcome::NotFound
    }
}

impl Shared {
    fn set_up(&self) {
        self.health.set_up();
    }

    fn set_down(&self, err: ClusterError) {
        self.health.set_down(err);
        // Whether another instance holds this one's id is not known while Redis cannot say.
        self.id_claim.forget_conflict();
    }

    /// Queue the removal of session `id` (and its place under `cap_key`) from Redis. Best effort:
    /// an entry whose release is lost expires within one TTL.
    fn queue_release(&self, id: String, cap_key: Option<String>) {
        let _ = self.releases.try_send((id, cap_key));
    }

    /// Record the outcome of a Redis round trip.
    fn record<T>(&self, result: &Result<T, ClusterError>) {
        match result {
            Ok(_) => self.set_up(),
            Err(err) => self.set_down(*err),
        }
    }
}

/// An admission's Redis call in flight: dropped with it (the caller went away), it queues the
/// release of what the call may have registered; forgotten once the call has finished.
struct Unfinished<'a> {
    shared: &'a Shared,
    id: &'a str,
    cap_key: Option<&'a str>,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        self.shared.queue_release(self.id.to_string(), self.cap_key.map(str::to_string));
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        let Some((id, seated)) = self.cluster.seats.remove(&self.id) else {
            return;
        };
        if let Some(shared) = &self.cluster.shared {
            shared.queue_release(id, seated.cap_key);
        }
    }
}

/// Refresh every local session's entry each `every`, and remove ended ones as they end.
async fn maintain(
    cluster: std::sync::Weak<Cluster>,
    mut releases: mpsc::Receiver<(String, Option<String>)>,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            Some((id, cap_key)) = releases.recv() => {
                let Some(cluster) = cluster.upgrade() else { return };
                let Some(shared) = &cluster.shared else { return };
                let result = shared.registry.release(&id, cap_key.as_deref()).await;
                shared.record(&result);
            }
            _ = tick.tick() => {
                let Some(cluster) = cluster.upgrade() else { return };
                let Some(shared) = &cluster.shared else { return };
                // The sessions' entries first: `redis.session_ttl_ms`'s minimum allows for one
                // slow call before them, and a release may be that one.
                let seated: Vec<Seated> = cluster.seats.iter().map(|s| s.value().clone()).collect();
                let result = shared.registry.refresh(&seated).await;
                shared.record(&result);
                let claimed = shared.id_claim.renew(&shared.conn).await;
                shared.record(&claimed);
            }
        }
    }
}
