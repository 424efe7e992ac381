//! One writer task per socket behind a queue bounded by bytes. The session loop never waits on a
//! socket write directly; it waits only when the queue is full, which is the backpressure we want
//! (a slow reader slows the peer that feeds it), and every such wait is bounded by the caller. The
//! writer batches what is queued into one flush.
//!
//! The bound is in bytes, not frames: 64 frames of up to 32 MiB each let one client make voxgate
//! hold gigabytes for a peer that does not read. A frame larger than the whole budget still goes
//! through, alone: it waits until the queue is empty and then takes all of it.

use std::sync::Arc;

use futures::{Sink, SinkExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_tungstenite::tungstenite::{Message, protocol::CloseFrame};
use tokio_util::task::AbortOnDropHandle;

/// Bytes queued per socket before the session loop waits: ~25 s of 24 kHz PCM16 audio as base64
/// deltas, and far more than an honest peer ever lets pile up.
pub const OUTBOX_BYTES: usize = 1024 * 1024;
/// What a frame costs in the budget besides its payload (so empty pings are bounded too).
const FRAME_OVERHEAD: usize = 64;
/// Frames written per flush at most.
const BATCH: usize = 32;

/// The sending half of a socket.
pub struct Outbox {
    tx: mpsc::UnboundedSender<(Message, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
    /// Dropping the outbox ends the writer even when it is stuck on a peer that does not read.
    writer: AbortOnDropHandle<()>,
}

/// The writer ended: the peer is gone or the socket failed.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the socket is closed")]
pub struct Closed;

impl Outbox {
    pub fn spawn<S>(mut sink: S) -> Self
    where
        S: Sink<Message> + Send + Unpin + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<(Message, OwnedSemaphorePermit)>();
        let budget = Arc::new(Semaphore::new(OUTBOX_BYTES));
        // Frames are taken one by one (`try_recv`) rather than with `recv_many` into a batch
        // vector: the vector would keep 32 slots alive for every idle socket. A frame's budget is
        // given back once the sink has taken it.
        let writer = tokio::spawn(async move {
            'outer: while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                let mut fed = 0;
                while let Some((message, permit)) = next.take() {
                    let is_close = matches!(message, Message::Close(_));
                    if sink.feed(message).await.is_err() {
                        break 'outer;
                    }
                    drop(permit);
                    if is_close {
                        let _ = sink.flush().await;
                        break 'outer;
                    }
                    fed += 1;
                    if fed < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                if sink.flush().await.is_err() {
                    break;
                }
            }
            rx.close();
            let _ = sink.close().await;
        });
        Self {
            tx,
            budget,
            writer: AbortOnDropHandle::new(writer),
        }
    }

    fn cost(message: &Message) -> u32 {
        let bytes = message
            .len()
            .saturating_add(FRAME_OVERHEAD)
            .min(OUTBOX_BYTES);
        u32::try_from(bytes).unwrap_or(u32::MAX)
    }

    /// Queue a frame, waiting while the queue is full. Callers bound the wait.
    pub async fn send(&self, message: Message) -> Result<(), Closed> {
        if self.tx.is_closed() {
            return Err(Closed);
        }
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(Self::cost(&message))
            .await
            .map_err(|_| Closed)?;
        self.tx.send((message, permit)).map_err(|_| Closed)
    }

    /// Queue a frame without waiting; `Ok(false)` when the queue is full.
    pub fn try_send(&self, message: Message) -> Result<bool, Closed> {
        try_queue(&self.tx, &self.budget, message).map(|kept| kept.is_none())
    }

    /// Queue a frame if there is room now; the frame comes back (`Ok(Some)`) when the queue is
    /// full, for the caller's bounded [`Outbox::send`]. The common case thus needs no timer.
    pub fn try_send_or_return(&self, message: Message) -> Result<Option<Message>, Closed> {
        try_queue(&self.tx, &self.budget, message)
    }

    /// Queue a close frame and wait (bounded) for the writer to finish.
    pub async fn close(self, frame: Option<CloseFrame>, within: std::time::Duration) {
        // A full queue at close means the peer stopped reading; give up on the close frame then.
        let _ = tokio::time::timeout(within, self.send(Message::Close(frame))).await;
        let Outbox { tx, writer, .. } = self;
        drop(tx);
        // Past `within` the writer is dropped, which aborts it.
        let _ = tokio::time::timeout(within, writer).await;
    }

    /// A handle for frames queued from outside the session loop with `try_send` (advisory
    /// events such as tool progress, dropped when the queue is full).
    pub fn sender(&self) -> Advisory {
        Advisory { tx: self.tx.clone(), budget: Arc::clone(&self.budget) }
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// Queue without waiting, within the byte budget shared with the session loop's sends; the frame
/// is handed back when the budget has no room for it.
fn try_queue(
    tx: &mpsc::UnboundedSender<(Message, OwnedSemaphorePermit)>,
    budget: &Arc<Semaphore>,
    message: Message,
) -> Result<Option<Message>, Closed> {
    if tx.is_closed() {
        return Err(Closed);
    }
    match budget.clone().try_acquire_many_owned(Outbox::cost(&message)) {
        Ok(permit) => tx.send((message, permit)).map(|()| None).map_err(|_| Closed),
        Err(tokio::sync::TryAcquireError::NoPermits) => Ok(Some(message)),
        Err(tokio::sync::TryAcquireError::Closed) => Err(Closed),
    }
}

/// A cloneable handle that only ever `try_send`s: for advisory frames queued from outside the
/// session loop (tool progress), which are dropped rather than waited for when the queue is full.
#[derive(Clone)]
pub struct Advisory {
    tx: mpsc::UnboundedSender<(Message, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
}

impl Advisory {
    /// Queue the frame if there is room; `false` when it was dropped.
    pub fn try_send(&self, message: Message) -> bool {
        matches!(try_queue(&self.tx, &self.budget, message), Ok(None))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A sink that never accepts a frame: a peer that stopped reading.
    struct Stalled;

    impl Sink<Message> for Stalled {
        type Error = ();
        fn poll_ready(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), ()>> {
            std::task::Poll::Pending
        }
        fn start_send(self: std::pin::Pin<&mut Self>, _: Message) -> Result<(), ()> {
            Ok(())
        }
        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), ()>> {
            std::task::Poll::Pending
        }
        fn poll_close(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), ()>> {
            std::task::Poll::Pending
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_stalled_peer_holds_at_most_the_byte_budget() {
        let outbox = Outbox::spawn(Stalled);
        let frame = || Message::text("x".repeat(256 * 1024));
        let mut queued = 0;
        while outbox.try_send(frame()).unwrap() {
            queued += 1;
        }
        // One frame is inside the stalled sink; the rest of the budget is queued.
        assert!(
            queued <= OUTBOX_BYTES / (256 * 1024) + 1,
            "queued {queued} frames"
        );
        assert!(
            tokio::time::timeout(Duration::from_secs(5), outbox.send(frame()))
                .await
                .is_err()
        );
        // A frame larger than the whole budget is not refused forever, only queued alone.
        let huge = Message::text("y".repeat(3 * OUTBOX_BYTES));
        assert_eq!(Outbox::cost(&huge) as usize, OUTBOX_BYTES);
        // Closing is bounded even though the peer never reads.
        tokio::time::timeout(
            Duration::from_secs(10),
            outbox.close(None, Duration::from_secs(2)),
        )
        .await
        .unwrap();
    }
}
