//! A deadline the session loop waits on every turn without paying for a new timer each time.
//!
//! `tokio::time::sleep_until(..)` written in a `select!` arm builds a timer, registers it with the
//! runtime's timer wheel (behind a lock every session shares) and removes it again whenever another
//! arm wins: once per frame, for every deadline the session has. An `Alarm` keeps one timer for the
//! session's life: registered when first awaited, moved only when its deadline moves (a later
//! deadline is an atomic update, no lock), and awaiting it again costs nothing. The timer is
//! created on first use, so a session that never arms an alarm pays nothing for it.
//!
//! Disarming does not unregister the timer: if the old deadline passes, the session wakes once for
//! nothing and sleeps again. That is the price of not touching the timer wheel on every turn.

use std::pin::Pin;

use tokio::time::{Instant, Sleep};

#[derive(Default)]
pub(super) struct Alarm {
    sleep: Option<Pin<Box<Sleep>>>,
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
                Some(sleep) => sleep.as_mut().reset(at),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
            }
        }
    }

    /// Completes at the deadline, and disarms the alarm; never completes while it is disarmed.
    /// Cancel-safe: dropping the future leaves the alarm as it was.
    pub(super) async fn fired(&mut self) {
        match (self.at, &mut self.sleep) {
            (Some(_), Some(sleep)) => {
                sleep.as_mut().await;
                self.at = None;
            }
            _ => std::future::pending().await,
        }
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
}
