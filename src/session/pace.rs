//! The per-session ceiling on client frames per second. An audio append every 20 ms is 50 frames a
//! second; a client sending thousands is broken or hostile, and each of its frames would otherwise
//! go upstream. Frames over the ceiling are dropped, and the client is told once per second.

use std::time::Duration;

use tokio::time::Instant;

/// A fixed one-second window: cheap (two fields, no allocation) and exact enough for a ceiling.
#[derive(Debug)]
pub(super) struct FramePace {
    limit: u32,
    window_start: Instant,
    seen: u32,
}

/// What to do with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pace {
    Accept,
    /// Over the ceiling: drop it and tell the client (the first excess frame of a window).
    DropAndTell,
    /// Over the ceiling, already told in this window: drop it silently.
    Drop,
}

impl FramePace {
    pub(super) fn new(limit: u32, now: Instant) -> Self {
        Self {
            limit,
            window_start: now,
            seen: 0,
        }
    }

    pub(super) fn check(&mut self, now: Instant) -> Pace {
        if now.duration_since(self.window_start) >= Duration::from_secs(1) {
            self.window_start = now;
            self.seen = 0;
        }
        self.seen = self.seen.saturating_add(1);
        match self.seen.checked_sub(self.limit) {
            None | Some(0) => Pace::Accept,
            Some(1) => Pace::DropAndTell,
            Some(_) => Pace::Drop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_past_the_ceiling_and_tells_once_per_window() {
        let start = Instant::now();
        let mut pace = FramePace::new(3, start);
        let seen: Vec<Pace> = (0..6).map(|_| pace.check(start)).collect();
        assert_eq!(
            seen,
            [
                Pace::Accept,
                Pace::Accept,
                Pace::Accept,
                Pace::DropAndTell,
                Pace::Drop,
                Pace::Drop
            ]
        );
        assert_eq!(
            pace.check(start + Duration::from_secs(1)),
            Pace::Accept,
            "a new window"
        );
    }
}
