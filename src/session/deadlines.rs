//! Every deadline of a session behind one timer the session loop waits on every turn.
//!
//! `tokio::time::sleep_until(..)` written in a `select!` arm builds a timer, registers it with the
//! runtime's timer wheel (behind a lock every session shares) and removes it again whenever another
//! arm wins: once per frame, for every deadline the session has. And every timer the loop waits on
//! is polled on every turn. So a session keeps one [`Alarm`] for the session's life, set to the
//! earliest of its deadlines ([`Deadlines`]): registered when first awaited, moved only when that
//! earliest deadline moves (a later one is an atomic update, no lock), and polled once per turn
//! however many deadlines there are. When it fires, [`Deadlines::due`] says which came due.
//!
//! Each deadline is still armed only while its firing can change something (the loop decides
//! that, turn by turn). Disarming does not unregister the timer: if the old deadline passes, the
//! session wakes once for nothing and sleeps again — the price of not touching the timer wheel on
//! every frame.

use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use super::gated::Gated;

#[derive(Default)]
pub(super) struct Alarm {
    /// Polled only when the timer fires or moves, not on every turn (see `gated.rs`).
    sleep: Option<Gated<Pin<Box<Sleep>>>>,
    /// The deadline, while armed.
    at: Option<Instant>,
}

impl Alarm {
    /// The deadline, while armed.
    pub(super) fn at(&self) -> Option<Instant> {
        self.at
    }

    /// Arm the alarm for `at`, or disarm it (`None`). The timer is touched only if the deadline
    /// changed.
    pub(super) fn set(&mut self, at: Option<Instant>) {
        if self.at == at {
            return;
        }
        self.at = at;
        if let Some(at) = at {
            match &mut self.sleep {
                Some(sleep) => sleep.rearm().as_mut().reset(at),
                None => self.sleep = Some(Gated::new(Box::pin(tokio::time::sleep_until(at)))),
            }
        }
    }

    /// Completes at the deadline, and disarms the alarm; never completes while it is disarmed.
    /// Cancel-safe: dropping the future leaves the alarm as it was.
    pub(super) async fn fired(&mut self) {
        match (self.at, &mut self.sleep) {
            (Some(_), Some(sleep)) => {
                sleep.await;
                self.at = None;
            }
            _ => std::future::pending().await,
        }
    }
}

/// A session's deadlines. The loop sets the ones that depend on its state before each wait.
pub(super) struct Deadlines {
    alarm: Alarm,
    /// Close deadline (running calls are abandoned), then the hard end of the grace.
    pub closing: Option<Instant>,
    /// When time alone opens the response gate.
    pub gate: Option<Instant>,
    /// When the upstream session is old enough to be recycled.
    pub age: Option<Instant>,
    /// The idle deadline as it was when armed: activity since then only moves the real deadline,
    /// which is looked at when this one passes (not on every frame).
    pub idle: Option<Instant>,
    /// The next ping, with pings on.
    ping: Option<Instant>,
    ping_every: Option<Duration>,
    /// When the token that admitted the session expires.
    auth: Option<Instant>,
}

/// Which deadlines came due when the alarm fired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Due {
    pub gate: bool,
    pub idle: bool,
    pub ping: bool,
    pub auth: bool,
}

impl Deadlines {
    pub(super) fn new(now: Instant, ping_every: Option<Duration>, auth: Option<Instant>) -> Self {
        Self {
            alarm: Alarm::default(),
            closing: None,
            gate: None,
            age: None,
            idle: None,
            ping: ping_every.map(|every| now + every),
            ping_every,
            auth,
        }
    }

    /// Set the alarm to the earliest deadline. A closing session pings nobody, cannot expire or
    /// idle out, and asks the model for no response: only its own deadline counts then. (The
    /// gate's deadline may lie in the past while a closing session waits for a running call, and
    /// nothing but a response request would move it: armed, it would fire on every turn.)
    pub(super) fn arm(&mut self, closing: bool) {
        if closing {
            self.alarm.set(self.closing);
            return;
        }
        // Pairwise, not an iterator chain: this runs on every turn of the loop, and the chain cost
        // ≈ 120 instructions a turn more (callgrind, docs/performance-history.md, seventeenth pass).
        let mut earliest = earlier(self.closing, self.gate);
        for at in [self.age, self.idle, self.ping, self.auth] {
            earliest = earlier(earliest, at);
        }
        self.alarm.set(earliest);
    }

    pub(super) fn armed(&self) -> bool {
        self.alarm.at().is_some()
    }

    /// Completes when the earliest deadline passes, with what came due by then. A due idle
    /// deadline is disarmed (the loop arms the next one); a due ping moves to the next interval.
    /// Cancel-safe.
    pub(super) async fn due(&mut self) -> Due {
        self.alarm.fired().await;
        let now = Instant::now();
        let passed = |at: Option<Instant>| at.is_some_and(|at| now >= at);
        let due = Due { gate: passed(self.gate), idle: passed(self.idle), ping: passed(self.ping), auth: passed(self.auth) };
        if due.idle {
            self.idle = None;
        }
        if due.ping {
            self.ping = self.ping_every.map(|every| now + every);
        }
        due
    }
}

/// The earlier of two deadlines, either of which may be unset.
fn earlier(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn fires_at_its_deadline_once_and_follows_a_moved_deadline() {
        let mut alarm = Alarm::default();
        let start = Instant::now();
        alarm.set(Some(start + Duration::from_secs(5)));
        // Moved later before it fires: it fires at the new deadline.
        alarm.set(Some(start + Duration::from_secs(8)));
        alarm.fired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(8));
        assert_eq!(alarm.at(), None, "a fired alarm is disarmed");
        // Disarmed, it never fires.
        assert!(tokio::time::timeout(Duration::from_secs(60), alarm.fired()).await.is_err());
        // Armed again, earlier than the time it was last set for.
        alarm.set(Some(Instant::now() + Duration::from_secs(1)));
        alarm.fired().await;
        assert_eq!(start.elapsed(), Duration::from_secs(69));
    }

    #[tokio::test(start_paused = true)]
    async fn one_alarm_for_every_deadline_and_each_reported_when_due() {
        let start = Instant::now();
        let secs = Duration::from_secs;
        let mut deadlines = Deadlines::new(start, Some(secs(10)), Some(start + secs(25)));
        deadlines.idle = Some(start + secs(15));
        deadlines.arm(false);
        assert_eq!(deadlines.due().await, Due { ping: true, ..Due::default() });
        assert_eq!(start.elapsed(), secs(10));
        deadlines.arm(false);
        assert_eq!(deadlines.due().await, Due { idle: true, ..Due::default() });
        assert_eq!(deadlines.idle, None, "a due idle deadline is left for the loop to re-arm");
        deadlines.arm(false);
        assert_eq!(deadlines.due().await, Due { ping: true, ..Due::default() });
        assert_eq!(start.elapsed(), secs(20));
        deadlines.arm(false);
        assert_eq!(deadlines.due().await, Due { auth: true, ..Due::default() });
        // Closing: pings, the idle timeout, the token and the gate no longer count (a closing
        // session asks for no response, so a gate deadline would only fire and fire again); the
        // close deadline does.
        deadlines.gate = Some(start + secs(30));
        deadlines.closing = Some(start + secs(100));
        deadlines.arm(true);
        deadlines.due().await;
        assert_eq!(start.elapsed(), secs(100));
        deadlines.closing = None;
        deadlines.arm(true);
        assert!(!deadlines.armed(), "nothing left to wait for");
    }
}
