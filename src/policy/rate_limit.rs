//! Rate limits per user × tool per minute. [`LocalLimiter`] is an in-process sliding window; a
//! Redis implementation shares the window across instances behind the same [`RateLimiter`] trait.

use std::collections::VecDeque;
use std::time::Duration;

use dashmap::DashMap;
use tokio::time::Instant;

const WINDOW: Duration = Duration::from_secs(60);

/// A call over its limit: when the caller may try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rate limited; retry after {retry_after_s} s")]
pub struct Limited {
    pub retry_after_s: u64,
}

/// Decides whether one more call fits in the user's window for a tool.
#[async_trait::async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Count a call and say whether it is allowed. `user` is the keyed hash of the subject.
    async fn check(&self, user: &str, tool: &str, limit_per_minute: u32) -> Result<(), Limited>;
}

/// Sliding window in process memory: one queue of call instants per user × tool.
#[derive(Debug, Default)]
pub struct LocalLimiter {
    windows: DashMap<(String, String), VecDeque<Instant>>,
}

impl LocalLimiter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check_at(&self, user: &str, tool: &str, limit: u32, now: Instant) -> Result<(), Limited> {
        let mut window = self.windows.entry((user.to_string(), tool.to_string())).or_default();
        while window.front().is_some_and(|t| now.duration_since(*t) >= WINDOW) {
            window.pop_front();
        }
        if window.len() >= limit as usize {
            let oldest = window.front().copied().unwrap_or(now);
            let wait = WINDOW.saturating_sub(now.duration_since(oldest));
            return Err(Limited { retry_after_s: wait.as_secs().max(1) });
        }
        window.push_back(now);
        Ok(())
    }
}

#[async_trait::async_trait]
impl RateLimiter for LocalLimiter {
    async fn check(&self, user: &str, tool: &str, limit_per_minute: u32) -> Result<(), Limited> {
        self.check_at(user, tool, limit_per_minute, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_slides() {
        let limiter = LocalLimiter::new();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.check_at("u", "t", 3, t0).is_ok());
        }
        let err = limiter.check_at("u", "t", 3, t0 + Duration::from_secs(10)).unwrap_err();
        assert_eq!(err.retry_after_s, 50);
        assert!(limiter.check_at("other", "t", 3, t0).is_ok(), "per user");
        assert!(limiter.check_at("u", "t2", 3, t0).is_ok(), "per tool");
        assert!(limiter.check_at("u", "t", 3, t0 + WINDOW).is_ok(), "window passed");
    }
}
