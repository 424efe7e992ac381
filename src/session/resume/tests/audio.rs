//! Client audio held while the upstream is away: what is past `upstream.resume_audio_ms` is
//! dropped, and the client told how much, at the session's own input format.

use std::time::Duration;

use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::{browser_sync, drop_model, resumable};
use crate::session::harness::upstream_conn;

#[tokio::test(start_paused = true)]
async fn audio_held_past_the_window_is_dropped_and_counted() {
    let (mut h, offer, _) = resumable(|c| c.upstream.resume_audio_ms = 1000).await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    // 100 ms of PCM16 at 24 kHz, base64.
    let audio = |id: &str| json!({"type": "input_audio_buffer.append", "event_id": id, "audio": "A".repeat(6400)});
    h.browser_sends(audio("old")).await;
    // As PHP's json_encode writes base64: `/` escaped as `\/` (still 100 ms of audio).
    let escaped = format!(r#"{{"type":"input_audio_buffer.append","event_id":"old_php","audio":"{}"}}"#, r"AAA\/".repeat(1600));
    futures::SinkExt::send(&mut h.browser, Message::text(escaped)).await.unwrap();
    browser_sync(&mut h).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    h.browser_sends(audio("new")).await;
    browser_sync(&mut h).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.model_expects("input_audio_buffer.append").await["event_id"], "new");
    assert_eq!(h.browser_expects("voxgate.session.resumed").await["audio_dropped_ms"], 200);
}

#[tokio::test(start_paused = true)]
async fn g711_audio_is_counted_at_its_own_rate() {
    let (mut h, offer, _) = resumable(|c| c.upstream.resume_audio_ms = 1000).await;
    let pcmu = json!({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}});
    h.browser_sends(pcmu).await;
    h.model_expects("session.update").await;
    let proxy_side = drop_model(&mut h).await;
    h.browser_expects("voxgate.session.resuming").await;
    // 4800 bytes, base64: 600 ms of G.711 at 8 kHz (it would be 100 ms of PCM16 at 24 kHz).
    h.browser_sends(json!({"type": "input_audio_buffer.append", "event_id": "old", "audio": "A".repeat(6400)})).await;
    browser_sync(&mut h).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    offer.send(Ok(upstream_conn(proxy_side))).unwrap();
    assert_eq!(h.browser_expects("voxgate.session.resumed").await["audio_dropped_ms"], 600);
}
