//! The edge against a hostile or merely careful client, over real sockets to a real server: a
//! subprotocol is echoed only when offered (RFC 6455), `?model=` only from the allow-list, a ticket
//! refused for its session cap is not spent, a JWT may not outlive `auth.max_token_lifetime_s`,
//! a `Sec-WebSocket-Key` that is not 16 bytes in base64 is a 400 `bad_handshake`, and sessions
//! opened one after another spread over the session threads.

mod support;

use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::{Client, FakeUpstream, TestProxy, handshake_status};

const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";
const ADMIN: &str = "admin-token-0123456789abcdef";

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hs256(claims: Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

fn auth_toml(extra_server: &str) -> String {
    format!(
        "[server]\n{extra_server}\n[auth]\nmode = \"ticket\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\nmax_token_lifetime_s = 3600\n"
    )
}

#[tokio::test]
async fn a_subprotocol_is_echoed_only_when_offered() {
    let proxy = TestProxy::start("").await;
    // Events asked for by query, no subprotocol offered: none selected (an RFC 6455 client such as
    // this one fails the handshake otherwise).
    let client = tokio::time::timeout(
        Duration::from_secs(10),
        Client::try_connect(&proxy.url("?voxgate_events=1"), &[], &[]),
    )
    .await
    .unwrap()
    .expect("the handshake must succeed without an offered subprotocol");
    assert_eq!(client.protocol, None);
    let offered = Client::connect(&proxy.url(""), &["voxgate.v1"]).await;
    assert_eq!(offered.protocol.as_deref(), Some("voxgate.v1"));
    let realtime = Client::connect(&proxy.url("?voxgate_events=1"), &["realtime"]).await;
    assert_eq!(realtime.protocol.as_deref(), Some("realtime"));
}

#[tokio::test]
async fn only_allowed_models_may_be_asked_for() {
    let proxy = TestProxy::start("[upstream]\nallowed_models = [\"gpt-realtime-mini\"]\n").await;
    assert_eq!(
        handshake_status(&proxy.url("?model=gpt-realtime-mini"), &[], &[]).await,
        101
    );
    assert_eq!(
        handshake_status(&proxy.url("?model=gpt-realtime"), &[], &[]).await,
        101,
        "upstream.model itself"
    );
    assert_eq!(handshake_status(&proxy.url(""), &[], &[]).await, 101);
    assert_eq!(
        handshake_status(&proxy.url("?model=some-expensive-model"), &[], &[]).await,
        400
    );
}

#[tokio::test]
async fn a_ticket_refused_for_the_session_cap_is_not_spent() {
    let proxy = TestProxy::start(&auth_toml("max_sessions_per_user = 1")).await;
    let http = reqwest::Client::new();
    let mut tickets = Vec::new();
    for _ in 0..2 {
        let minted: Value = http
            .post(format!("http://{}/v1/sessions", proxy.addr))
            .bearer_auth(ADMIN)
            .json(&json!({"sub": "dr.cap", "roles": ["clinician"], "ttl_s": 60}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tickets.push(format!(
            "voxgate-token.{}",
            minted["token"].as_str().unwrap()
        ));
    }
    let mut first = Client::connect(&proxy.url(""), &["realtime", &tickets[0]]).await;
    assert_eq!(
        handshake_status(&proxy.url(""), &["realtime", &tickets[1]], &[]).await,
        429,
        "over the per-user cap"
    );
    first.ws.close(None).await.unwrap();
    drop(first);
    // Once the first session is gone, the refused ticket still opens a session (once).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match handshake_status(&proxy.url(""), &["realtime", &tickets[1]], &[]).await {
            101 => break,
            429 if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            other => panic!("the ticket refused for the cap was spent or refused: {other}"),
        }
    }
}

#[tokio::test]
async fn tokens_longer_lived_than_the_maximum_are_refused() {
    let proxy = TestProxy::start(&auth_toml("")).await;
    let bearer = |token: String| format!("Bearer {token}");
    let short = hs256(json!({"sub": "dr.a", "iat": now(), "exp": now() + 600}));
    assert_eq!(
        handshake_status(&proxy.url(""), &[], &[("authorization", &bearer(short))]).await,
        101
    );
    let year = hs256(json!({"sub": "dr.a", "iat": now(), "exp": now() + 365 * 24 * 3600}));
    assert_eq!(
        handshake_status(&proxy.url(""), &[], &[("authorization", &bearer(year))]).await,
        401
    );
    let no_iat = hs256(json!({"sub": "dr.a", "exp": now() + 7200}));
    assert_eq!(
        handshake_status(&proxy.url(""), &[], &[("authorization", &bearer(no_iat))]).await,
        401
    );
}

/// The status line and body of a WebSocket handshake sent with `key` as its `Sec-WebSocket-Key`.
async fn handshake_with_key(addr: std::net::SocketAddr, key: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "GET /v1/realtime HTTP/1.1\r\nhost: voxgate\r\nupgrade: websocket\r\nconnection: upgrade\r\n\
         sec-websocket-version: 13\r\nsec-websocket-key: {key}\r\n\r\n"
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut answer)).await.unwrap().unwrap();
    String::from_utf8_lossy(&answer[..n]).into_owned()
}

/// RFC 6455 §4.2.1: the key is 16 bytes in base64; anything else is refused before the upgrade, as
/// docs/protocol.md says.
#[tokio::test]
async fn an_invalid_websocket_key_is_a_bad_handshake() {
    let proxy = TestProxy::start("").await;
    // 16 bytes in base64: the upgrade goes ahead.
    let good = handshake_with_key(proxy.addr, "dGhlIHNhbXBsZSBub25jZQ==").await;
    assert!(good.starts_with("HTTP/1.1 101"), "{good:?}");
    // Not base64; base64 of 8 bytes; base64 of 17 bytes.
    for key in ["not a key!", "AAAAAAAAAAA=", "AAAAAAAAAAAAAAAAAAAAAAA="] {
        let answer = handshake_with_key(proxy.addr, key).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{key}: {answer:?}");
        assert!(answer.contains(r#""code":"bad_handshake""#), "{key}: {answer:?}");
    }
}

/// The value of `voxgate_session_thread_connections{thread="<thread>"}` in a scrape.
fn thread_load(metrics: &str, thread: usize) -> Option<i64> {
    let series = format!("voxgate_session_thread_connections{{thread=\"{thread}\"}} ");
    metrics.lines().find_map(|line| line.strip_prefix(series.as_str())?.trim().parse().ok())
}

#[tokio::test]
async fn sessions_opened_one_after_another_spread_over_the_session_threads() {
    // A session outlives its HTTP connection's future (hyper's ends at the upgrade); counted only
    // while that ran, every session opened alone found both threads idle and went to the first.
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "[server]\nsession_threads = 2\n").await;
    let mut sessions = Vec::new();
    for _ in 0..3 {
        sessions.push(proxy.ready_session(&mut fake).await);
    }
    let (_, metrics) = proxy.http_get("/metrics").await;
    let loads = [thread_load(&metrics, 0).unwrap(), thread_load(&metrics, 1).unwrap()];
    // Three sessions, two on one thread and one on the other, and the scrape's own connection on
    // the one with one: [3, 1] would be a placement that ignores sessions.
    assert_eq!(loads, [2, 2], "connections per thread");
    drop(sessions);
    proxy.stop().await;
}

/// `listener::MAX_HTTP_CONNECTIONS_PER_PEER`: connections from one address (not a trusted proxy)
/// that have not upgraded (or closed) yet.
const HTTP_CONNECTIONS_PER_PEER: usize = 256;

/// A socket from `from` (a loopback address: Linux routes all of 127/8 to `lo`) to `to`.
async fn connect_from(from: [u8; 4], to: std::net::SocketAddr) -> tokio::net::TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
    socket.connect(to).await.unwrap()
}

/// A `GET /healthz` from `from`: its answer, empty when the server closed the connection first.
async fn healthz_from(from: [u8; 4], to: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = connect_from(from, to).await;
    // Closed at once, the server may reset the connection before this is written.
    let _ = socket.write_all(b"GET /healthz HTTP/1.1\r\nhost: voxgate\r\nconnection: close\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), socket.read_to_end(&mut answer)).await.expect("answered or closed within 2 s");
    String::from_utf8_lossy(&answer).into_owned()
}

/// Unfinished request heads from one address fill that address's share: its next connection is
/// closed at once (not left waiting in the listen backlog, where the probes would wait behind it),
/// another address is served at once, and the first is served again once it gives one up.
#[tokio::test]
async fn connections_still_in_http_are_bounded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let proxy = TestProxy::start("").await;
    let mut stalled = Vec::with_capacity(HTTP_CONNECTIONS_PER_PEER);
    for _ in 0..HTTP_CONNECTIONS_PER_PEER {
        let mut socket = connect_from([127, 0, 0, 1], proxy.addr).await;
        socket.write_all(b"GET / HTTP/1.1\r\nx-slow: ").await.unwrap();
        stalled.push(socket);
    }
    let mut over = connect_from([127, 0, 0, 1], proxy.addr).await;
    let _ = over.write_all(b"GET /healthz HTTP/1.1\r\nhost: voxgate\r\n\r\n").await;
    let mut answer = vec![0u8; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(2), over.read(&mut answer)).await;
    assert!(matches!(closed, Ok(Ok(0) | Err(_))), "a connection past the address's share was kept: {closed:?}");
    let other = healthz_from([127, 0, 0, 2], proxy.addr).await;
    assert!(other.starts_with("HTTP/1.1 200"), "another address: {other:?}");
    drop(stalled.pop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let again = healthz_from([127, 0, 0, 1], proxy.addr).await;
        if again.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not served again once a slot was given up: {again:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(stalled);
}

/// The answer to a `GET /healthz` whose head carries `filler` bytes in one header; empty when the
/// server closed (or reset) the connection without one.
async fn get_with_header_of(addr: std::net::SocketAddr, filler: usize) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!("GET /healthz HTTP/1.1\r\nhost: voxgate\r\nx-big: {}\r\nconnection: close\r\n\r\n", "a".repeat(filler));
    // The server may stop reading and close before all of it is written.
    let _ = socket.write_all(head.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await.expect("the connection ends");
    String::from_utf8_lossy(&answer).into_owned()
}

/// hyper's default read buffer grows to about 408 KiB per connection; the head may take 64 KiB,
/// room for a large JWT and cookies, and a larger one is refused (431, or the socket closed).
#[tokio::test]
async fn a_request_head_over_the_read_buffer_is_refused() {
    let proxy = TestProxy::start("").await;
    let fits = get_with_header_of(proxy.addr, 48 * 1024).await;
    assert!(fits.starts_with("HTTP/1.1 200"), "{}", &fits[..fits.len().min(200)]);
    let over = get_with_header_of(proxy.addr, 100 * 1024).await;
    assert!(over.is_empty() || over.starts_with("HTTP/1.1 431"), "{}", &over[..over.len().min(200)]);
}

/// A client that asks for more than the socket buffers hold and never reads is let go once its
/// response has made no progress for `server.handshake_timeout_ms`, rather than holding its
/// connection (and its slot) for ever.
#[tokio::test]
async fn a_client_that_never_reads_its_responses_is_let_go() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const REQUESTS: usize = 1000;
    let proxy = TestProxy::start("[server]\nhandshake_timeout_ms = 1000\n").await;
    let mut socket = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    // About 21 MB of answers, pipelined.
    let request = "GET /assets/voxgate-client.js HTTP/1.1\r\nhost: voxgate\r\n\r\n";
    socket.write_all(request.repeat(REQUESTS).as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut answers = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), socket.read_to_end(&mut answers)).await.expect("the connection ends");
    let served = String::from_utf8_lossy(&answers).matches("HTTP/1.1 200").count();
    assert!(served < REQUESTS, "the stalled connection was kept: {served} answers");
}

/// The upstream refusing voxgate's own tool injection (Azure's preview endpoint spoken to in GA
/// shapes refuses `session.type`) leaves the session without server tools: a warning, not a line
/// at debug that production never shows.
#[tokio::test]
async fn a_refused_tool_injection_is_a_warning() {
    let mut fake = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-test\"\n\
         [audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        fake.addr,
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display()
    );
    let (mut child, addr, logs) = support::spawn_voxgate_logged(&config, dir.path(), Some("info"), &[]).await;
    let _client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime"]).await;
    let mut up = fake.accept().await;
    let injection = up.open_session().await;
    assert_eq!(injection["type"], "session.update", "{injection}");
    up.send_json(&json!({"type": "error", "event_id": "event_9", "error": {"type": "invalid_request_error",
        "code": "unknown_parameter", "message": "Unknown parameter: 'session.type'.", "param": "session.type",
        "event_id": injection["event_id"]}}))
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let line = loop {
        let text = logs.lock().unwrap().clone();
        if let Some(line) = text.lines().find(|l| l.contains("upstream refused an event voxgate sent")) {
            break line.to_string();
        }
        assert!(tokio::time::Instant::now() < deadline, "no line about the refusal:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("unknown_parameter"), "{line}");
    child.kill().await.unwrap();
}
