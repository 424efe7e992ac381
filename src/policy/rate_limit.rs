//! Rate limits per user × tool per minute. [`LocalLimiter`] is an in-process sliding window; a
//! Redis implementation shares the window across instances behind the same [`RateLimiter`] trait.
//!
//! Windows that have emptied are freed at most once a minute, by whichever call comes first: a
//! key seen once (any `sub` through the admin API) does not stay for the life of the process, and
//! each sweep visits only the keys used in the last two minutes.

use std::collections::VecDeque;
use std::sync::Mutex;
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
    /// When emptied windows were last freed; `None` before the first call.
    last_sweep: Mutex<Option<Instant>>,
}

impl LocalLimiter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn check_at(&self, user: &str, tool: &str, limit: u32, now: Instant) -> Result<(), Limited> {
        // Before taking the entry: `retain` waits for every shard, this one's too.
        self.free_empty_windows(now);
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

    /// Drop the windows whose last call is a minute old, once a minute. One caller sweeps; the
    /// others go on without waiting (a held lock means a sweep is under way).
    fn free_empty_windows(&self, now: Instant) {
        let Ok(mut last_sweep) = self.last_sweep.try_lock() else { return };
        if last_sweep.is_some_and(|last| now.duration_since(last) < WINDOW) {
            return;
        }
        *last_sweep = Some(now);
        let before = self.windows.len();
        self.windows.retain(|_, window| window.back().is_some_and(|t| now.duration_since(*t) < WINDOW));
        if self.windows.len() < before {
            self.windows.shrink_to_fit();
        }
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

    #[test]
    fn windows_of_users_gone_quiet_are_freed() {
        let limiter = LocalLimiter::new();
        let t0 = Instant::now();
        for user in 0..10_000 {
            assert!(limiter.check_at(&format!("u{user}"), "t", 3, t0).is_ok());
        }
        for _ in 0..3 {
            assert!(limiter.check_at("busy", "t", 3, t0 + Duration::from_secs(30)).is_ok());
        }
        assert_eq!(limiter.windows.len(), 10_001);
        // A minute on, the windows that have emptied are gone; one still in use is kept, and holds.
        let later = t0 + WINDOW + Duration::from_secs(1);
        assert_eq!(limiter.check_at("busy", "t", 3, later).unwrap_err().retry_after_s, 29);
        assert_eq!(limiter.windows.len(), 1);
        assert!(limiter.check_at("u1", "t", 3, later).is_ok());
        assert_eq!(limiter.windows.len(), 2);
    }
}
