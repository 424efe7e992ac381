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
    let (first, _up1) = proxy.ready_session(&mut fake).await;
    let (second, _up2) = proxy.ready_session(&mut fake).await;
    let (_, metrics) = proxy.http_get("/metrics").await;
    let loads = [thread_load(&metrics, 0).unwrap(), thread_load(&metrics, 1).unwrap()];
    // Two sessions and the scrape's own connection, one session on each thread.
    assert_eq!(loads.iter().sum::<i64>(), 3, "{loads:?}");
    assert!(loads.iter().all(|&n| n >= 1), "sessions per thread: {loads:?}");
    drop((first, second));
    proxy.stop().await;
}
