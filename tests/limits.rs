//! Connection and session limits: a silent socket is cut at the handshake timeout, an idle session
//! closes, a client that stops reading is closed with 1008 instead of being buffered without
//! bound, and pings are answered.

mod support;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::json;
use support::{FakeUpstream, TestProxy};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;

#[tokio::test]
async fn a_connection_that_never_sends_its_request_is_cut() {
    let proxy = TestProxy::start("[server]\nhandshake_timeout_ms = 300\n").await;
    let mut socket = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let mut buf = [0u8; 256];
    let read = tokio::time::timeout(Duration::from_secs(5), socket.read(&mut buf)).await;
    let closed = match read {
        Ok(Ok(n)) => n == 0 || String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 408"),
        Ok(Err(_)) => true,
        Err(_) => false,
    };
    assert!(closed, "the server kept a silent connection open");
}

#[tokio::test]
async fn an_idle_session_is_closed() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\nidle_timeout_ms = 300\nping_interval_ms = 100\n").await;
    let (mut client, _up) = proxy.ready_session(&mut fake).await;
    let closing = client.until("voxgate.session.closing").await;
    assert_eq!(closing["reason"], "idle timeout");
    let (code, reason) = client.closed().await;
    assert_eq!((code, reason.as_str()), (1000, "idle timeout"));
}

#[tokio::test]
async fn pings_are_answered() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, _up) = proxy.ready_session(&mut fake).await;
    client.ws.send(Message::Ping(b"are you there".to_vec().into())).await.unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            if let Some(Ok(Message::Pong(payload))) = client.ws.next().await {
                return payload;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(&pong[..], b"are you there");
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_with_1008() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\nclient_send_timeout_ms = 300\n").await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    // The model streams audio; the client reads nothing. 64 KiB frames fill the socket buffers
    // quickly; after that voxgate must give up on the client rather than queue without bound.
    let audio = "A".repeat(64 * 1024);
    let delta = json!({"type": "response.output_audio.delta", "event_id": "e", "response_id": "r", "item_id": "i", "output_index": 0, "content_index": 0, "delta": audio}).to_string();
    let flood = tokio::spawn(async move {
        for _ in 0..2_000 {
            if up.ws.send(Message::text(delta.clone())).await.is_err() {
                break;
            }
        }
        up
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Now read: what was buffered, then the close.
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match client.ws.next().await {
                Some(Ok(Message::Close(Some(frame)))) => return Some(u16::from(frame.code)),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .expect("the session was not closed");
    assert!(matches!(closed, Some(1008) | None), "closed with {closed:?}");
    let _ = flood.await;
    let (_, metrics) = proxy.http_get("/metrics").await;
    assert!(metrics.contains("voxgate_sessions_total{outcome=\"slow_client\"} 1"), "{metrics}");
}
