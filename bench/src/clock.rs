//! The send clock: when each session sends its next frame.
//!
//! Two clocks, chosen with `bench run --clock`:
//!
//! - **`wheel`** — each session's own `tokio::time::interval`. Tokio's timer wheel has a
//!   resolution of one millisecond, so the sessions that the phase spreads over one 20 ms period
//!   are not sent at their own instants but in 20 bursts: at N = 100 five frames leave in the same
//!   microseconds, at N = 1,000 fifty. A single-threaded relay then reads a whole burst in one
//!   wake-up; a server that spreads its sessions over two threads wakes both for it.
//! - **`spread`** — one metronome thread walks the whole phase's schedule in time order and sleeps
//!   (`nanosleep`, timer slack 1 µs) until each frame's own instant, then hands that instant to the
//!   session's writer. Frames leave at their spread instants (≈ 200 µs apart at N = 100) as
//!   independent clients' frames would, up to the sleep's precision (tens of µs); when the thread
//!   falls behind it sends what is due at once, like the wheel's missed ticks.
//!
//! Either way a tick that comes late is sent at once (burst), and the writer records how late it
//! was against the instant it was due ("send lag").

use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, Interval, MissedTickBehavior};

/// How the generator times its sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Clock {
    /// Each session's own tokio interval (1 ms resolution: frames leave in per-millisecond bursts).
    #[default]
    Wheel,
    /// One thread sleeping to each frame's own instant (sub-millisecond spacing).
    Spread,
}

impl Clock {
    pub fn name(self) -> &'static str {
        match self {
            Clock::Wheel => "wheel",
            Clock::Spread => "spread",
        }
    }
}

/// One session's ticks: the instant each frame was due, or `None` after the last one.
pub enum Ticks {
    Wheel { interval: Interval, left: u64 },
    Spread(mpsc::UnboundedReceiver<Instant>),
}

impl Ticks {
    pub async fn next(&mut self) -> Option<Instant> {
        match self {
            Ticks::Wheel { interval, left } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                Some(interval.tick().await)
            }
            Ticks::Spread(due) => due.recv().await,
        }
    }
}

/// The ticks of every session of one phase, and the thread that sends them (spread clock).
pub struct Schedule {
    pub ticks: Vec<Ticks>,
    pub metronome: Option<JoinHandle<()>>,
}

/// How many frames a session whose first frame is due at `first` sends, one every `period`, before
/// `end`.
pub fn frames_due(first: Instant, period: Duration, end: Instant) -> u64 {
    end.saturating_duration_since(first).as_nanos().div_ceil(period.as_nanos()) as u64
}

/// Ticks for sessions whose first frames are due at `firsts`, every `period`, for every frame due
/// before `end`.
pub fn schedule(clock: Clock, firsts: &[Instant], period: Duration, end: Instant) -> std::io::Result<Schedule> {
    let count = |first: Instant| frames_due(first, period, end);
    match clock {
        Clock::Wheel => {
            let ticks = firsts
                .iter()
                .map(|&first| {
                    let mut interval = tokio::time::interval_at(first, period);
                    interval.set_missed_tick_behavior(MissedTickBehavior::Burst);
                    Ticks::Wheel { interval, left: count(first) }
                })
                .collect();
            Ok(Schedule { ticks, metronome: None })
        }
        Clock::Spread => {
            let (senders, ticks): (Vec<_>, Vec<_>) = firsts
                .iter()
                .map(|&first| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    ((first.into_std(), count(first), tx), Ticks::Spread(rx))
                })
                .unzip();
            let metronome =
                std::thread::Builder::new().name("bench-metronome".into()).spawn(move || metronome(senders, period))?;
            Ok(Schedule { ticks, metronome: Some(metronome) })
        }
    }
}

/// Send every session's ticks in time order. The firsts are ascending within one period (the
/// phase spreads the sessions that way), so frame k of session i is due before frame k of session
/// i + 1 and after frame k − 1 of every session: the order is (k, i).
fn metronome(sessions: Vec<(std::time::Instant, u64, mpsc::UnboundedSender<Instant>)>, period: Duration) {
    // The default slack lets the kernel fire a sleep up to 50 µs late to batch wake-ups; the
    // point of this clock is not to batch.
    // SAFETY: prctl(PR_SET_TIMERSLACK) only sets this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let rounds = sessions.iter().map(|s| s.1).max().unwrap_or(0);
    for k in 0..rounds {
        for (first, count, due) in &sessions {
            if k >= *count {
                continue;
            }
            let at = *first + period * k as u32;
            let wait = at.saturating_duration_since(std::time::Instant::now());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
            // A session whose writer has ended (its socket failed) just stops listening.
            let _ = due.send(Instant::from_std(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn spread_ticks_come_in_time_order_at_their_instants() {
        let start = Instant::now() + Duration::from_millis(20);
        let period = Duration::from_millis(10);
        let firsts: Vec<_> = (0..4).map(|i| start + Duration::from_micros(2_500 * i)).collect();
        let end = start + Duration::from_millis(30);
        let mut schedule = schedule(Clock::Spread, &firsts, period, end).expect("metronome");
        for (i, ticks) in schedule.ticks.iter_mut().enumerate() {
            let mut got = Vec::new();
            while let Some(due) = ticks.next().await {
                assert!(Instant::now() >= due, "a tick was handed out before it was due");
                got.push(due);
            }
            let want: Vec<_> = (0..3).map(|k| firsts[i] + period * k).collect();
            assert_eq!(got, want, "session {i}");
        }
        schedule.metronome.take().expect("thread").join().expect("metronome ended");
    }

    #[tokio::test]
    async fn wheel_ticks_stop_after_the_last_frame_due_before_the_end() {
        let start = Instant::now();
        let period = Duration::from_millis(5);
        let mut schedule = schedule(Clock::Wheel, &[start], period, start + Duration::from_millis(12)).expect("wheel");
        let mut got = 0;
        while schedule.ticks[0].next().await.is_some() {
            got += 1;
        }
        assert_eq!(got, 3, "frames due at 0, 5 and 10 ms");
    }
}
