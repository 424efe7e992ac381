//! Frames that arrive together are forwarded together: one turn of the session loop (and so one
//! flush, one write) for a burst, as a bare relay's `forward` does, not one per frame. Each frame
//! still arrives as the same bytes and in order. And a peer that sends nothing costs nothing: the
//! loop does not poll its socket on the turns that the other peer's frames wake it for.

use futures::{SinkExt, StreamExt};
use serde_json::json;
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use super::start;

/// Frames in the burst: far more than one turn handles, so a loop that forwarded one frame per
/// turn shows it in the turn count even though the count is flushed in steps of
/// [`crate::telemetry::metrics::FLUSH_EVERY`].
const BURST: usize = 256;

fn burst(kind: &str) -> Vec<String> {
    (0..BURST).map(|i| json!({"type": kind, "delta": format!("AAAA{i:04}")}).to_string()).collect()
}

/// Write every frame, then flush once: the whole burst is in the socket before the session reads.
async fn send_burst(ws: &mut WebSocketStream<DuplexStream>, frames: &[String]) {
    for frame in frames {
        ws.feed(Message::text(frame.clone())).await.unwrap();
    }
    ws.flush().await.unwrap();
}

async fn receive_all(ws: &mut WebSocketStream<DuplexStream>, frames: &[String]) {
    for expected in frames {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => assert_eq!(text.as_str(), expected),
            other => panic!("expected a forwarded frame, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_burst_is_forwarded_unchanged_in_a_few_turns_each_way() {
    let mut h = start(|_| {}, 1 << 20).await;

    let up = burst("input_audio_buffer.append");
    let before = h.turns();
    send_burst(&mut h.browser, &up).await;
    receive_all(&mut h.model, &up).await;
    let spent = h.turns() - before;
    assert!(spent < (BURST / 4) as u64, "{spent} turns for {BURST} client frames");

    let down = burst("response.output_audio.delta");
    let before = h.turns();
    send_burst(&mut h.model, &down).await;
    receive_all(&mut h.browser, &down).await;
    let spent = h.turns() - before;
    assert!(spent < (BURST / 4) as u64, "{spent} turns for {BURST} upstream frames");
}

#[tokio::test(start_paused = true)]
async fn a_quiet_upstream_is_not_polled_for_the_clients_frames() {
    let mut h = start(|_| {}, 1 << 20).await;
    let frames = 100;
    let before = h.upstream_polls.load(std::sync::atomic::Ordering::Relaxed);
    for i in 0..frames {
        // One frame at a time, each forwarded before the next is sent: a wake-up per frame.
        let frame = json!({"type": "input_audio_buffer.append", "audio": format!("AAAA{i:04}")}).to_string();
        h.browser.send(Message::text(frame.clone())).await.unwrap();
        receive_all(&mut h.model, &[frame]).await;
    }
    let polls = h.upstream_polls.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(polls < frames / 10, "the quiet upstream was polled {polls} times for {frames} client frames");
}
