//! When a supervisor tries an MCP server again, without I/O: the wait doubles from 250 ms to 30 s
//! after each failed attempt or lost connection, and starts over only once a connection has
//! proven healthy — its tools were listed and it then stayed up for [`HEALTHY_AFTER`].
//!
//! Completing `initialize` alone proves nothing: a stdio server that answers the handshake and
//! then crashes (or fails `tools/list`) would otherwise be restarted every ~0.3 s forever. A
//! server that ran well for a while and then died once is restarted after 250 ms, as before.

use std::time::Duration;

use tokio::time::Instant;

/// First wait between connection attempts.
pub(super) const BACKOFF_START: Duration = Duration::from_millis(250);
/// Longest wait between connection attempts.
pub(super) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long a listed connection must stay up before the back-off starts over. Equal to
/// [`BACKOFF_MAX`] so a server that keeps dying just after this still restarts at most about once
/// per [`BACKOFF_MAX`], the rate a crash loop settles at anyway.
pub(super) const HEALTHY_AFTER: Duration = BACKOFF_MAX;

/// The back-off state of one server's supervisor.
#[derive(Debug)]
pub(super) struct Backoff {
    /// The wait before the next attempt, unless the connection that ends proved healthy.
    next: Duration,
    /// When the current connection's tools were first listed; `None` until then.
    listed_at: Option<Instant>,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { next: BACKOFF_START, listed_at: None }
    }
}

impl Backoff {
    /// The current connection listed its tools: it is up for real, and counts as healthy once it
    /// has stayed up [`HEALTHY_AFTER`] from now. A later re-list (`list_changed`) keeps the first
    /// time.
    pub(super) fn listed(&mut self, now: Instant) {
        self.listed_at.get_or_insert(now);
    }

    /// A connection attempt failed or a connection ended at `now`: the wait before the next
    /// attempt (jitter not included).
    pub(super) fn next_wait(&mut self, now: Instant) -> Duration {
        if self.listed_at.take().is_some_and(|at| now.saturating_duration_since(at) >= HEALTHY_AFTER) {
            self.next = BACKOFF_START;
        }
        let wait = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The waits a server gets when every connection ends after `up_for` (listed when `listed`).
    async fn waits(rounds: usize, listed: bool, up_for: Duration) -> Vec<Duration> {
        let mut backoff = Backoff::default();
        let mut waits = Vec::new();
        for _ in 0..rounds {
            if listed {
                backoff.listed(Instant::now());
            }
            tokio::time::advance(up_for).await;
            let wait = backoff.next_wait(Instant::now());
            tokio::time::advance(wait).await;
            waits.push(wait);
        }
        waits
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_dies_right_after_connecting_backs_off_to_the_cap() {
        // Connected (even listed) but gone within a second, over and over: a crash loop.
        let expected: Vec<Duration> =
            [250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000].into_iter().map(ms).collect();
        assert_eq!(waits(9, true, ms(900)).await, expected);
        assert_eq!(waits(9, false, ms(10)).await, expected, "tools/list failed: the same");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_that_stayed_up_restarts_quickly() {
        let mut backoff = Backoff::default();
        for _ in 0..5 {
            backoff.next_wait(Instant::now());
        }
        assert_eq!(backoff.next, ms(8000));
        backoff.listed(Instant::now());
        tokio::time::advance(HEALTHY_AFTER).await;
        assert_eq!(backoff.next_wait(Instant::now()), BACKOFF_START, "healthy: starts over");
        assert_eq!(backoff.next_wait(Instant::now()), ms(500), "then doubles again");
        // Every connection healthy: every restart is quick.
        assert_eq!(waits(3, true, HEALTHY_AFTER + ms(1)).await, vec![BACKOFF_START; 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn up_but_never_listed_does_not_count_as_healthy() {
        let mut backoff = Backoff::default();
        backoff.next_wait(Instant::now());
        tokio::time::advance(HEALTHY_AFTER * 2).await;
        assert_eq!(backoff.next_wait(Instant::now()), ms(500));
    }

    #[tokio::test(start_paused = true)]
    async fn a_relist_does_not_restart_the_healthy_clock() {
        let mut backoff = Backoff::default();
        backoff.next_wait(Instant::now());
        backoff.listed(Instant::now());
        tokio::time::advance(HEALTHY_AFTER - ms(1)).await;
        backoff.listed(Instant::now());
        tokio::time::advance(ms(1)).await;
        assert_eq!(backoff.next_wait(Instant::now()), BACKOFF_START);
        // The mark is per connection: the next one must prove itself again.
        tokio::time::advance(HEALTHY_AFTER).await;
        assert_eq!(backoff.next_wait(Instant::now()), ms(500));
    }
}
