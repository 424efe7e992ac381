//! Rate limits shared by every instance: a sliding window per user × tool kept in Redis and updated
//! by one atomic Lua script (Redis's own clock, so instances need not agree on time).
//!
//! When Redis cannot be reached the limiter falls back to the in-process window, logs once per
//! outage and counts it (`voxgate_redis_fallback_total{component="rate_limit"}`); with
//! `redis.rate_limit_fail_closed` it refuses calls instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::rate_limit::{Limited, LocalLimiter, RateLimiter};
use crate::telemetry::metrics::Metrics;

const WINDOW_MS: u64 = 60_000;
/// How long a Redis round trip may take before the call falls back.
const REDIS_TIMEOUT: Duration = Duration::from_millis(500);

const SCRIPT: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  return {0, window - (now - tonumber(oldest[2]))}
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return {1, 0}
"#;

pub struct RedisLimiter {
    conn: redis::aio::ConnectionManager,
    script: redis::Script,
    local: LocalLimiter,
    fail_closed: bool,
    metrics: Metrics,
    /// Set during an outage so it is logged once.
    degraded: AtomicBool,
}

impl RedisLimiter {
    pub fn new(conn: redis::aio::ConnectionManager, fail_closed: bool, metrics: Metrics) -> Self {
        Self {
            conn,
            script: redis::Script::new(SCRIPT),
            local: LocalLimiter::new(),
            fail_closed,
            metrics,
            degraded: AtomicBool::new(false),
        }
    }

    async fn check_shared(&self, user: &str, tool: &str, limit: u32) -> redis::RedisResult<(i64, i64)> {
        let mut conn = self.conn.clone();
        let member = uuid::Uuid::new_v4().simple().to_string();
        self.script
            .key(format!("voxgate:rl:{tool}:{user}"))
            .arg(WINDOW_MS)
            .arg(limit)
            .arg(member)
            .invoke_async(&mut conn)
            .await
    }
}

#[async_trait::async_trait]
impl RateLimiter for RedisLimiter {
    async fn check(&self, user: &str, tool: &str, limit_per_minute: u32) -> Result<(), Limited> {
        let shared = tokio::time::timeout(REDIS_TIMEOUT, self.check_shared(user, tool, limit_per_minute)).await;
        match shared {
            Ok(Ok((allowed, retry_ms))) => {
                if self.degraded.swap(false, Ordering::Relaxed) {
                    tracing::info!("rate limits: Redis is back; limits are shared again");
                }
                if allowed == 1 {
                    Ok(())
                } else {
                    Err(Limited { retry_after_s: (retry_ms.max(0) as u64).div_ceil(1000).max(1) })
                }
            }
            _ => {
                if !self.degraded.swap(true, Ordering::Relaxed) {
                    if self.fail_closed {
                        tracing::error!("rate limits: Redis unreachable; refusing rate-limited calls (fail closed)");
                    } else {
                        tracing::warn!("rate limits: Redis unreachable; falling back to per-instance limits");
                    }
                }
                self.metrics.redis_fallback("rate_limit");
                if self.fail_closed {
                    Err(Limited { retry_after_s: 5 })
                } else {
                    self.local.check(user, tool, limit_per_minute).await
                }
            }
        }
    }
}
