//! One writer task per socket behind a bounded channel. The session loop never waits on a socket
//! write directly; it waits only when the channel is full, which is the backpressure we want (a
//! slow reader slows the peer that feeds it). The writer batches what is queued into one flush.

use futures::{Sink, SinkExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::{Message, protocol::CloseFrame};

/// Frames queued per socket before the session loop waits.
pub const OUTBOX_CAPACITY: usize = 64;
/// Frames written per flush at most.
const BATCH: usize = 32;

/// The sending half of a socket.
pub struct Outbox {
    tx: mpsc::Sender<Message>,
    writer: JoinHandle<()>,
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
        let (tx, mut rx) = mpsc::channel::<Message>(OUTBOX_CAPACITY);
        // Frames are taken one by one (`try_recv`) rather than with `recv_many` into a batch
        // vector: the vector would keep 32 slots (≈ 1.8 KiB) alive for every idle socket.
        let writer = tokio::spawn(async move {
            'outer: while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                let mut fed = 0;
                while let Some(message) = next.take() {
                    let is_close = matches!(message, Message::Close(_));
                    if sink.feed(message).await.is_err() {
                        break 'outer;
                    }
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
            let _ = sink.close().await;
        });
        Self { tx, writer }
    }

    /// Queue a frame, waiting while the queue is full.
    pub async fn send(&self, message: Message) -> Result<(), Closed> {
        self.tx.send(message).await.map_err(|_| Closed)
    }

    /// Queue a frame without waiting; `Ok(false)` when the queue is full.
    pub fn try_send(&self, message: Message) -> Result<bool, Closed> {
        match self.tx.try_send(message) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(Closed),
        }
    }

    /// Queue a close frame and wait (bounded) for the writer to finish.
    pub async fn close(self, frame: Option<CloseFrame>, within: std::time::Duration) {
        // A full queue at close means the peer stopped reading; give up on the close frame then.
        let _ = tokio::time::timeout(within, self.tx.send(Message::Close(frame))).await;
        drop(self.tx);
        let mut writer = self.writer;
        if tokio::time::timeout(within, &mut writer).await.is_err() {
            writer.abort();
        }
    }

    /// A handle for frames queued from outside the session loop with `try_send` (advisory
    /// events such as tool progress, dropped when the queue is full).
    pub fn sender(&self) -> mpsc::Sender<Message> {
        self.tx.clone()
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}
