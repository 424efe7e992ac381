//! The bridge itself: frames pass byte-for-byte and in order, bad client frames get an `error`
//! event and the session survives, closes propagate both ways, upstream refusals are reported
//! without leaking anything, and the upstream request carries the right URL and headers.

mod support;

use std::time::Duration;

use base64::Engine;
use futures::{SinkExt, StreamExt};
use support::{Client, FakeMode, FakeUpstream, TestProxy, transcript};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

fn audio_frame(i: usize, bytes: usize) -> String {
    let pcm: Vec<u8> = (0..bytes).map(|b| ((b * 31 + i * 7) % 251) as u8).collect();
    let audio = base64::engine::general_purpose::STANDARD.encode(pcm);
    // Odd spacing and key order on purpose: the bytes must arrive exactly as sent.
    format!("{{\"type\":\"input_audio_buffer.append\", \"event_id\":\"evt_{i}\",\"audio\":\"{audio}\"}}")
}

fn output_audio_frame(i: usize) -> String {
    let pcm: Vec<u8> = (0..960).map(|b| ((b + i) % 253) as u8).collect();
    let delta = base64::engine::general_purpose::STANDARD.encode(pcm);
    format!(
        "{{\"type\":\"response.output_audio.delta\",\"event_id\":\"event_{i}\",\"response_id\":\"resp_1\",\"item_id\":\"item_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"{delta}\"}}"
    )
}

#[tokio::test]
async fn audio_passes_byte_for_byte_in_order_under_load() {
    let mut fake = FakeUpstream::start().await;
    // As fast as the socket goes: far past the per-session frame-rate ceiling, which is off here.
    let proxy = TestProxy::with_upstream(&fake, "[server]\nmax_client_frames_per_s = 0\n").await;
    let mut client = Client::connect(&proxy.url(""), &["realtime"]).await;
    let mut upstream = fake.accept().await;
    upstream.open_session().await;
    assert_eq!(client.next_json().await["type"], "session.created");

    const N: usize = 10_000;
    let sent: Vec<String> = (0..N).map(|i| audio_frame(i, 960)).collect();
    let to_send = sent.clone();
    let (mut client_tx, mut client_rx) = client.ws.split();
    let sender = tokio::spawn(async move {
        for frame in to_send {
            client_tx.send(Message::text(frame)).await.unwrap();
        }
        client_tx
    });
    for (i, expected) in sent.iter().enumerate() {
        let got = upstream.next_text().await;
        assert_eq!(&got, expected, "client frame {i} changed or reordered");
    }
    let _client_tx = sender.await.unwrap();

    let replies: Vec<String> = (0..N).map(output_audio_frame).collect();
    let to_reply = replies.clone();
    let (mut up_tx, _up_rx) = upstream.ws.split();
    let replier = tokio::spawn(async move {
        for frame in to_reply {
            up_tx.send(Message::text(frame)).await.unwrap();
        }
    });
    for (i, expected) in replies.iter().enumerate() {
        let got = loop {
            match client_rx.next().await.unwrap().unwrap() {
                Message::Text(t) => break t.to_string(),
                _ => continue,
            }
        };
        assert_eq!(&got, expected, "upstream frame {i} changed or reordered");
    }
    replier.await.unwrap();
    let (_, metrics) = proxy.http_get("/metrics").await;
    assert!(metrics.contains("voxgate_frames_total"), "{metrics}");
}

#[tokio::test]
async fn a_recorded_session_replays_unchanged() {
    // The barge-in transcript: audio, VAD, a cancelled response, truncate, a benign error.
    let frames = transcript("ga_barge_in_truncate.synthetic.jsonl");
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let mut client = Client::connect(&proxy.url(""), &["realtime"]).await;
    let mut upstream = fake.accept().await;
    let mut injected = false;
    for frame in &frames {
        let text = frame.event.to_string();
        if frame.dir == "c2s" {
            client.send_text(&text).await;
            let mut got = upstream.next_json().await;
            let voxgates = got["event_id"].as_str().is_some_and(|id| id.starts_with("voxgate_") && !id.starts_with("voxgate_client_"));
            if !injected && got["type"] == "session.update" && voxgates {
                injected = true;
                got = upstream.next_json().await;
            }
            if frame.event["type"] == "session.update" {
                // Server tools are merged into a client's tools list; everything else is the client's.
                assert_eq!(got["session"]["instructions"], frame.event["session"]["instructions"]);
            } else {
                assert_eq!(got, frame.event);
            }
        } else {
            upstream.send_text(&text).await;
            let mut got = client.next_text().await;
            // The transcript's client defines `search_pubmed`, a server tool's name: dropped, with an error.
            while got.contains("voxgate_server_tool_name") {
                got = client.next_text().await;
            }
            assert_eq!(got, text, "server frame changed");
            if frame.event["type"] == "session.created" && !injected {
                let update = upstream.next_json().await;
                assert_eq!(update["type"], "session.update");
                injected = true;
            }
        }
    }
}

#[tokio::test]
async fn bad_client_frames_get_errors_and_the_session_goes_on() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\nmax_frame_bytes = 4096\n").await;
    let (mut client, mut upstream) = proxy.ready_session(&mut fake).await;

    let cases: Vec<(Message, &str)> = vec![
        (Message::text("not json at all"), "voxgate_invalid_json"),
        (Message::text("{\"audio\":\"AAAA\"}"), "voxgate_missing_type"),
        (Message::text("{\"type\":\"input_audio_buffer.append\",\"audio\":\"AAA"), "voxgate_invalid_json"),
        (Message::binary(vec![1u8, 2, 3]), "voxgate_binary_frame"),
        (Message::text("{\"type\":\"voxgate.nope\",\"event_id\":\"e7\"}"), "voxgate_unknown_event"),
        (Message::text(audio_frame(0, 5_000)), "voxgate_frame_too_large"),
        (Message::text("{\"type\":\"voxgate.tool_call.confirm\",\"call_id\":\"call_x\",\"approved\":true}"), "voxgate_not_awaiting_confirmation"),
        (Message::text("{\"type\":\"voxgate.tool_call.confirm\",\"call_id\":5}"), "voxgate_invalid_event"),
    ];
    for (frame, code) in cases {
        client.ws.send(frame).await.unwrap();
        let error = client.until("error").await;
        assert_eq!(error["error"]["code"], code);
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    // The unknown voxgate event's event_id is echoed.
    // Still alive: an append reaches the upstream untouched.
    let frame = audio_frame(1, 100);
    client.send_text(&frame).await;
    assert_eq!(upstream.next_text().await, frame);
}

#[tokio::test]
async fn close_codes_propagate_both_ways() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;

    let mut client = Client::connect(&proxy.url(""), &[]).await;
    let mut upstream = fake.accept().await;
    upstream.open_session().await;
    client.ws.close(Some(CloseFrame { code: CloseCode::from(4001), reason: "user hung up".into() })).await.unwrap();
    assert_eq!(upstream.closed().await, (4001, "user hung up".to_string()));

    let mut client = Client::connect(&proxy.url(""), &[]).await;
    let mut upstream = fake.accept().await;
    upstream.open_session().await;
    client.next_json().await;
    let reason = "invalid_request_error.beta_api_shape_disabled";
    upstream.ws.close(Some(CloseFrame { code: CloseCode::from(4000), reason: reason.into() })).await.unwrap();
    assert_eq!(client.closed().await, (4000, reason.to_string()));
}

#[tokio::test]
async fn upstream_refusals_are_reported_without_leaking() {
    for (mode, extra) in [
        (FakeMode::Refuse(401), ""),
        (FakeMode::Refuse(404), ""),
        (FakeMode::Refuse(503), ""),
        (FakeMode::Hang, "connect_timeout_ms = 300\n"),
    ] {
        let fake = FakeUpstream::start_with(mode).await;
        let toml = format!(
            "[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-SECRET-KEY\"\n{extra}",
            fake.addr
        );
        let proxy = TestProxy::start(&toml).await;
        let mut client = Client::connect(&proxy.url(""), &[]).await;
        let text = client.next_text().await;
        assert!(text.contains("voxgate_upstream_unavailable"), "{mode:?}: {text}");
        for secret in ["SECRET", "sk-", "127.0.0.1", "internal.host"] {
            assert!(!text.contains(secret), "{mode:?} leaked {secret}: {text}");
        }
        if let FakeMode::Refuse(status) = mode {
            assert!(text.contains(&status.to_string()), "{text}");
        }
        let (code, reason) = client.closed().await;
        assert_eq!(code, 1013, "{mode:?}");
        assert!(!reason.contains("SECRET"));
        let metrics = proxy.http_get("/metrics").await.1;
        assert!(metrics.contains(r#"voxgate_client_errors_total{code="voxgate_upstream_unavailable"} 1"#), "{mode:?}: {metrics}");
    }
}

#[tokio::test]
async fn upstream_request_ga_beta_and_azure() {
    // GA (default): bearer, model from the client's query (an allowed one), no beta header.
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "allowed_models = [\"gpt-realtime-mini\"]\n").await;
    let _client = Client::connect(&proxy.url("?model=gpt-realtime-mini"), &[]).await;
    let conn = fake.accept().await;
    assert_eq!(conn.uri, "/v1/realtime?model=gpt-realtime-mini");
    assert_eq!(conn.header("authorization"), Some("Bearer sk-test-upstream-key"));
    assert_eq!(conn.header("openai-beta"), None);

    // Beta.
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "protocol = \"beta\"\n").await;
    let _client = Client::connect(&proxy.url(""), &[]).await;
    let conn = fake.accept().await;
    assert_eq!(conn.uri, "/v1/realtime?model=gpt-realtime");
    assert_eq!(conn.header("openai-beta"), Some("realtime=v1"));

    // Azure preview form: api-version + deployment, api-key header.
    let mut fake = FakeUpstream::start().await;
    let toml = format!(
        "[upstream]\nkind = \"azure\"\nurl = \"ws://{}/openai/realtime\"\napi_key = \"azure-key\"\ndeployment = \"rt-dep\"\napi_version = \"2025-04-01-preview\"\n",
        fake.addr
    );
    let proxy = TestProxy::start(&toml).await;
    let _client = Client::connect(&proxy.url(""), &[]).await;
    let conn = fake.accept().await;
    assert_eq!(conn.uri, "/openai/realtime?api-version=2025-04-01-preview&deployment=rt-dep");
    assert_eq!(conn.header("api-key"), Some("azure-key"));
    assert_eq!(conn.header("authorization"), None);

    // Azure GA form: model query.
    let mut fake = FakeUpstream::start().await;
    let toml = format!("[upstream]\nkind = \"azure\"\nurl = \"ws://{}/openai/v1/realtime\"\napi_key = \"azure-key\"\nmodel = \"my-dep\"\n", fake.addr);
    let proxy = TestProxy::start(&toml).await;
    let _client = Client::connect(&proxy.url(""), &[]).await;
    let conn = fake.accept().await;
    assert_eq!(conn.uri, "/openai/v1/realtime?model=my-dep");
    assert_eq!(conn.header("api-key"), Some("azure-key"));
}

#[tokio::test]
async fn subprotocol_selection_never_echoes_a_token() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let client = Client::connect(&proxy.url(""), &["realtime", "openai-insecure-api-key.sk-browser-token"]).await;
    assert_eq!(client.protocol.as_deref(), Some("realtime"));
    let _ = fake.accept().await;
    let client = Client::connect(&proxy.url(""), &["voxgate.v1", "voxgate-token.abc"]).await;
    assert_eq!(client.protocol.as_deref(), Some("voxgate.v1"));
}

/// A client may send its first frame in the same TCP segment as its upgrade request, before the
/// 101 comes back: the bytes hyper read past the request must reach the session, first.
#[tokio::test]
async fn a_frame_sent_with_the_upgrade_request_is_not_lost() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::frame::Frame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let append = r#"{"type":"input_audio_buffer.append","audio":"AAECAwQF"}"#;
    let mut bytes = format!(
        "GET /v1/realtime HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: realtime\r\n\r\n",
        proxy.addr
    )
    .into_bytes();
    // One text frame, masked as a client's must be (RFC 6455 §5.3).
    let mut frame = Frame::message(append, OpCode::Data(Data::Text), true);
    frame.header_mut().mask = Some([0x37, 0xfa, 0x21, 0x3d]);
    frame.format(&mut bytes).unwrap();
    let mut socket = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    socket.write_all(&bytes).await.unwrap();

    let mut head = [0u8; 12];
    socket.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101", "{}", String::from_utf8_lossy(&head));
    // The frame is forwarded as soon as the session runs, before the upstream's `session.created`
    // (which `open_session` would answer by reading up to voxgate's `session.update`).
    let mut upstream = fake.accept().await;
    let got = tokio::time::timeout(Duration::from_secs(5), upstream.next_json()).await.expect("the frame never came");
    assert_eq!(got["type"], "input_audio_buffer.append");
    assert_eq!(got["audio"], "AAECAwQF");
}

#[tokio::test]
async fn origin_allow_list_and_health() {
    let fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\nallowed_origins = [\"https://app.example.org\"]\n").await;
    let err = Client::try_connect(&proxy.url(""), &[], &[("origin", "https://evil.example.com")]).await.err().unwrap();
    assert!(err.to_string().contains("403"), "{err}");
    assert!(Client::try_connect(&proxy.url(""), &[], &[("origin", "https://app.example.org")]).await.is_ok());
    assert_eq!(proxy.http_get("/healthz").await.0, 200);
    assert_eq!(proxy.http_get("/readyz").await.0, 200);
    let (status, body) = proxy.http_get("/metrics").await;
    assert_eq!(status, 200);
    for name in ["voxgate_sessions_active", "voxgate_tool_calls_total", "voxgate_upstream_connect_seconds"] {
        assert!(body.contains(name), "{name} missing");
    }
}

#[tokio::test]
async fn drain_closes_sessions_with_1012_after_telling_them() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\ndrain_timeout_ms = 2000\n").await;
    let (mut client, _upstream) = proxy.ready_session(&mut fake).await;
    let stopping = tokio::spawn(proxy.stop());
    let closing = client.until("voxgate.session.closing").await;
    assert_eq!(closing["reason"], "service restart");
    assert_eq!(client.closed().await.0, 1012);
    tokio::time::timeout(Duration::from_secs(10), stopping).await.unwrap().expect("the drain finished");
}
