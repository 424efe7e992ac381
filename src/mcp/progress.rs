//! Where one MCP server's progress notifications go: to the call whose request carries the
//! notification's progress token.
//!
//! rmcp gives a caller its request's token only once the request is on its way, so a fast server
//! can report progress before the call has routed the token (CI saw it: the first of three
//! `notifications/progress` lost while the session thread waited for a CPU). A notification for a
//! token that has no route yet is therefore held — a few per token, for a bounded number of
//! tokens, for a few seconds — and handed to the call when it makes its route, in order and before
//! anything newer. Every call makes a route, whether or not its client wants progress, so what is
//! held for a call is always claimed; what a server sends for a finished or unknown request
//! expires. Progress stays advisory: beyond those bounds it is dropped, never queued without end.
//!
//! Each progress event is a frame to the page, and a server may report as often as it likes: a
//! call's events are coalesced to at most one per [`REPORT_EVERY`]. The first goes at once; one
//! that comes sooner waits for the next slot, replaced by any newer one meanwhile (never an older
//! value after a newer), and the latest still waiting when the call ends is reported then.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::time::Instant;

use crate::tools::progress::ProgressSink;

/// Notifications held for one token that has no route yet.
const HELD_PER_TOKEN: usize = 8;
/// Tokens with held notifications, at most (expired ones are swept when this is reached).
const HELD_TOKENS: usize = 64;
/// How long held notifications wait for their call's route.
const HOLD_FOR: Duration = Duration::from_secs(5);
/// At most one progress event per call this often (five a second): each is a frame to the page.
const REPORT_EVERY: Duration = Duration::from_millis(200);

enum Route {
    /// A running call; `None` when its client does not want progress events.
    Routed(Option<Throttle>),
    /// Notifications that came before the route, oldest first, and when the first came.
    Held { since: Instant, early: Vec<ProgressNotificationParam> },
}

/// One call's sink, paced to one event per [`REPORT_EVERY`].
struct Throttle {
    sink: ProgressSink,
    /// Tells this route from a later one with the same token (tokens start over on a new
    /// connection), so a flush scheduled for it never reports to another call.
    serial: u64,
    /// When the last event was reported; `None` before the first.
    last: Option<Instant>,
    /// The newest notification waiting for the next slot.
    pending: Option<ProgressNotificationParam>,
    /// A flush of `pending` is scheduled.
    flush_scheduled: bool,
}

impl Throttle {
    /// Report `params` now if the slot is free, else keep it for the next slot; returns when to
    /// flush if no flush is scheduled yet.
    fn offer(&mut self, params: ProgressNotificationParam, now: Instant) -> Option<Instant> {
        match self.last {
            Some(last) if now < last + REPORT_EVERY => {
                self.pending = Some(params);
                let first = !std::mem::replace(&mut self.flush_scheduled, true);
                first.then_some(last + REPORT_EVERY)
            }
            _ => {
                // Anything still pending is older than this.
                self.pending = None;
                report(&self.sink, &params);
                self.last = Some(now);
                None
            }
        }
    }

    /// Report what is pending, if anything.
    fn flush(&mut self, now: Instant) {
        if let Some(params) = self.pending.take() {
            report(&self.sink, &params);
            self.last = Some(now);
        }
    }
}

/// The progress routes of one server's running calls.
#[derive(Default)]
pub(super) struct ProgressRoutes {
    routes: DashMap<ProgressToken, Route>,
    /// Entries in the `Held` state.
    held: AtomicUsize,
    /// The next route's [`Throttle::serial`].
    serials: AtomicU64,
}

impl ProgressRoutes {
    /// A notification from the server: to its call's sink, or held until the call routes it.
    pub fn deliver(self: &Arc<Self>, params: ProgressNotificationParam) {
        if self.held.load(Ordering::Relaxed) >= HELD_TOKENS {
            self.sweep_expired();
        }
        let token = params.progress_token.clone();
        let flush_at = match self.routes.entry(token.clone()) {
            Entry::Occupied(mut entry) => match entry.get_mut() {
                Route::Routed(None) => return,
                Route::Routed(Some(throttle)) => throttle.offer(params, Instant::now()).map(|at| (throttle.serial, at)),
                Route::Held { early, .. } => {
                    if early.len() < HELD_PER_TOKEN {
                        early.push(params);
                    }
                    return;
                }
            },
            Entry::Vacant(entry) => {
                if self.held.load(Ordering::Relaxed) < HELD_TOKENS {
                    self.held.fetch_add(1, Ordering::Relaxed);
                    entry.insert(Route::Held { since: Instant::now(), early: vec![params] });
                }
                return;
            }
        };
        if let Some((serial, at)) = flush_at {
            self.schedule_flush(token, serial, at);
        }
    }

    /// Route `token`'s notifications to `sink` until the returned guard is dropped; what was held
    /// for it is reported first.
    pub fn route(self: &Arc<Self>, token: ProgressToken, sink: Option<ProgressSink>) -> RouteGuard {
        let serial = self.serials.fetch_add(1, Ordering::Relaxed);
        let throttle = sink.map(|sink| Throttle { sink, serial, last: None, pending: None, flush_scheduled: false });
        let mut flush_at = None;
        match self.routes.entry(token.clone()) {
            Entry::Occupied(mut entry) => {
                let previous = std::mem::replace(entry.get_mut(), Route::Routed(throttle));
                if let Route::Held { early, .. } = previous {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                    // Offered while the entry is locked: a notification arriving meanwhile
                    // waits for the entry, so it cannot overtake these.
                    if let Route::Routed(Some(throttle)) = entry.get_mut() {
                        let now = Instant::now();
                        for params in early {
                            flush_at = throttle.offer(params, now).or(flush_at);
                        }
                    }
                }
            }
            Entry::Vacant(entry) => {
                entry.insert(Route::Routed(throttle));
            }
        }
        if let Some(at) = flush_at {
            self.schedule_flush(token.clone(), serial, at);
        }
        RouteGuard { routes: self.clone(), token }
    }

    /// Report what waits for `token`'s next slot at `at`, if its route is still `serial`'s.
    fn schedule_flush(self: &Arc<Self>, token: ProgressToken, serial: u64, at: Instant) {
        let routes: Weak<Self> = Arc::downgrade(self);
        let flush = async move {
            tokio::time::sleep_until(at).await;
            let Some(routes) = routes.upgrade() else { return };
            if let Some(mut route) = routes.routes.get_mut(&token)
                && let Route::Routed(Some(throttle)) = route.value_mut()
                && throttle.serial == serial
            {
                throttle.flush_scheduled = false;
                throttle.flush(Instant::now());
            }
        };
        // Notifications come from rmcp's tasks, so there is a runtime; without one the pending
        // value is reported when the call ends.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(flush);
        }
    }

    /// Is any call to this server running (every call routes its token while it runs)?
    pub fn calls_running(&self) -> bool {
        self.routes.iter().any(|route| matches!(route.value(), Route::Routed(_)))
    }

    /// Forget held notifications nobody claimed in time.
    fn sweep_expired(&self) {
        self.routes.retain(|_, route| match route {
            Route::Held { since, .. } if since.elapsed() >= HOLD_FOR => {
                self.held.fetch_sub(1, Ordering::Relaxed);
                false
            }
            _ => true,
        });
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.routes.len()
    }
}

fn report(sink: &ProgressSink, params: &ProgressNotificationParam) {
    sink.report(params.progress, params.total, params.message.as_deref());
}

/// Removes a call's route when the call ends (or is dropped), reporting the latest notification
/// still waiting for a slot: the page's last progress event is the server's last word.
pub(super) struct RouteGuard {
    routes: Arc<ProgressRoutes>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        if let Some((_, Route::Routed(Some(mut throttle)))) = self.routes.routes.remove(&self.token) {
            throttle.flush(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rmcp::model::NumberOrString;
    use serde_json::Value;

    use super::*;

    fn token(n: i64) -> ProgressToken {
        ProgressToken(NumberOrString::Number(n))
    }

    fn note(n: i64, progress: f64) -> ProgressNotificationParam {
        let mut params = ProgressNotificationParam::new(token(n), progress);
        params.total = Some(3.0);
        params
    }

    /// A sink that records the progress values it was given.
    fn recording_sink() -> (ProgressSink, Arc<Mutex<Vec<f64>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let sink = ProgressSink::new("call_1".into(), move |event: String| {
            let event: Value = serde_json::from_str(&event).unwrap();
            into.lock().unwrap().push(event["progress"].as_f64().unwrap());
        });
        (sink, seen)
    }

    #[tokio::test]
    async fn progress_that_comes_before_the_route_is_reported_first_and_in_order() {
        let routes = Arc::new(ProgressRoutes::default());
        routes.deliver(note(1, 1.0));
        routes.deliver(note(1, 2.0));
        let (sink, seen) = recording_sink();
        let guard = routes.route(token(1), Some(sink));
        routes.deliver(note(1, 3.0));
        // The first at once; 2 and then 3 wait for the next slot, 3 replacing 2.
        assert_eq!(*seen.lock().unwrap(), vec![1.0]);
        drop(guard);
        assert_eq!(*seen.lock().unwrap(), vec![1.0, 3.0]);
    }

    #[tokio::test]
    async fn a_route_ends_with_its_guard_and_other_tokens_are_not_delivered_to_it() {
        let routes = Arc::new(ProgressRoutes::default());
        let (sink, seen) = recording_sink();
        let guard = routes.route(token(1), Some(sink));
        routes.deliver(note(2, 1.0));
        routes.deliver(note(1, 1.0));
        drop(guard);
        assert_eq!(*seen.lock().unwrap(), vec![1.0]);
        // Only token 2's held notification is left.
        assert_eq!(routes.len(), 1);
        // A call whose client wants no progress still claims what was held for it.
        drop(routes.route(token(2), None));
        assert_eq!(routes.len(), 0);
        assert_eq!(routes.held.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn held_notifications_are_bounded_and_expire() {
        let routes = Arc::new(ProgressRoutes::default());
        for _ in 0..HELD_PER_TOKEN + 5 {
            routes.deliver(note(0, 1.0));
        }
        for n in 1..(HELD_TOKENS as i64 + 10) {
            routes.deliver(note(n, 1.0));
        }
        assert_eq!(routes.len(), HELD_TOKENS, "no more tokens held than the bound");
        match routes.routes.get(&token(0)).as_deref() {
            Some(Route::Held { early, .. }) => {
                assert_eq!(early.len(), HELD_PER_TOKEN, "no more per token than the bound")
            }
            _ => panic!("token 0 is not held"),
        }
        let (sink, seen) = recording_sink();
        drop(routes.route(token(0), Some(sink)));
        assert_eq!(seen.lock().unwrap().len(), 2, "the first held, then the latest when the call ends");

        assert_eq!(routes.len(), HELD_TOKENS - 1);

        // Once the bound is reached again, what has waited too long is swept.
        tokio::time::advance(HOLD_FOR).await;
        routes.deliver(note(1_000, 1.0));
        assert_eq!(routes.len(), HELD_TOKENS);
        routes.deliver(note(1_001, 1.0));
        assert_eq!(routes.len(), 2, "the expired ones are gone, the two fresh ones held");
        let (sink, seen) = recording_sink();
        drop(routes.route(token(1_000), Some(sink)));
        assert_eq!(*seen.lock().unwrap(), vec![1.0]);
    }

    /// A server may report progress as often as it likes; the page gets the latest value at most
    /// every [`REPORT_EVERY`], and the last one when the call ends.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_progress_is_coalesced_to_the_latest_value() {
        let routes = Arc::new(ProgressRoutes::default());
        let (sink, seen) = recording_sink();
        let guard = routes.route(token(1), Some(sink));
        // 100 notifications over one second.
        for i in 1..=100 {
            routes.deliver(note(1, f64::from(i)));
            tokio::time::advance(Duration::from_millis(10)).await;
            tokio::task::yield_now().await;
        }
        let during = seen.lock().unwrap().clone();
        assert!((5..=7).contains(&during.len()), "about five per second: {during:?}");
        assert_eq!(during[0], 1.0, "the first goes at once");
        assert!(during.windows(2).all(|w| w[0] < w[1]), "never an older value after a newer one: {during:?}");
        // The call ends before the next slot: its latest value is not lost.
        routes.deliver(note(1, 101.0));
        drop(guard);
        assert_eq!(seen.lock().unwrap().last(), Some(&101.0));
        tokio::time::advance(REPORT_EVERY * 2).await;
        tokio::task::yield_now().await;
        assert_eq!(seen.lock().unwrap().iter().filter(|p| **p == 101.0).count(), 1, "reported once");
    }
}
