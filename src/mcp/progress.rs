//! Where the progress notifications of one connection to an MCP server go: to the call whose
//! request carries the notification's progress token. rmcp numbers the tokens afresh on each
//! connection, so each connection has routes of its own ([`Connection`](super::link::Connection)):
//! a notification that comes late on an old connection never reaches a call on a new one.
//!
//! rmcp gives a caller its request's token only once the request is on its way, so a fast server
//! can report progress before the call has routed the token (CI saw it: the first of three
//! `notifications/progress` lost while the session thread waited for a CPU). A notification for a
//! token that has no route yet is therefore held — a few per token, for a bounded number of
//! tokens, for a few seconds, each message cut to what a progress event passes on — and handed to
//! the call when it makes its route, in order and before anything newer. Every call makes a route,
//! whether or not its client wants progress, so what is held for a call is always claimed; what a
//! server sends for a finished or unknown request expires after [`HOLD_FOR`], unseen. Progress
//! stays advisory: beyond those bounds it is dropped, never queued without end.
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
use rmcp::model::{NumberOrString, ProgressNotificationParam, ProgressToken};
use tokio::time::Instant;

use crate::tools::progress::ProgressSink;

/// Notifications held for one token that has no route yet.
const HELD_PER_TOKEN: usize = 8;
/// Tokens with held notifications, at most.
const HELD_TOKENS: usize = 64;
/// How long held notifications wait for their call's route.
const HOLD_FOR: Duration = Duration::from_secs(5);
/// Characters of a progress message kept: what a progress event passes on (`tools::progress`).
const MESSAGE_CHARS: usize = 200;
/// At most one progress event per call this often (five a second): each is a frame to the page.
const REPORT_EVERY: Duration = Duration::from_millis(200);

enum Route {
    /// A running call; `throttle` is `None` when its client does not want progress events.
    /// `serial` tells this route from a later one with the same token, so neither a flush
    /// scheduled for it nor its guard ever touches another call's route.
    Routed { serial: u64, throttle: Option<Throttle> },
    /// Notifications that came before the route, oldest first, and when the first came.
    Held { since: Instant, early: Vec<ProgressNotificationParam> },
}

/// One call's sink, paced to one event per [`REPORT_EVERY`].
struct Throttle {
    sink: ProgressSink,
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

/// The progress routes of the running calls on one connection to a server.
#[derive(Default)]
pub(super) struct ProgressRoutes {
    routes: DashMap<ProgressToken, Route>,
    /// Entries in the `Held` state.
    held: AtomicUsize,
    /// The next route's serial.
    serials: AtomicU64,
}

impl ProgressRoutes {
    /// A notification from the server: to its call's sink, or held until the call routes it.
    pub fn deliver(self: &Arc<Self>, mut params: ProgressNotificationParam) {
        // rmcp's tokens are numbers: a notification with any other token belongs to no call.
        if !matches!(params.progress_token.0, NumberOrString::Number(_)) {
            return;
        }
        params.meta = None;
        if let Some(message) = &mut params.message
            && message.chars().nth(MESSAGE_CHARS).is_some()
        {
            *message = message.chars().take(MESSAGE_CHARS).collect();
        }
        let now = Instant::now();
        if self.held.load(Ordering::Relaxed) > 0 {
            self.sweep_expired(now);
        }
        let token = params.progress_token.clone();
        let flush_at = match self.routes.entry(token.clone()) {
            Entry::Occupied(mut entry) => match entry.get_mut() {
                Route::Routed { throttle: None, .. } => return,
                Route::Routed { serial, throttle: Some(throttle) } => {
                    throttle.offer(params, now).map(|at| (*serial, at))
                }
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
                    entry.insert(Route::Held { since: now, early: vec![params] });
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
        let throttle = sink.map(|sink| Throttle { sink, last: None, pending: None, flush_scheduled: false });
        let mut flush_at = None;
        let now = Instant::now();
        match self.routes.entry(token.clone()) {
            Entry::Occupied(mut entry) => {
                let previous = std::mem::replace(entry.get_mut(), Route::Routed { serial, throttle });
                if let Route::Held { since, early } = previous {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                    // Offered while the entry is locked: a notification arriving meanwhile
                    // waits for the entry, so it cannot overtake these. Ones held too long are
                    // not this call's: a sweep has not come round to them yet.
                    if now < since + HOLD_FOR
                        && let Route::Routed { throttle: Some(throttle), .. } = entry.get_mut()
                    {
                        for params in early {
                            flush_at = throttle.offer(params, now).or(flush_at);
                        }
                    }
                }
            }
            Entry::Vacant(entry) => {
                entry.insert(Route::Routed { serial, throttle });
            }
        }
        if let Some(at) = flush_at {
            self.schedule_flush(token.clone(), serial, at);
        }
        RouteGuard { routes: self.clone(), token, serial }
    }

    /// Report what waits for `token`'s next slot at `at`, if its route is still `serial`'s.
    fn schedule_flush(self: &Arc<Self>, token: ProgressToken, serial: u64, at: Instant) {
        let routes: Weak<Self> = Arc::downgrade(self);
        let flush = async move {
            tokio::time::sleep_until(at).await;
            let Some(routes) = routes.upgrade() else { return };
            if let Some(mut route) = routes.routes.get_mut(&token)
                && let Route::Routed { serial: routed, throttle: Some(throttle) } = route.value_mut()
                && *routed == serial
            {
                throttle.flush_scheduled = false;
                throttle.flush(Instant::now());
            }
        };
        // Notifications come from rmcp's receive loop, a task, so there is a runtime; without
        // one the pending value is reported when the call ends.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(flush);
        }
    }

    /// Is any call to this server running (every call routes its token while it runs)?
    pub fn calls_running(&self) -> bool {
        self.routes.iter().any(|route| matches!(route.value(), Route::Routed { .. }))
    }

    /// Forget held notifications nobody claimed in time.
    fn sweep_expired(&self, now: Instant) {
        self.routes.retain(|_, route| match route {
            Route::Held { since, .. } if now >= *since + HOLD_FOR => {
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
    serial: u64,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        // Only this call's route: a later call's with the same token is not this one's to end.
        let ours = |_: &ProgressToken, route: &Route| {
            matches!(route, Route::Routed { serial, .. } if *serial == self.serial)
        };
        if let Some((_, Route::Routed { throttle: Some(mut throttle), .. })) =
            self.routes.routes.remove_if(&self.token, ours)
        {
            throttle.flush(Instant::now());
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
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
    pub(in crate::mcp) fn recording_sink() -> (ProgressSink, Arc<Mutex<Vec<f64>>>) {
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

        // What has waited too long is swept with the next notification.
        tokio::time::advance(HOLD_FOR).await;
        routes.deliver(note(1_000, 1.0));
        assert_eq!(routes.len(), 1, "the expired ones are gone, the fresh one held");
        routes.deliver(note(1_001, 1.0));
        assert_eq!(routes.len(), 2);
        let (sink, seen) = recording_sink();
        drop(routes.route(token(1_000), Some(sink)));
        assert_eq!(*seen.lock().unwrap(), vec![1.0]);
    }

    /// Held notifications are never reported after [`HOLD_FOR`], however few tokens are held:
    /// one left over from a finished call must not become a later call's progress.
    #[tokio::test(start_paused = true)]
    async fn held_notifications_expire_even_below_the_bound() {
        let routes = Arc::new(ProgressRoutes::default());
        routes.deliver(note(7, 1.0));
        tokio::time::advance(Duration::from_secs(3600)).await;
        let (sink, seen) = recording_sink();
        drop(routes.route(token(7), Some(sink)));
        assert!(seen.lock().unwrap().is_empty(), "an expired notification was reported: {:?}", seen.lock().unwrap());
        // A notification after the expiry is held afresh.
        routes.deliver(note(8, 1.0));
        tokio::time::advance(HOLD_FOR / 2).await;
        routes.deliver(note(8, 2.0));
        let (sink, seen) = recording_sink();
        drop(routes.route(token(8), Some(sink)));
        assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0]);
        // Expired entries go even when no call claims them.
        routes.deliver(note(9, 1.0));
        tokio::time::advance(HOLD_FOR).await;
        routes.deliver(note(10, 1.0));
        assert_eq!(routes.len(), 1, "only token 10 is held");
    }

    /// A route is removed by the call that made it: an older route of the same token ending does
    /// not take a newer call's progress (nor make it look finished to liveness).
    #[tokio::test]
    async fn an_older_route_ending_leaves_a_newer_route_of_the_same_token() {
        let routes = Arc::new(ProgressRoutes::default());
        let (a, seen_a) = recording_sink();
        let (b, seen_b) = recording_sink();
        let ga = routes.route(token(1), Some(a));
        let gb = routes.route(token(1), Some(b));
        drop(ga);
        assert!(routes.calls_running());
        routes.deliver(note(1, 1.0));
        assert_eq!(*seen_b.lock().unwrap(), vec![1.0]);
        assert!(seen_a.lock().unwrap().is_empty());
        drop(gb);
        assert!(!routes.calls_running());
    }

    /// What is held or waits for a slot is cut to what a progress event passes on, and a token
    /// rmcp never issues (a string) is not held at all.
    #[tokio::test]
    async fn held_notifications_are_small() {
        let routes = Arc::new(ProgressRoutes::default());
        let mut params = note(1, 1.0);
        params.message = Some("é".repeat(100_000));
        routes.deliver(params);
        match routes.routes.get(&token(1)).as_deref() {
            Some(Route::Held { early, .. }) => {
                let message = early[0].message.as_deref().unwrap();
                assert!(message.chars().count() <= MESSAGE_CHARS, "{} bytes held", message.len());
            }
            _ => panic!("token 1 is not held"),
        }
        let mut params = note(1, 1.0);
        params.progress_token = ProgressToken(NumberOrString::String("x".repeat(100_000).into()));
        routes.deliver(params);
        assert_eq!(routes.len(), 1, "a string token is not held");
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
