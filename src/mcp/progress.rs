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

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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

enum Route {
    /// A running call; `None` when its client does not want progress events.
    Routed(Option<ProgressSink>),
    /// Notifications that came before the route, oldest first, and when the first came.
    Held { since: Instant, early: Vec<ProgressNotificationParam> },
}

/// The progress routes of one server's running calls.
#[derive(Default)]
pub(super) struct ProgressRoutes {
    routes: DashMap<ProgressToken, Route>,
    /// Entries in the `Held` state.
    held: AtomicUsize,
}

impl ProgressRoutes {
    /// A notification from the server: to its call's sink, or held until the call routes it.
    pub fn deliver(&self, params: ProgressNotificationParam) {
        if self.held.load(Ordering::Relaxed) >= HELD_TOKENS {
            self.sweep_expired();
        }
        let sink = match self.routes.entry(params.progress_token.clone()) {
            Entry::Occupied(mut entry) => match entry.get_mut() {
                Route::Routed(sink) => sink.clone(),
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
        if let Some(sink) = sink {
            report(&sink, &params);
        }
    }

    /// Route `token`'s notifications to `sink` until the returned guard is dropped; what was held
    /// for it is reported first.
    pub fn route(self: &Arc<Self>, token: ProgressToken, sink: Option<ProgressSink>) -> RouteGuard {
        match self.routes.entry(token.clone()) {
            Entry::Occupied(mut entry) => {
                let previous = std::mem::replace(entry.get_mut(), Route::Routed(sink.clone()));
                if let Route::Held { early, .. } = previous {
                    self.held.fetch_sub(1, Ordering::Relaxed);
                    // Reported while the entry is locked: a notification arriving meanwhile
                    // waits for the entry, so it cannot overtake these.
                    if let Some(sink) = &sink {
                        early.iter().for_each(|params| report(sink, params));
                    }
                }
            }
            Entry::Vacant(entry) => {
                entry.insert(Route::Routed(sink));
            }
        }
        RouteGuard { routes: self.clone(), token }
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

/// Removes a call's route when the call ends (or is dropped).
pub(super) struct RouteGuard {
    routes: Arc<ProgressRoutes>,
    token: ProgressToken,
}

impl Drop for RouteGuard {
    fn drop(&mut self) {
        self.routes.routes.remove(&self.token);
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
        let _guard = routes.route(token(1), Some(sink));
        routes.deliver(note(1, 3.0));
        assert_eq!(*seen.lock().unwrap(), vec![1.0, 2.0, 3.0]);
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
        let (sink, seen) = recording_sink();
        drop(routes.route(token(0), Some(sink)));
        assert_eq!(seen.lock().unwrap().len(), HELD_PER_TOKEN, "no more per token than the bound");

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
}
