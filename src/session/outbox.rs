//! A peer's socket, owned whole by the session task: no writer task, no channel, and no split
//! into halves. A bare relay reads a frame and writes it in the same task; so does voxgate.
//!
//! Writing: a frame is handed to the socket library at once when nothing waits before it and the
//! socket takes frames; otherwise it is queued here (bounded by bytes). The session loop flushes
//! and writes what is queued at the end of each turn without waiting (`drive_now`), and whatever
//! the socket did not take is written by the loop's arm for this peer when the socket has room
//! again. Several frames handed over in one turn go out with one flush.
//!
//! Reading: through a [`Gated`] stream, so a turn woken by the other peer does not poll this
//! socket (see `gated.rs`). Writes go to the same socket past the gate, with the loop's waker;
//! the socket library keeps a reader's and a writer's waker apart, as it does for split halves.
//!
//! Not split: `StreamExt::split` puts the socket behind a `BiLock`, taken and released on every
//! read, every `poll_ready`, every `start_send` and every flush (two atomic swaps each). Only the
//! session task touches the socket, so the lock guarded nothing; it was ≈ 3 % of the session
//! threads' samples (docs/performance-history.md, fourteenth and fifteenth passes).
//!
//! The queue is the backpressure we want: a peer that does not read fills it, the session then
//! waits for room (a slow reader slows the peer that feeds it), and every such wait is bounded by
//! the caller. The bound is in bytes, not frames: 64 frames of up to 32 MiB each would let one
//! client make voxgate hold gigabytes for a peer that does not read. A frame larger than the whole
//! budget still goes through, alone: it waits until the queue is empty and then takes all of it.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures::{Sink, SinkExt, Stream, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message, protocol::CloseFrame};

use super::gated::Gated;

/// Bytes queued per socket before the session loop waits: ~25 s of 24 kHz PCM16 audio as base64
/// deltas, and far more than an honest peer ever lets pile up. (The socket library holds at most
/// [`SOCKET_WRITE_BUFFER`] plus one frame more once the kernel's buffer is full: its write buffer
/// is flushed before it takes another.)
pub const OUTBOX_BYTES: usize = 1024 * 1024;
/// What a frame costs in the budget besides its payload (so empty pings are bounded too).
const FRAME_OVERHEAD: usize = 64;

/// The socket library's write buffer (tungstenite's `write_buffer_size`) for every session
/// socket: frames handed over in one turn are gathered up to this many bytes and go out in one
/// write at the turn's flush, as a relay's `forward` does; once past it they are written out.
/// Four audio deltas go in one write. At 0 (eager writes) every frame cost its own `sendto` where
/// the bare relay gathers a burst into one or two (measured at N = 1,000: 241,557 writes against
/// the relay's 13,289 in 4 s). Small, and the capacity a burst leaves behind is released after
/// the write (the vendored tungstenite patch), so an idle session keeps none of it.
pub const SOCKET_WRITE_BUFFER: usize = 8 * 1024;

/// What a socket yields: a frame, or why it could not read one.
pub type FrameResult = Result<Message, tungstenite::Error>;

/// A WebSocket to either peer, read and written: a `tokio_tungstenite::WebSocketStream` over TCP,
/// TLS or an in-process pipe.
pub trait Socket: Stream<Item = FrameResult> + Sink<Message, Error = tungstenite::Error> + Send {}

impl<T> Socket for T where T: Stream<Item = FrameResult> + Sink<Message, Error = tungstenite::Error> + Send {}

/// A peer's socket as the session holds it (`upstream::UpstreamConn` carries one). Taken as it
/// is: each layer around it (a second box, an error mapper) would be one more call on every frame.
pub type BoxSocket = Pin<Box<dyn Socket>>;

/// What the loop's arm for a peer saw.
pub enum PeerIo {
    /// The next frame read (`None`: the peer's stream ended).
    Frame(Option<FrameResult>),
    /// Writing failed: the outbox is closed, which the loop notices after the turn.
    WriteFailed,
}

/// A peer's socket and the frames waiting to be written to it, owned by the session task.
pub struct Outbox {
    /// Read through the gate; written past it (`Gated::inner_mut`).
    socket: Gated<BoxSocket>,
    /// Frames the socket has not taken yet, oldest first.
    queue: VecDeque<Message>,
    queued_bytes: usize,
    /// Frames were handed to the socket since its last flush.
    unflushed: bool,
    /// The socket failed or was closed: nothing more can be written.
    closed: bool,
}

/// The peer is gone or the socket failed.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the socket is closed")]
pub struct Closed;

impl Outbox {
    pub fn new(socket: BoxSocket) -> Self {
        Self {
            socket: Gated::new(socket),
            queue: VecDeque::new(),
            queued_bytes: 0,
            unflushed: false,
            closed: false,
        }
    }

    fn cost(message: &Message) -> usize {
        message.len().saturating_add(FRAME_OVERHEAD).min(OUTBOX_BYTES)
    }

    /// Whether there is anything to write or flush: the loop's arm for this peer writes only then.
    pub fn has_work(&self) -> bool {
        !self.closed && (!self.queue.is_empty() || self.unflushed)
    }

    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Write what the socket takes and flush it: `Ready(Ok)` once nothing is left, `Pending`
    /// while the peer is not reading, `Ready(Err)` once the socket has failed.
    fn poll_drive(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        if self.closed {
            return Poll::Ready(Err(Closed));
        }
        while !self.queue.is_empty() {
            std::task::ready!(self.poll_socket_ready(cx))?;
            let Some(message) = self.queue.pop_front() else { break };
            self.queued_bytes = self.queued_bytes.saturating_sub(Self::cost(&message));
            self.hand_over(message)?;
        }
        if self.unflushed {
            match self.socket.inner_mut().as_mut().poll_flush(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return self.fail(),
                Poll::Ready(Ok(())) => self.unflushed = false,
            }
        }
        Poll::Ready(Ok(()))
    }

    /// Whether the socket takes a frame now; a failed socket closes the outbox.
    fn poll_socket_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Closed>> {
        match self.socket.inner_mut().as_mut().poll_ready(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(_)) => self.fail(),
            Poll::Ready(Ok(())) => Poll::Ready(Ok(())),
        }
    }

    /// Give the socket a frame after it said it takes one; a failed socket closes the outbox. The
    /// frame it failed on is lost with what the socket library had gathered but not written:
    /// keeping it would take a copy of every frame handed over, on the hot path.
    fn hand_over(&mut self, message: Message) -> Result<(), Closed> {
        if self.socket.inner_mut().as_mut().start_send(message).is_err() {
            let _ = self.fail();
            return Err(Closed);
        }
        self.unflushed = true;
        Ok(())
    }

    /// The queue is kept: the peer never took those frames, and a resume carries them to the
    /// next upstream ([`Outbox::take_unsent`]).
    fn fail(&mut self) -> Poll<Result<(), Closed>> {
        self.closed = true;
        Poll::Ready(Err(Closed))
    }

    /// Write until everything queued is with the peer's kernel.
    async fn drive(&mut self) -> Result<(), Closed> {
        std::future::poll_fn(|cx| self.poll_drive(cx)).await
    }

    /// Write what the socket takes right now, without waiting; the rest is left to the loop's arm
    /// ([`Outbox::next_io`]).
    pub fn drive_now(&mut self) {
        if self.has_work() {
            // A waker that does nothing is fine here: whatever stays pending is polled again by
            // the loop's arm for this peer, with the loop's waker, before the loop sleeps.
            let _ = self.poll_drive(&mut Context::from_waker(Waker::noop()));
        }
    }

    /// The next frame from the peer, if one is there now or once the socket wakes the gate.
    pub fn next_frame(&mut self) -> impl Future<Output = Option<FrameResult>> + Unpin + '_ {
        self.socket.next()
    }

    /// The loop's one arm for this peer: writes what waits for room (while [`Outbox::has_work`])
    /// and reads the next frame (while `reading`). Ready with the frame, or when writing failed;
    /// a write that merely finished is no news, and the wait goes on. One arm, not two, as both
    /// use the one socket.
    pub async fn next_io(&mut self, reading: bool) -> PeerIo {
        std::future::poll_fn(|cx| {
            if self.has_work() && matches!(self.poll_drive(cx), Poll::Ready(Err(Closed))) {
                return Poll::Ready(PeerIo::WriteFailed);
            }
            if !reading {
                return Poll::Pending;
            }
            self.socket.poll_next_unpin(cx).map(PeerIo::Frame)
        })
        .await
    }

    fn has_room(&self, cost: usize) -> bool {
        self.queue.is_empty() || self.queued_bytes.saturating_add(cost) <= OUTBOX_BYTES
    }

    /// Hand a frame to the socket library at once when nothing waits before it and the socket
    /// takes frames (as a relay's `forward` does); queue it otherwise. The turn's end flushes it.
    fn push(&mut self, message: Message, cost: usize) {
        if self.queue.is_empty() {
            // A waker that does nothing, as in `drive_now`: a socket with no room leaves the frame
            // queued, and the loop's arm polls the socket with the loop's waker before it sleeps.
            match self.poll_socket_ready(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(Ok(())) => {
                    // A failure closes the outbox, which the loop notices after the turn.
                    let _ = self.hand_over(message);
                    return;
                }
                // The socket failed before taking the frame: it is queued like one the socket had
                // no room for, and kept with the queue for a resume to carry, in its place.
                Poll::Ready(Err(Closed)) | Poll::Pending => {}
            }
        }
        self.queued_bytes = self.queued_bytes.saturating_add(cost);
        self.queue.push_back(message);
    }

    /// Queue a frame, writing meanwhile, and waiting while the queue is full. Callers bound the
    /// wait.
    pub async fn send(&mut self, message: Message) -> Result<(), Closed> {
        self.send_from(&mut Some(message)).await
    }

    /// [`Outbox::send`] that takes the frame out of `message` only once it is queued: a caller
    /// whose wait was cut short (a timeout) still has it.
    pub async fn send_from(&mut self, message: &mut Option<Message>) -> Result<(), Closed> {
        let cost = message.as_ref().map_or(0, Self::cost);
        std::future::poll_fn(|cx| {
            if self.closed {
                return Poll::Ready(Err(Closed));
            }
            if !self.has_room(cost) {
                if let Poll::Ready(Err(Closed)) = self.poll_drive(cx) {
                    return Poll::Ready(Err(Closed));
                }
                if !self.has_room(cost) {
                    return Poll::Pending;
                }
            }
            if let Some(message) = message.take() {
                self.push(message, cost);
            }
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Put a frame the peer would not take in time at the end of the queue, past the byte budget:
    /// nothing more is sent to this peer ([`Outbox::take_unsent`] hands it on, in order).
    pub fn keep_unsent(&mut self, message: Message) {
        self.queued_bytes = self.queued_bytes.saturating_add(Self::cost(&message));
        self.queue.push_back(message);
    }

    /// The frames the peer never took, oldest first; the queue is empty after.
    pub fn take_unsent(&mut self) -> VecDeque<Message> {
        self.queued_bytes = 0;
        std::mem::take(&mut self.queue)
    }

    /// Queue a frame without waiting; `Ok(false)` when the queue is full.
    pub fn try_send(&mut self, message: Message) -> Result<bool, Closed> {
        self.try_send_or_return(message).map(|kept| kept.is_none())
    }

    /// Queue a frame if there is room now; the frame comes back (`Ok(Some)`) when the queue is
    /// full, for the caller's bounded [`Outbox::send`]. The common case thus needs no timer.
    pub fn try_send_or_return(&mut self, message: Message) -> Result<Option<Message>, Closed> {
        if self.closed {
            return Err(Closed);
        }
        let cost = Self::cost(&message);
        if !self.has_room(cost) {
            return Ok(Some(message));
        }
        self.push(message, cost);
        Ok(None)
    }

    /// Send a close frame after what is queued and close the socket, all within `within`: a peer
    /// that stopped reading does not get the close frame, only the closed socket.
    pub async fn close(mut self, frame: Option<CloseFrame>, within: Duration) {
        let closing = async {
            self.send(Message::Close(frame)).await?;
            self.drive().await?;
            self.socket.inner_mut().close().await.map_err(|_| Closed)
        };
        let _ = tokio::time::timeout(within, closing).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::harness::pair;

    #[tokio::test(start_paused = true)]
    async fn a_stalled_peer_holds_at_most_the_byte_budget() {
        // A peer that never reads: the pipe between the two fills after 4 KiB.
        let (ours, _stalled_peer) = pair(4096).await;
        let mut outbox = Outbox::new(Box::pin(ours));
        let frame = || Message::text("x".repeat(256 * 1024));
        let mut queued = 0;
        while outbox.try_send(frame()).unwrap() {
            outbox.drive_now();
            queued += 1;
        }
        // One frame went to the socket library's buffer; the rest of the budget is the queue's.
        assert!(queued <= OUTBOX_BYTES / (256 * 1024), "queued {queued} frames");
        assert!(tokio::time::timeout(Duration::from_secs(5), outbox.send(frame())).await.is_err());
        // A frame larger than the whole budget is not refused forever, only queued alone.
        let huge = Message::text("y".repeat(3 * OUTBOX_BYTES));
        assert_eq!(Outbox::cost(&huge), OUTBOX_BYTES);
        // Closing is bounded even though the peer never reads.
        tokio::time::timeout(Duration::from_secs(10), outbox.close(None, Duration::from_secs(2))).await.unwrap();
    }

    #[tokio::test]
    async fn frames_reach_the_peer_in_order_and_a_frame_larger_than_the_budget_goes_alone() {
        let (ours, mut peer) = pair(4096).await;
        let mut outbox = Outbox::new(Box::pin(ours));
        let huge = Message::text("h".repeat(2 * OUTBOX_BYTES));
        // The first frame goes straight to the socket, which then has no room (nobody reads yet):
        // the next one waits in the queue.
        let blocking = 256 * 1024;
        outbox.try_send(Message::text("b".repeat(blocking))).unwrap();
        outbox.try_send(Message::text("1")).unwrap();
        // The queue is not empty, so the huge frame must wait for it to drain.
        assert!(!outbox.try_send(huge.clone()).unwrap());
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(Ok(message)) = peer.next().await {
                got.push(message.len());
            }
            got
        });
        outbox.send(huge).await.unwrap();
        outbox.send(Message::text("22")).await.unwrap();
        outbox.drive().await.unwrap();
        outbox.close(None, Duration::from_secs(2)).await;
        let got = reader.await.unwrap();
        assert_eq!(got[..4], [blocking, 1, 2 * OUTBOX_BYTES, 2]);
    }

    #[tokio::test]
    async fn one_arm_writes_what_waits_and_reads_the_next_frame_from_the_same_socket() {
        let (ours, mut peer) = pair(64 * 1024).await;
        let mut outbox = Outbox::new(Box::pin(ours));
        outbox.try_send(Message::text("to the peer")).unwrap();
        assert!(outbox.has_work());
        peer.send(Message::text("from the peer")).await.unwrap();
        let io = tokio::time::timeout(Duration::from_secs(5), outbox.next_io(true)).await.unwrap();
        let PeerIo::Frame(Some(Ok(frame))) = io else { panic!("no frame read") };
        assert_eq!(frame, Message::text("from the peer"));
        // The queued frame was written on the way, with no other call.
        assert!(!outbox.has_work());
        let got = tokio::time::timeout(Duration::from_secs(5), peer.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(got, Message::text("to the peer"));
        // Not reading and nothing to write: nothing to wait for.
        assert!(tokio::time::timeout(Duration::from_millis(50), outbox.next_io(false)).await.is_err());
    }

    #[tokio::test]
    async fn a_failed_socket_is_reported_closed() {
        let (ours, peer) = pair(4096).await;
        drop(peer);
        let mut outbox = Outbox::new(Box::pin(ours));
        outbox.try_send(Message::text("lost")).unwrap();
        let io = tokio::time::timeout(Duration::from_secs(5), outbox.next_io(false)).await.unwrap();
        assert!(matches!(io, PeerIo::WriteFailed));
        assert!(outbox.is_closed());
        assert!(outbox.try_send(Message::text("more")).is_err());
    }
}
