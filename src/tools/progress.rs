//! Progress of a running call, relayed to the page as `voxgate.tool_call.progress` (CONTRACT §10).
//!
//! The session puts a [`ProgressSink`] in scope of each tool task it spawns (a task-local, so
//! [`CallContext`](super::CallContext) and every tool stay unchanged); a tool that learns of
//! progress — an MCP server's `notifications/progress` — reports through [`current`]. Progress is
//! advisory: when the client's queue is full it is dropped rather than slowing anyone down.

use std::future::Future;
use std::sync::Arc;

use crate::protocol::voxgate as events;

/// Longest progress message passed on, in characters.
const MAX_MESSAGE_CHARS: usize = 200;

tokio::task_local! {
    static SINK: Option<ProgressSink>;
}

/// Sends one call's progress events to its session's client.
/// The client's side is a callback, so tools need not know the session's outbox: it queues the
/// event if there is room and drops it otherwise (progress is advisory).
#[derive(Clone)]
pub struct ProgressSink {
    call_id: String,
    to_client: Arc<dyn Fn(String) + Send + Sync>,
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProgressSink").field("call_id", &self.call_id).finish()
    }
}

impl ProgressSink {
    pub fn new(call_id: String, to_client: impl Fn(String) + Send + Sync + 'static) -> Self {
        Self { call_id, to_client: Arc::new(to_client) }
    }

    pub fn report(&self, progress: f64, total: Option<f64>, message: Option<&str>) {
        let message: Option<String> = message.map(|m| m.chars().take(MAX_MESSAGE_CHARS).collect());
        let event = events::tool_call_progress(&self.call_id, progress, total, message.as_deref());
        (self.to_client)(event);
    }
}

/// Run `call` with `sink` as its progress sink (`None`: the client does not want events).
pub fn scope<F: Future>(sink: Option<ProgressSink>, call: F) -> impl Future<Output = F::Output> {
    SINK.scope(sink, call)
}

/// The running call's progress sink, if its client wants progress.
pub fn current() -> Option<ProgressSink> {
    SINK.try_with(Clone::clone).ok().flatten()
}
