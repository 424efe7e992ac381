//! When a resume connects: the back-off and jitter of its attempts, when a lost upstream continues
//! the last resume instead of starting afresh, and the jittered age at which an upstream is
//! recycled.

use std::time::Duration;

use tokio::time::Instant;

use super::Reason;
use crate::tools::http;

/// How long a resumed upstream must stay up for its resume to count as done. Without this, an
/// upstream (or a load balancer in front of it) that takes the upgrade and closes at once, or
/// rejects every restore, would have the session connect, restore up to `resume_max_bytes` and
/// reconnect almost at once, forever: each gap would start afresh at attempt 1. A loss
/// sooner than this after a restore continues that resume's attempts and back-off instead, so
/// such an upstream costs `resume_attempts` connections before the session closes. Long enough to
/// cover an upstream that dies on the restore or its first turn; short enough that a loss after
/// a healthy stretch (a network blip, the provider's 60-minute cap) is a fresh resume, from its
/// first attempt.
pub(super) const SETTLED_AFTER: Duration = Duration::from_secs(30);

/// The last restore: when, and how many connection attempts its resume had used by then.
#[derive(Debug, Clone, Copy)]
pub(super) struct Restored {
    pub(super) at: Instant,
    pub(super) attempts: u32,
}

/// A recycle for age that could not connect is tried again this long after (plus up to 50 %
/// jitter), on the old upstream meanwhile: with the default age that leaves several tries before
/// the provider's 60-minute cap.
pub(super) const RECYCLE_RETRY: Duration = Duration::from_secs(30);

/// The age at which an upstream is recycled: `max_age` less up to a tenth of it, at random. Sessions
/// that began together (reconnected together after a drain) would otherwise all recycle at the
/// same moment, and a provider refusing connections for a while would fail every one of them.
pub(super) fn recycle_age(max_age: Duration) -> Duration {
    use rand::Rng;
    let spread = max_age.as_millis() as u64 / 10;
    max_age.saturating_sub(Duration::from_millis(rand::rng().random_range(0..=spread)))
}

/// The number of a new gap's first connection attempt: 1 (after a short jitter) unless the upstream it lost
/// was restored less than [`SETTLED_AFTER`] ago, in which case that resume goes on where it
/// stopped. A recycle for age is never a continuation: its upstream was healthy and still is.
pub(super) fn first_attempt(last: Option<Restored>, reason: Reason, now: Instant) -> u32 {
    match last {
        Some(last) if reason != Reason::MaxAge && now.saturating_duration_since(last.at) < SETTLED_AFTER => last.attempts.saturating_add(1),
        _ => 1,
    }
}

/// The first attempt of a resume waits a random moment up to this long: after an upstream-wide
/// blip every session loses its upstream at the same instant, and would otherwise reconnect at
/// the same instant too.
const FIRST_ATTEMPT_JITTER: Duration = Duration::from_millis(500);

/// The attempts of a resume (`upstream.resume_attempts`) are spread over at least this long, so
/// that a provider answering 429/503 for a few seconds does not end every session a second after
/// the blip. The retries but the last keep the doubling back-off (250 ms, 500 ms, … up to
/// [`MAX_RETRY_DELAY`]), so a connect that failed once is tried again while the user may still be
/// speaking; the last waits for what is left of the window. Each gets up to 50 % jitter.
pub(super) const RETRY_WINDOW: Duration = Duration::from_secs(10);

/// No retry of a resume waits longer than this (plus its jitter), however many attempts
/// `upstream.resume_attempts` allows: the client sits in a silent gap meanwhile, and the doubling
/// back-off alone would have the 16th attempt wait over an hour.
pub(super) const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

/// How long attempt `attempt` (1-based) of a resume of `attempts` waits before connecting.
pub(super) fn delay_before(attempt: u32, attempts: u32) -> Duration {
    use rand::Rng;
    if attempt <= 1 {
        return Duration::from_millis(rand::rng().random_range(0..=FIRST_ATTEMPT_JITTER.as_millis() as u64));
    }
    // The tools' back-off (tools::http), retry by retry; the last one fills the window.
    let retry = attempt - 1;
    let base = |retry: u32| http::backoff_base(retry).min(MAX_RETRY_DELAY);
    if attempt < attempts {
        return http::jittered(base(retry));
    }
    let earlier: Duration = (1..retry).map(base).sum();
    http::jittered(base(retry).max(RETRY_WINDOW.saturating_sub(earlier)))
}
