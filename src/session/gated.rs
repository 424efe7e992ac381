//! A future or stream that is polled only after its own waker fired.
//!
//! `select!` polls every enabled arm on every turn of the session loop, whichever arm woke it: at
//! 50 audio frames a second each way, a waiter that almost never completes — the session's
//! cancellation, the drain's abort, the alarm behind every deadline — is polled a hundred times a
//! second for nothing. Polling a `CancellationToken` waiter takes a mutex each time (it was 1.5 %
//! of the session threads' samples in the profile of issue 17, docs/performance.md), and a timer
//! re-registers its waker. [`Gated`] gives the inner future a waker of its own and polls it only
//! when that waker has fired since the last poll (or on the first poll, or after [`Gated::rearm`]):
//! other turns cost a flag read and a check that the task's waker is still the one the gate holds.
//! The same idea is how `FuturesUnordered` polls only the futures that were woken.
//!
//! The two sockets' reads are gated too (`outbox.rs`). A turn woken by a client frame used to poll
//! the upstream's stream as well (then a lock on the split socket, tungstenite's read path, two waker
//! registrations), and the stream that had just said `Pending` again on the next turn: five stream
//! polls per wake-up where a bare relay makes three. A gated stream is polled again at once after
//! it yields a frame (more may be buffered) and after a `Pending` only once its socket woke it.
//!
//! The inner future is held in place, not boxed: a turn looks at every gate, and between two turns
//! of one session the other sessions' frames have pushed its memory out of the cache, so a pointer
//! to follow is one more miss. A future that must be pinned is boxed by its owner.
//!
//! The task's waker is handed to a gate's signal only when it changed (in a session: once), and
//! the signal keeps it across wakes. `futures`' `AtomicWaker` gives its waker away on every wake,
//! so it had to be registered again on every poll: two atomic read-modify-writes per gate per turn
//! on a line the turn would otherwise only read.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use futures::Stream;

/// Set by the inner future's waker; forwards the wake to the task that polls the [`Gated`].
///
/// No wake is lost: the owner sets `task` before it reads `woken`, and a wake sets `woken` before
/// it reads `task`. Either the wake takes the lock after the owner's update (and wakes the current
/// task), or it took it before, and then its `woken` store happened before the owner's read, which
/// sees it.
struct Signal {
    woken: AtomicBool,
    /// The waker of the task that polls the gate; kept, not taken, by a wake.
    task: Mutex<Option<Waker>>,
}

impl Signal {
    fn set_task(&self, waker: &Waker) {
        *self.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(waker.clone());
    }
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(task) = &*self.task.lock().unwrap_or_else(PoisonError::into_inner) {
            task.wake_by_ref();
        }
    }
}

/// `inner`, polled only when it asked to be (see the module docs).
pub(crate) struct Gated<F> {
    inner: F,
    signal: Arc<Signal>,
    /// The inner future's waker: made once, so a real poll allocates nothing.
    waker: Waker,
    /// The task waker last handed to `signal`, to see without touching it whether it changed.
    registered: Option<Waker>,
}

impl<F: Unpin> Gated<F> {
    pub(crate) fn new(inner: F) -> Self {
        // Woken at the start: the first poll must reach the inner future so it registers.
        let signal = Arc::new(Signal { woken: AtomicBool::new(true), task: Mutex::new(None) });
        let waker = Waker::from(signal.clone());
        Self { inner, signal, waker, registered: None }
    }

    /// The inner future, to change it (e.g. move a timer's deadline). It is polled again on the
    /// next poll, as it must be after such a change.
    pub(crate) fn rearm(&mut self) -> &mut F {
        self.signal.woken.store(true, Ordering::Release);
        &mut self.inner
    }

    /// The inner future or stream, to use past the gate without polling it for the gate: a
    /// socket whose reads are gated is written through this, with the writer's own waker.
    pub(crate) fn inner_mut(&mut self) -> &mut F {
        &mut self.inner
    }

    /// `poll` the inner future or stream with its own waker, if that waker fired since the last
    /// time; `Pending` otherwise.
    fn poll_gated<T>(&mut self, cx: &mut Context<'_>, poll: impl FnOnce(Pin<&mut F>, &mut Context<'_>) -> Poll<T>) -> Poll<T> {
        // The task's waker is set before the flag is read: a wake between the two is not lost.
        if !self.registered.as_ref().is_some_and(|task| task.will_wake(cx.waker())) {
            self.signal.set_task(cx.waker());
            self.registered = Some(cx.waker().clone());
        }
        // Read before it is swapped: a quiet gate is not written to.
        if !self.signal.woken.load(Ordering::Acquire) || !self.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        poll(Pin::new(&mut self.inner), &mut Context::from_waker(&self.waker))
    }
}

impl<F: Future + Unpin> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.poll_gated(cx, Future::poll)
    }
}

impl<S: Stream + Unpin> Stream for Gated<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let next = self.poll_gated(cx, Stream::poll_next);
        if next.is_ready() {
            // More may be buffered behind this item, and no waker fires for those.
            self.signal.woken.store(true, Ordering::Release);
        }
        next
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// Counts its polls and never completes.
    struct Counting {
        polls: Arc<AtomicUsize>,
    }

    impl Future for Counting {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            Poll::Pending
        }
    }

    #[test]
    fn the_inner_future_is_polled_first_then_only_when_rearmed() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut gated = Box::pin(Gated::new(Counting { polls: polls.clone() }));
        let mut cx = Context::from_waker(Waker::noop());
        for _ in 0..100 {
            assert!(gated.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled on every turn");
        gated.as_mut().get_mut().rearm();
        assert!(gated.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    /// Yields its items one per poll, counting polls, then says `Pending` for ever.
    struct Items {
        left: usize,
        polls: Arc<AtomicUsize>,
    }

    impl Stream for Items {
        type Item = usize;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<usize>> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.left == 0 {
                return Poll::Pending;
            }
            self.left -= 1;
            Poll::Ready(Some(self.left))
        }
    }

    #[test]
    fn a_stream_is_drained_then_left_alone_until_woken() {
        let polls = Arc::new(AtomicUsize::new(0));
        let mut gated = Gated::new(Items { left: 3, polls: polls.clone() });
        let mut cx = Context::from_waker(Waker::noop());
        let mut items = Vec::new();
        while let Poll::Ready(Some(item)) = Pin::new(&mut gated).poll_next(&mut cx) {
            items.push(item);
        }
        // Every buffered item came out, in order, without a wake in between.
        assert_eq!(items, [2, 1, 0]);
        assert_eq!(polls.load(Ordering::Relaxed), 4);
        for _ in 0..100 {
            assert!(Pin::new(&mut gated).poll_next(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 4, "a pending stream was polled without a wake");
        gated.waker.wake_by_ref();
        assert!(Pin::new(&mut gated).poll_next(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::Relaxed), 5);
    }

    #[tokio::test]
    async fn a_gated_stream_gets_every_item_across_wake_ups() {
        use futures::SinkExt;
        // A small channel: the sender waits for room, so the receiver goes `Pending` and is woken
        // again and again.
        let (mut tx, rx) = futures::channel::mpsc::channel::<usize>(2);
        let mut items = Gated::new(rx);
        let sender = tokio::spawn(async move {
            for i in 0..200 {
                tx.send(i).await.unwrap();
                if i % 7 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        });
        // One bound for the whole run, not one per item: a per-item timer polls the gate when it
        // fires, which hides a lost wake (the run only slows to one item per bound).
        let received = async {
            for i in 0..200 {
                assert_eq!(items.next().await, Some(i));
            }
        };
        tokio::time::timeout(Duration::from_secs(10), received).await.expect("every wake got through");
        sender.await.unwrap();
        assert_eq!(items.next().await, None, "the end of the stream comes through");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_wake_from_another_thread_is_lost() {
        use futures::SinkExt;
        // A rendezvous channel fed from a plain thread: every item needs a wake that crosses
        // threads, racing the polls that read the flag.
        let (mut tx, rx) = futures::channel::mpsc::channel::<usize>(0);
        let sender = std::thread::spawn(move || {
            futures::executor::block_on(async {
                for i in 0..5_000 {
                    tx.send(i).await.unwrap();
                }
            })
        });
        let mut items = Gated::new(rx);
        let received = async {
            for i in 0..5_000 {
                assert_eq!(items.next().await, Some(i));
            }
        };
        tokio::time::timeout(Duration::from_secs(10), received).await.expect("every wake got through");
        sender.join().unwrap();
    }

    #[tokio::test]
    async fn a_cancellation_still_ends_the_wait() {
        let token = CancellationToken::new();
        let gated = Gated::new(Box::pin(token.clone().cancelled_owned()));
        let cancel = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            token.cancel();
        });
        tokio::time::timeout(Duration::from_secs(5), gated).await.expect("woken by the cancellation");
        cancel.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_moved_timer_fires_at_its_new_deadline() {
        let start = tokio::time::Instant::now();
        let mut gated = Gated::new(Box::pin(tokio::time::sleep_until(start + Duration::from_secs(60))));
        // Registered at 60 s, then moved to 1 s: the gate must let the new deadline through.
        assert!(futures::poll!(&mut gated).is_pending());
        gated.rearm().as_mut().reset(start + Duration::from_secs(1));
        gated.await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }
}
