//! The simulated realtime model: voxgate's upstream when no API key is configured. It speaks the
//! OpenAI Realtime GA wire protocol over a real WebSocket running on an in-memory pipe, so the
//! session code cannot tell it from a remote server. It understands typed text only, through a few
//! keyword rules, and calls the server tools for recognisable requests; it answers with a soft tone
//! as "speech" plus an honest transcript. See docs/simulated-model.md.
//!
//! # Layout
//! - [`session`]: the task behind one socket: client events in, paced server events out.
//! - [`validate`]: checks on client events, with the service's error codes.
//! - [`conversation`]: the ordered items of the default conversation.
//! - [`planner`]: what the next response says or calls.
//! - [`intents`]: the keyword rules (calendar, calculators, PubMed) and fitting arguments to schemas.
//! - [`summary`]: the sentence spoken after a tool result.
//! - [`response`]: one response as an event generator (and its cancellation).
//! - [`events`], [`audio`], [`vad`]: event shapes and ids, the tone, the toy voice detector.

mod audio;
mod conversation;
mod events;
mod intents;
mod planner;
mod response;
mod session;
mod summary;
#[cfg(test)]
mod tests;
mod vad;
mod validate;

use std::time::Duration;

use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite;

/// Wait between two streamed deltas (each carries 50 ms of audio): audio arrives faster than real
/// time, but slowly enough that a cancel or barge-in lands mid-answer.
pub const DEFAULT_PACING: Duration = Duration::from_millis(20);

/// Bytes the in-memory pipe buffers in each direction: a few large audio appends.
const PIPE_BYTES: usize = 1 << 20;

/// Options of a simulated session.
#[derive(Debug, Clone, Default)]
pub struct SimulatedOptions {
    /// Reported as the session's `model` (default `gpt-realtime`).
    pub model: String,
    /// Wait between streamed deltas; `None` = [`DEFAULT_PACING`]. Tests shorten it.
    pub pacing: Option<Duration>,
    /// The largest frame either end reads (`upstream.max_frame_bytes`); `None` = tungstenite's
    /// defaults (16 MiB a frame), below what `server.max_frame_bytes` may let a client send.
    pub max_frame_bytes: Option<usize>,
}

/// Start a simulated session and return the client end of a WebSocket connected to it. The model
/// runs in its own task, which ends when the client end is closed or dropped.
pub async fn connect(
    options: SimulatedOptions,
) -> Result<WebSocketStream<tokio::io::DuplexStream>, tungstenite::Error> {
    let (client_io, server_io) = tokio::io::duplex(PIPE_BYTES);
    let config = options.max_frame_bytes.map(super::ws_config);
    let server = tokio::spawn(async move {
        match tokio_tungstenite::accept_async_with_config(server_io, config).await {
            Ok(ws) => session::run(ws, options).await,
            Err(err) => tracing::debug!(error = %err, "simulated model handshake failed"),
        }
    });
    let url = "ws://simulated.voxgate.invalid/v1/realtime";
    match tokio_tungstenite::client_async_with_config(url, client_io, config).await {
        Ok((ws, _response)) => Ok(ws),
        Err(err) => {
            server.abort();
            Err(err)
        }
    }
}
