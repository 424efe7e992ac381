//! The process-wide drain: a root [`CancellationToken`] every session's token descends from, a
//! [`TaskTracker`] that knows when the last session has ended (axum's upgraded sockets are detached
//! tasks its own graceful shutdown does not wait for), and the "draining" flag `/readyz` reports.
//! A request that may start a session or a tool call is tracked from its first await
//! ([`Shutdown::enter`]), not only once its task is spawned: a drain that began while it waited
//! (on Redis, on its body) would otherwise find nothing to wait for and drop it unanswered.
//!
//! A drain is bounded: sessions that outlive it (a peer that never answers, a tool that never
//! returns) are dropped with the session threads that run them (`server::shards`), so SIGTERM
//! always ends the process. No session waits on an abort signal of its own: such a waiter would
//! sit in the path of every wake-up of every session task.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tokio_util::task::task_tracker::TaskTrackerToken;

#[derive(Clone, Default)]
pub struct Shutdown {
    token: CancellationToken,
    tracker: TaskTracker,
    draining: Arc<AtomicBool>,
}

impl Shutdown {
    pub fn new() -> Self {
        Self::default()
    }

    /// The root token; sessions take `child_token()`s.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// Sessions are spawned here so the drain can wait for them.
    pub fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// Count a request as work the drain waits for, until the token is dropped; `None` once the
    /// drain has begun. The token is taken before the check, and the check asks the tracker
    /// itself (one atomic): either the drain's `wait` sees this request, or this request sees
    /// the tracker closed. No request slips between the two.
    pub fn enter(&self) -> Option<TaskTrackerToken> {
        let token = self.tracker.token();
        (!self.tracker.is_closed()).then_some(token)
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Stop admitting sessions and tell every open one to close.
    pub fn begin(&self) {
        self.draining.store(true, Ordering::Relaxed);
        self.tracker.close();
        self.token.cancel();
    }
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed when this is called, not when the
/// future is first polled: call it before binding, so a SIGTERM that arrives while the server
/// starts drains it instead of killing the process. Must be called inside the tokio runtime.
pub fn signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate()).ok();
        let int = signal(SignalKind::interrupt()).ok();
        async move {
            match (term, int) {
                (Some(mut term), Some(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
