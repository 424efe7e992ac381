//! Whether Redis answers, as this instance last saw it: exported as `voxgate_redis_up` and in
//! `/readyz`, logged once per outage, and used by admissions to decide whether to ask Redis at
//! all. During an outage admissions use the local caps, but one a second ([`PROBE_EVERY`]) asks
//! Redis all the same, so the caps are shared again as soon as it answers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use super::ClusterError;
use crate::telemetry::metrics::Metrics;

/// After a failed Redis call, admissions use the local caps alone for this long, then one of them
/// tries Redis again: an outage costs one admission a second at most a Redis timeout, and one
/// slow call does not leave the caps unshared until the next refresh (a third of the TTL).
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);

pub(super) struct RedisHealth {
    /// Whether the last Redis round trip succeeded.
    up: AtomicBool,
    /// Whether refused credentials were logged in this outage (logged once, at error level).
    refused_logged: AtomicBool,
    /// When Redis last failed, or an admission last tried it during an outage: ms since `epoch`.
    tried_at_ms: AtomicU64,
    epoch: Instant,
    metrics: Metrics,
}

impl RedisHealth {
    /// Up until a call says otherwise.
    pub(super) fn new(metrics: Metrics) -> Self {
        metrics.redis_up(true);
        Self { up: AtomicBool::new(true), refused_logged: AtomicBool::new(false), tried_at_ms: AtomicU64::new(0), epoch: Instant::now(), metrics }
    }

    pub(super) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// During an outage: whether this admission is the one that tries Redis now (at most one each
    /// [`PROBE_EVERY`] since the last failure or try).
    pub(super) fn claim_probe(&self) -> bool {
        let now = self.now_ms();
        let last = self.tried_at_ms.load(Ordering::Relaxed);
        let every = u64::try_from(PROBE_EVERY.as_millis()).unwrap_or(u64::MAX);
        now.saturating_sub(last) >= every && self.tried_at_ms.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Redis answered; the return from an outage is logged once and exported.
    pub(super) fn set_up(&self) {
        self.refused_logged.store(false, Ordering::Relaxed);
        if !self.up.swap(true, Ordering::Relaxed) {
            self.metrics.redis_up(true);
            tracing::info!("redis is back: session caps and the session registry are shared again");
        }
    }

    /// Redis did not answer (`err`); the outage is logged once and exported. Refused credentials
    /// are logged at error level, once per outage even if the outage began otherwise: unlike an
    /// outage, they do not end by themselves, and redis-rs's connection manager reconnects only
    /// after I/O errors, so it keeps the refusal until a restart.
    pub(super) fn set_down(&self, err: ClusterError) {
        // `Down` is an admission that did not ask (not the probe): it says nothing new, and
        // counting it as a try would keep pushing the probe away under steady admissions.
        if err != ClusterError::Down {
            self.tried_at_ms.store(self.now_ms(), Ordering::Relaxed);
        }
        let was_up = self.up.swap(false, Ordering::Relaxed);
        if was_up {
            self.metrics.redis_up(false);
        }
        if let ClusterError::Credentials(code) = err {
            if !self.refused_logged.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    kind = code,
                    "redis refused the credentials in redis.url: per-instance session caps, \
                     admin listing of this instance only, until they are fixed and voxgate restarted"
                );
            }
        } else if was_up {
            tracing::warn!(
                "redis is unreachable: per-instance session caps, admin listing of this instance only"
            );
        }
    }
}
