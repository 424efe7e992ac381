//! The Redis side of the cluster: the registry of live sessions and the per-user session caps, kept
//! by atomic Lua scripts on Redis's own clock (instances need not agree on time).
//!
//! Keys (every member expires unless its instance refreshes it, so a dead instance's sessions
//! vanish within one TTL):
//! - `voxgate:session:{id}` — the session's [`SessionEntry`] as JSON, with a TTL;
//! - `voxgate:sessions` — sorted set of session ids scored by expiry (ms), for listing;
//! - `voxgate:user-sessions:{user}` — sorted set of one user's session ids scored by expiry, the
//!   cross-instance cap;
//! - channel `voxgate:kill:{instance}` — admin kills for the instance: `{id} {nonce}` (a bare `{id}`
//!   from an instance that predates acknowledgements is still obeyed, unacknowledged);
//! - `voxgate:kill-ack:{nonce}` — the owner's answer to one kill ([`KillAck`]), with a short TTL;
//! - channel `voxgate:kill-all` — kills of a session with no registry entry, heard by every
//!   instance (an instance that predates it does not subscribe, and is not counted);
//! - `voxgate:kill-acks:{nonce}` — hash of each instance's answer to one such kill, short TTL.

use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};

use super::ClusterError;

/// A Redis round trip may take this long before the caller degrades to local behaviour.
const REDIS_TIMEOUT: Duration = Duration::from_millis(REDIS_TIMEOUT_MS);
const REDIS_TIMEOUT_MS: u64 = 500;
/// The shortest `redis.session_ttl_ms`: entries are refreshed every third of it, one call at a
/// time, so a refresh (or a release queued before it) that runs out its time delays the next by
/// up to [`REDIS_TIMEOUT`]; at three of them, one slow call does not let the entries lapse.
pub(crate) const MIN_SESSION_TTL_MS: u64 = 3 * REDIS_TIMEOUT_MS;
/// Sessions refreshed per script call, so one call never holds Redis for long.
const REFRESH_BATCH: usize = 200;
const INDEX_KEY: &str = "voxgate:sessions";
/// How long an owner's answer to a kill is kept: far longer than anyone waits for it.
pub(super) const ACK_TTL_S: u64 = 30;
/// How often a deleter looks for the owner's answer.
const ACK_POLL: Duration = Duration::from_millis(50);

/// A live session as every instance sees it (no PHI: `user` is the keyed hash of `sub`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    pub id: String,
    /// `server.instance_id` of the instance that holds the session.
    pub instance: String,
    pub user: String,
    pub model: String,
    /// Unix seconds.
    pub started_at: u64,
}

/// A session this instance holds, as refreshed into Redis.
#[derive(Debug, Clone)]
pub(super) struct Seated {
    pub entry: SessionEntry,
    /// The per-user cap key, when a per-user cap applies.
    pub cap_key: Option<String>,
}

/// The script preamble: Redis's clock in milliseconds.
macro_rules! now_ms {
    () => {
        "local t = redis.call('TIME')\nlocal now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    };
}

/// KEYS: index, session key[, user key]; ARGV: id, ttl_ms, max per user, entry JSON.
/// Returns 1 when admitted, 0 when the user is at the cap.
const ADMIT: &str = concat!(
    now_ms!(),
    r#"
local ttl = tonumber(ARGV[2])
if #KEYS == 3 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  -- Already counted (a retry after the reply to the first run was lost): admitted, not a second seat.
  if not redis.call('ZSCORE', KEYS[3], ARGV[1])
    and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[3]) then return 0 end
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[1])
  redis.call('PEXPIRE', KEYS[3], ttl)
end
redis.call('SET', KEYS[2], ARGV[4], 'PX', ttl)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
return 1
"#
);

/// KEYS: index, then per session its key and its user key (the session key again when no cap
/// applies); ARGV: ttl_ms, then per session id, entry JSON, "1" when capped else "0".
/// Re-creates entries too, so a Redis that restarted empty learns every live session again.
const REFRESH: &str = concat!(
    now_ms!(),
    r#"
local ttl = tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
for i = 2, #KEYS, 2 do
  local a = (i / 2 - 1) * 3 + 2
  local id = ARGV[a]
  redis.call('SET', KEYS[i], ARGV[a + 1], 'PX', ttl)
  redis.call('ZADD', KEYS[1], now + ttl, id)
  if ARGV[a + 2] == '1' then
    redis.call('ZADD', KEYS[i + 1], now + ttl, id)
    redis.call('PEXPIRE', KEYS[i + 1], ttl)
  end
end
return 1
"#
);

/// KEYS: index, session key[, user key]; ARGV: id.
const RELEASE: &str = r#"
redis.call('DEL', KEYS[2])
redis.call('ZREM', KEYS[1], ARGV[1])
if #KEYS == 3 then redis.call('ZREM', KEYS[3], ARGV[1]) end
return 1
"#;

fn session_key(id: &str) -> String {
    format!("voxgate:session:{id}")
}

fn user_key(cap_key: &str) -> String {
    format!("voxgate:user-sessions:{cap_key}")
}

/// The pub/sub channel on which `instance` takes admin kills.
pub(super) fn kill_channel(instance: &str) -> String {
    format!("voxgate:kill:{instance}")
}

/// The pub/sub channel on which every instance takes kills of sessions the registry does not know.
pub(super) const BROADCAST_CHANNEL: &str = "voxgate:kill-all";

pub(super) fn ack_key(nonce: &str) -> String {
    format!("voxgate:kill-ack:{nonce}")
}

pub(super) fn broadcast_ack_key(nonce: &str) -> String {
    format!("voxgate:kill-acks:{nonce}")
}

/// What the owner of a killed session answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KillAck {
    /// It held the session, which is closing.
    Ended,
    /// It holds no such session: the registry entry outlived it.
    Unknown,
}

impl KillAck {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            KillAck::Ended => "ended",
            KillAck::Unknown => "unknown",
        }
    }

    fn parse(value: &str) -> Option<Self> {
        match value {
            "ended" => Some(KillAck::Ended),
            "unknown" => Some(KillAck::Unknown),
            _ => None,
        }
    }
}

/// A kill message: the session id, and the nonce under which the owner acknowledges it.
pub(super) fn kill_message(id: &str, nonce: &str) -> String {
    format!("{id} {nonce}")
}

/// `(id, nonce)` of a kill message; no nonce from an instance that predates acknowledgements.
/// Ids and nonces are ours (no spaces); a nonce that is not one is ignored, never made a key.
pub(super) fn parse_kill_message(payload: &str) -> (&str, Option<&str>) {
    match payload.split_once(' ') {
        Some((id, nonce)) if nonce.len() <= 64 && nonce.bytes().all(|b| b.is_ascii_alphanumeric()) => {
            (id, Some(nonce))
        }
        Some((id, _)) => (id, None),
        None => (payload, None),
    }
}

pub(super) struct Registry {
    conn: ConnectionManager,
    ttl_ms: u64,
    admit: redis::Script,
    refresh: redis::Script,
    release: redis::Script,
}

impl Registry {
    pub fn new(conn: ConnectionManager, ttl: Duration) -> Self {
        Self {
            conn,
            ttl_ms: ttl.as_millis() as u64,
            admit: redis::Script::new(ADMIT),
            refresh: redis::Script::new(REFRESH),
            release: redis::Script::new(RELEASE),
        }
    }

    /// Register a new session, enforcing `cap` = (user key, max) across instances.
    /// `Ok(false)`: the user is at the cap.
    pub async fn admit(
        &self,
        entry: &SessionEntry,
        cap: Option<(&str, usize)>,
    ) -> Result<bool, ClusterError> {
        let json = serde_json::to_string(entry).map_err(|_| ClusterError::Encoding)?;
        let mut invocation = self.admit.key(INDEX_KEY);
        invocation.key(session_key(&entry.id));
        if let Some((cap_key, _)) = cap {
            invocation.key(user_key(cap_key));
        }
        invocation
            .arg(&entry.id)
            .arg(self.ttl_ms)
            .arg(cap.map_or(0, |(_, max)| max))
            .arg(json);
        let invocation = &invocation;
        let admitted: i64 = bounded(&self.conn, |mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        Ok(admitted == 1)
    }

    /// Extend (or re-create) the entries of every session this instance holds.
    pub async fn refresh(&self, seated: &[Seated]) -> Result<(), ClusterError> {
        if seated.is_empty() {
            let _: String = bounded(&self.conn, |mut c| async move { redis::cmd("PING").query_async(&mut c).await }).await?;
            return Ok(());
        }
        for batch in seated.chunks(REFRESH_BATCH) {
            let mut invocation = self.refresh.key(INDEX_KEY);
            invocation.arg(self.ttl_ms);
            for seat in batch {
                let key = session_key(&seat.entry.id);
                let json =
                    serde_json::to_string(&seat.entry).map_err(|_| ClusterError::Encoding)?;
                invocation
                    .key(&key)
                    .key(seat.cap_key.as_deref().map(user_key).unwrap_or(key));
                invocation
                    .arg(&seat.entry.id)
                    .arg(json)
                    .arg(if seat.cap_key.is_some() { "1" } else { "0" });
            }
            let invocation = &invocation;
            let _: i64 = bounded(&self.conn, |mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        }
        Ok(())
    }

    /// Remove an ended session (its place in the user's cap is free at once).
    pub async fn release(&self, id: &str, cap_key: Option<&str>) -> Result<(), ClusterError> {
        let mut invocation = self.release.key(INDEX_KEY);
        invocation.key(session_key(id));
        if let Some(cap_key) = cap_key {
            invocation.key(user_key(cap_key));
        }
        invocation.arg(id);
        let invocation = &invocation;
        let _: i64 = bounded(&self.conn, |mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        Ok(())
    }

    /// Every live session of every instance, oldest first.
    pub async fn list(&self) -> Result<Vec<SessionEntry>, ClusterError> {
        let ids: Vec<String> = bounded(&self.conn, |mut c| async move { c.zrange(INDEX_KEY, 0, -1).await }).await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = ids.iter().map(|id| session_key(id)).collect();
        let keys = &keys;
        let values: Vec<Option<String>> =
            bounded(&self.conn, |mut c| async move { redis::cmd("MGET").arg(keys).query_async(&mut c).await }).await?;
        // An entry that expired since the index was last pruned is simply gone.
        let mut entries: Vec<SessionEntry> = values
            .into_iter()
            .flatten()
            .filter_map(|json| serde_json::from_str(&json).ok())
            .collect();
        entries.sort_by(|a, b| {
            a.started_at
                .cmp(&b.started_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        Ok(entries)
    }

    /// The registry entry of one session, if any instance holds it.
    pub async fn find(&self, id: &str) -> Result<Option<SessionEntry>, ClusterError> {
        let key = session_key(id);
        let key = &key;
        let json: Option<String> = bounded(&self.conn, |mut c| async move { c.get(key).await }).await?;
        Ok(json.and_then(|json| serde_json::from_str(&json).ok()))
    }

    /// Ask `instance` to end session `id`, answering under `nonce`; returns how many subscribers
    /// heard it.
    pub async fn publish_kill(
        &self,
        instance: &str,
        id: &str,
        nonce: &str,
    ) -> Result<usize, ClusterError> {
        let (channel, message) = (kill_channel(instance), kill_message(id, nonce));
        let (channel, message) = (&channel, &message);
        bounded(&self.conn, |mut c| async move { c.publish(channel, message).await }).await
    }

    /// Ask every instance to end session `id`, answering under `nonce`; returns how many
    /// subscribers heard it (instances that predate [`BROADCAST_CHANNEL`] are not among them).
    ///
    /// PUBLISH's own count includes pattern subscribers (an operator's `PSUBSCRIBE 'voxgate:*'`),
    /// which never answer: waiting for them turned every 404 into a 503. So the count is the
    /// channel's own subscribers (`PUBSUB NUMSUB`, taken atomically with the PUBLISH), at most
    /// PUBLISH's.
    pub async fn broadcast_kill(&self, id: &str, nonce: &str) -> Result<usize, ClusterError> {
        let message = kill_message(id, nonce);
        let mut pipe = redis::pipe();
        pipe.atomic().publish(BROADCAST_CHANNEL, &message).cmd("PUBSUB").arg("NUMSUB").arg(BROADCAST_CHANNEL);
        let pipe = &pipe;
        let (heard, (_, listeners)): (usize, (String, usize)) =
            bounded(&self.conn, |mut c| async move { pipe.query_async(&mut c).await }).await?;
        Ok(heard.min(listeners))
    }

    /// The verdict on the broadcast kill sent with `nonce`, looked for until `wait` has passed:
    /// `Ended` once any instance ended it, `Unknown` once all `heard` answered that they hold no
    /// such session, `None` when neither by then.
    pub async fn broadcast_acks(
        &self,
        nonce: &str,
        heard: usize,
        wait: Duration,
    ) -> Result<Option<KillAck>, ClusterError> {
        let key = broadcast_ack_key(nonce);
        let key = &key;
        poll_ack(wait, || async move {
            let answers: Vec<String> = bounded(&self.conn, |mut c| async move { c.hvals(key).await }).await?;
            let answers: Vec<KillAck> = answers.iter().filter_map(|a| KillAck::parse(a)).collect();
            Ok(if answers.contains(&KillAck::Ended) {
                Some(KillAck::Ended)
            } else {
                (answers.len() >= heard).then_some(KillAck::Unknown)
            })
        })
        .await
    }

    /// The owner's answer to the kill sent with `nonce`, looked for until `wait` has passed
    /// (`None`: no answer by then).
    pub async fn kill_ack(
        &self,
        nonce: &str,
        wait: Duration,
    ) -> Result<Option<KillAck>, ClusterError> {
        let key = ack_key(nonce);
        let key = &key;
        poll_ack(wait, || async move {
            let value: Option<String> = bounded(&self.conn, |mut c| async move { c.get(key).await }).await?;
            Ok(value.as_deref().and_then(KillAck::parse))
        })
        .await
    }
}

/// Poll for a kill's acknowledgement every [`ACK_POLL`] until `wait` has passed. A poll that fails
/// (one slow answer) is tried again: only a wait in which no poll got an answer is an error, which
/// the caller takes as Redis being down (a single late GET used to mark the cluster down, and with
/// it the cross-instance caps, until the next refresh).
async fn poll_ack<F, Fut>(wait: Duration, mut poll: F) -> Result<Option<KillAck>, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<KillAck>, ClusterError>>,
{
    let deadline = tokio::time::Instant::now() + wait;
    let mut answered = false;
    loop {
        match poll().await {
            Ok(Some(ack)) => return Ok(Some(ack)),
            Ok(None) => answered = true,
            Err(err) if !answered && tokio::time::Instant::now() >= deadline => return Err(err),
            Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(ACK_POLL).await;
    }
}

/// One Redis round trip, `call` on a handle of `conn`, under [`REDIS_TIMEOUT`]; errors keep only
/// their kind (a URL may hold a password). Also the tickets' (`policy::tickets`).
///
/// A call that finds its connection dropped (Redis restarted, failed over, or a proxy cut it) is
/// made once more within the same bound: redis-rs's connection manager replaces a dead connection
/// only after a command failed on it, and does not retry that command, so without this the first
/// call after every restart fails although Redis answers.
pub(crate) async fn bounded<T, Fut>(
    conn: &ConnectionManager,
    call: impl Fn(ConnectionManager) -> Fut,
) -> Result<T, ClusterError>
where
    Fut: Future<Output = redis::RedisResult<T>>,
{
    let attempts = async {
        match call(conn.clone()).await {
            Err(err) if err.is_connection_dropped() => call(conn.clone()).await,
            other => other,
        }
    };
    match tokio::time::timeout(REDIS_TIMEOUT, attempts).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(ClusterError::from_redis(&err)),
        Err(_) => Err(ClusterError::Timeout),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kill_messages_carry_a_nonce_and_older_bare_ids_still_parse() {
        assert_eq!(parse_kill_message(&kill_message("vgs_1", "abc123")), ("vgs_1", Some("abc123")));
        assert_eq!(parse_kill_message("vgs_1"), ("vgs_1", None), "from an instance without acks");
        // Never made into a key: a nonce that is not one of ours.
        assert_eq!(parse_kill_message("vgs_1 a:b"), ("vgs_1", None));
        assert_eq!(parse_kill_message(&format!("vgs_1 {}", "a".repeat(65))), ("vgs_1", None));
        assert_eq!(KillAck::parse(KillAck::Ended.as_str()), Some(KillAck::Ended));
        assert_eq!(KillAck::parse(KillAck::Unknown.as_str()), Some(KillAck::Unknown));
        assert_eq!(KillAck::parse("maybe"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn one_failed_poll_for_a_kill_ack_is_tried_again() {
        use std::sync::atomic::{AtomicU32, Ordering};
        let polls = AtomicU32::new(0);
        // The first poll times out; the owner's answer is read by a later one.
        let acked = poll_ack(Duration::from_secs(2), || {
            let n = polls.fetch_add(1, Ordering::SeqCst);
            async move {
                match n {
                    0 => Err(ClusterError::Timeout),
                    1 => Ok(None),
                    _ => Ok(Some(KillAck::Ended)),
                }
            }
        })
        .await;
        assert_eq!(acked, Ok(Some(KillAck::Ended)));
        // A late poll, then nothing by the deadline: no answer, not an outage.
        let first = AtomicU32::new(0);
        let unanswered = poll_ack(Duration::from_secs(2), || {
            let n = first.fetch_add(1, Ordering::SeqCst);
            async move { if n == 0 { Err(ClusterError::Timeout) } else { Ok(None) } }
        })
        .await;
        assert_eq!(unanswered, Ok(None));
        // Only the last poll late (it started in the wait's last half second): Redis answered
        // the others, so this is no answer, not an outage.
        let last = AtomicU32::new(0);
        let late_at_the_end = poll_ack(Duration::from_secs(2), || {
            let n = last.fetch_add(1, Ordering::SeqCst);
            async move {
                if n < 30 {
                    return Ok(None);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
                Err(ClusterError::Timeout)
            }
        })
        .await;
        assert_eq!(late_at_the_end, Ok(None));
        // Failing to the end: the caller learns Redis is down.
        let down = poll_ack(Duration::from_secs(2), || async { Err(ClusterError::Timeout) }).await;
        assert_eq!(down, Err(ClusterError::Timeout));
    }
}
