//! What the audit writer's handles know of its health: whether the last write succeeded, and how
//! long the commit under way has been running. A writer thread blocked in `fdatasync` on a hung
//! volume cannot say it is stuck, so the start of each commit is kept where the handles (for
//! `/readyz` and the call table) and the writer's ticker (for the gauge and the log) can read it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::telemetry::metrics::Metrics;

/// A group commit (write and fdatasync) running longer than this makes the writer unhealthy: the
/// volume has hung (an EBS, iSCSI or NFS stall), every tool answer waits on it, and `/readyz`
/// turns 503 so no new session is sent into the stall. A healthy commit takes well under 10 ms and
/// a slow disk's p99 alerts at 50 ms, so 5 s is a hang, not a slow moment.
pub const STALLED_AFTER: Duration = Duration::from_secs(5);

/// What the handles know of the writer: a blocked writer thread cannot say it is stuck, so the
/// start of the commit under way is kept where anyone can read how long it has been running.
pub(super) struct Health {
    /// False from a failed write until a write succeeds again.
    pub(super) writable: AtomicBool,
    /// Milliseconds from `epoch` to the start of the commit under way, plus one; 0: none is.
    commit_since: AtomicU64,
    epoch: Instant,
}

impl Health {
    pub(super) fn new() -> Self {
        Health { writable: AtomicBool::new(true), commit_since: AtomicU64::new(0), epoch: Instant::now() }
    }

    /// How long the commit under way has been running, if one is.
    pub(super) fn commit_running(&self) -> Option<Duration> {
        match self.commit_since.load(Ordering::Relaxed) {
            0 => None,
            since => Some(self.epoch.elapsed().saturating_sub(Duration::from_millis(since - 1))),
        }
    }

    /// Marks a commit under way until the guard is dropped.
    pub(super) fn commit_started(&self) -> CommitRunning<'_> {
        let since = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        self.commit_since.store(since, Ordering::Relaxed);
        CommitRunning(self)
    }
}

/// A commit under way (see [`Health::commit_started`]).
pub(super) struct CommitRunning<'a>(&'a Health);

impl Drop for CommitRunning<'_> {
    fn drop(&mut self) {
        self.0.commit_since.store(0, Ordering::Relaxed);
    }
}

/// The ticker's view of stalls: exports how long the commit under way has been running
/// (`voxgate_audit_commit_running_seconds`) and logs a stall once when it begins and once when it
/// ends.
#[derive(Default)]
pub(super) struct StallWatch {
    stalled: bool,
}

impl StallWatch {
    pub(super) fn check(&mut self, health: &Health, metrics: Option<&Metrics>) {
        let running = health.commit_running();
        if let Some(metrics) = metrics {
            metrics.audit_commit_running(running.unwrap_or_default());
        }
        let stalled = running.is_some_and(|r| r >= STALLED_AFTER);
        match (self.stalled, stalled) {
            (false, true) => tracing::error!(after_s = STALLED_AFTER.as_secs(), "audit commit stalled: tool answers wait on it; not ready"),
            (true, false) => tracing::warn!("audit commit returned after a stall"),
            _ => {}
        }
        self.stalled = stalled;
    }
}
