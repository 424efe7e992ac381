//! Per-session frame and loop-turn counters: counted in plain fields on the session's own task
//! and added to the shared Prometheus counters in batches, so the per-frame cost is a local add.

use prometheus_client::metrics::counter::Counter;

/// Frame and loop-turn counts of one session, kept in plain fields and added to the shared
/// counters (`voxgate_frames_total`, `voxgate_session_loop_turns_total`) every [`FLUSH_EVERY`]
/// counts, whenever the session calls [`FrameCounters::flush`] (on its ping tick and other
/// non-frame work) and when it is dropped. Counting a frame is then a local add: no atomic shared
/// by every session on every frame, and no timer of its own. A scrape may miss at most
/// `FLUSH_EVERY` counts per live session; nothing is lost.
#[derive(Debug)]
pub struct FrameCounters {
    shared: SharedFrameCounters,
    client_to_upstream: u32,
    upstream_to_client: u32,
    loop_turns: u32,
}

/// The shared counters a session's [`FrameCounters`] flush into.
#[derive(Clone, Debug)]
struct SharedFrameCounters {
    client_to_upstream: Counter,
    upstream_to_client: Counter,
    loop_turns: Counter,
}

/// Counts a session holds before adding them to the shared counters: ≈ 0.3 s of a real-time
/// audio session (50 frames/s each way plus the loop turns).
pub const FLUSH_EVERY: u32 = 64;

impl FrameCounters {
    pub(super) fn new(client_to_upstream: Counter, upstream_to_client: Counter, loop_turns: Counter) -> Self {
        Self {
            shared: SharedFrameCounters { client_to_upstream, upstream_to_client, loop_turns },
            client_to_upstream: 0,
            upstream_to_client: 0,
            loop_turns: 0,
        }
    }

    /// A frame read from the client and sent (or meant) to the upstream.
    #[inline]
    pub fn client_to_upstream(&mut self) {
        self.client_to_upstream += 1;
        self.counted();
    }

    /// A frame read from the upstream and sent (or meant) to the client.
    #[inline]
    pub fn upstream_to_client(&mut self) {
        self.upstream_to_client += 1;
        self.counted();
    }

    /// One turn of a session loop.
    #[inline]
    pub fn loop_turn(&mut self) {
        self.loop_turns += 1;
        self.counted();
    }

    /// Counts since the last flush, all three together.
    #[inline]
    fn pending(&self) -> u32 {
        self.client_to_upstream + self.upstream_to_client + self.loop_turns
    }

    #[inline]
    fn counted(&mut self) {
        if self.pending() >= FLUSH_EVERY {
            self.flush();
        }
    }

    /// Add what was counted since the last flush to the shared counters.
    pub fn flush(&mut self) {
        if self.pending() == 0 {
            return;
        }
        let add = |counter: &Counter, n: &mut u32| {
            if *n > 0 {
                counter.inc_by(u64::from(std::mem::take(n)));
            }
        };
        add(&self.shared.client_to_upstream, &mut self.client_to_upstream);
        add(&self.shared.upstream_to_client, &mut self.upstream_to_client);
        add(&self.shared.loop_turns, &mut self.loop_turns);
    }
}

impl Drop for FrameCounters {
    /// A session's last counts are flushed however it ends (also on panic or cancellation).
    fn drop(&mut self) {
        self.flush();
    }
}
