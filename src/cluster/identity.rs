//! Who this instance is: `server.instance_id`, by default the hostname — on Kubernetes the pod
//! name, so every log line, span, metric and registry entry names the pod that produced it.
//!
//! With Redis, an instance also claims its id ([`IdClaim`]): two running instances under one id
//! would mix their sessions (a kill forwarded to the id reaches both; a session one of them holds
//! looks stale to the other, whose kill then releases its entry), so the second one says so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionManager;

use super::ClusterError;
use super::registry::bounded;
use crate::telemetry::metrics::Metrics;

/// Read where Linux keeps it; `HOSTNAME` for other systems and odd containers.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";
/// Used only when the system names no host at all.
const FALLBACK_INSTANCE_ID: &str = "voxgate";

/// The hostname, trimmed; never empty.
pub fn hostname() -> String {
    std::fs::read_to_string(HOSTNAME_FILE)
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| FALLBACK_INSTANCE_ID.to_string())
}

/// KEYS: the id's key; ARGV: this process's nonce, TTL (ms). 1: claimed (or renewed); 0: another
/// process holds it.
const CLAIM: &str = r#"
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"#;

/// KEYS: the id's key; ARGV: this process's nonce. Deletes the claim only if it is still ours.
const GIVE_UP: &str = r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"#;

/// This process's claim on its instance id: `voxgate:instance:{id}` holding a nonce of this
/// process, with the session TTL, renewed with every refresh of the session registry. A crashed
/// process's claim expires within the TTL; a stopping one gives it up. Whether another process
/// holds it is logged when it changes and exported (`voxgate_instance_id_conflict`).
pub(super) struct IdClaim {
    instance: String,
    key: String,
    nonce: String,
    ttl_ms: u64,
    claim: redis::Script,
    give_up: redis::Script,
    /// `true` once the server has given the claim up: no renewal may take it again. A lock, not
    /// a flag: a renewal already sent must reach Redis before the give-up does.
    left: tokio::sync::Mutex<bool>,
    /// Whether another running process held the id at the last renewal.
    conflict: AtomicBool,
    metrics: Metrics,
}

impl IdClaim {
    pub(super) fn new(instance: &str, ttl: Duration, metrics: Metrics) -> Self {
        Self {
            instance: instance.to_string(),
            key: format!("voxgate:instance:{instance}"),
            nonce: uuid::Uuid::new_v4().simple().to_string(),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
            claim: redis::Script::new(CLAIM),
            give_up: redis::Script::new(GIVE_UP),
            left: tokio::sync::Mutex::new(false),
            conflict: AtomicBool::new(false),
            metrics,
        }
    }

    /// Claim (or keep) the id, unless the server has given it up, and say whether another
    /// running process holds it.
    pub(super) async fn renew(&self, conn: &ConnectionManager) -> Result<(), ClusterError> {
        let left = self.left.lock().await;
        if *left {
            return Ok(());
        }
        let mut invocation = self.claim.key(&self.key);
        invocation.arg(&self.nonce).arg(self.ttl_ms);
        let invocation = &invocation;
        let claimed: i64 = bounded(conn, |mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        drop(left);
        self.set_conflict(claimed != 1);
        Ok(())
    }

    /// Give the id up, if this process holds it, so a successor under the same id (a restarted
    /// pod) is not taken for a second instance; no renewal takes it again.
    pub(super) async fn give_up(&self, conn: &ConnectionManager) -> Result<(), ClusterError> {
        let mut left = self.left.lock().await;
        *left = true;
        let mut invocation = self.give_up.key(&self.key);
        invocation.arg(&self.nonce);
        let invocation = &invocation;
        let _: i64 = bounded(conn, |mut c| async move { invocation.invoke_async(&mut c).await }).await?;
        Ok(())
    }

    /// Whether another running process claimed this instance's id at the last renewal.
    pub(super) fn conflict(&self) -> bool {
        self.conflict.load(Ordering::Relaxed)
    }

    /// Redis is down: a conflict reported before is not known to last (its other instance may
    /// have stopped meanwhile); the next renewal says again.
    pub(super) fn forget_conflict(&self) {
        if self.conflict.swap(false, Ordering::Relaxed) {
            self.metrics.instance_id_conflict(false);
        }
    }

    /// A change is logged once (an error: two instances under one id is a configuration an
    /// operator must fix) and exported.
    fn set_conflict(&self, conflict: bool) {
        if self.conflict.swap(conflict, Ordering::Relaxed) == conflict {
            return;
        }
        self.metrics.instance_id_conflict(conflict);
        if conflict {
            tracing::error!(
                instance_id = %self.instance,
                "another running instance has this server.instance_id: admin kills and the session \
                 registry mix their sessions; give every instance its own id (the default, the hostname, is)"
            );
        } else {
            tracing::info!(instance_id = %self.instance, "no other running instance has this server.instance_id any more");
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::ServerConfig;

    #[test]
    fn instance_id_is_the_configured_one_or_the_hostname() {
        let mut server = ServerConfig::default();
        assert_eq!(server.instance_id(), super::hostname());
        assert!(!server.instance_id().is_empty());
        server.instance_id = Some("vg-a".into());
        assert_eq!(server.instance_id(), "vg-a");
    }
}
