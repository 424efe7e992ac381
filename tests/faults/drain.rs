//! The drain (SIGTERM) against what is half-way through: an admin tool call running, one whose
//! body is still arriving, one in its limit check, and a session being admitted. Each is
//! answered, finished and audited, or refused as draining; none is dropped.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::support::{self, Client, FakeUpstream, TestProxy};
use super::{ADMIN, BMI};

/// A web-search backend that answers after `delay` (a stalled backend); its base URL, and a
/// notice of its first request.
async fn slow_search_backend(delay: Duration) -> (String, std::sync::Arc<tokio::sync::Notify>) {
    let asked = std::sync::Arc::new(tokio::sync::Notify::new());
    let notify = asked.clone();
    let app = axum::Router::new().fallback(axum::routing::get(move || {
        notify.notify_one();
        async move {
            tokio::time::sleep(delay).await;
            ([("content-type", "application/json")], r#"{"web":{"results":[]}}"#)
        }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, asked)
}

/// Invokes `web_search_medical` through the admin API of the instance at `addr` and returns once
/// its `call_started` is in `audit`; the request's answer is the task's.
async fn admin_search_started(
    addr: std::net::SocketAddr,
    audit: &std::path::Path,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = tokio::spawn(async move {
        reqwest::Client::new()
            .post(format!("http://{addr}/admin/tools/web_search_medical/invoke"))
            .bearer_auth(ADMIN)
            .json(&json!({"arguments": {"query": "apixaban dosing in renal impairment"}, "sub": "ops"}))
            .send()
            .await
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while !support::read_jsonl(audit).iter().any(|r| r["event"] == "call_started") {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the admin call never started");
    request
}

/// An admin call still running when the drain begins gets `drain_timeout_ms`, like a session's,
/// then fails as timed out: the admin gets an answer and the log its `call_finished`, before the
/// drain gives up on what is left.
#[tokio::test]
async fn an_admin_call_running_when_the_drain_begins_is_finished_and_audited() {
    let (backend, asked) = slow_search_backend(Duration::from_secs(30)).await;
    let fake = FakeUpstream::start().await;
    let toml = format!(
        "[server]\ndrain_timeout_ms = 200\n[auth]\nadmin_token = \"{ADMIN}\"\n\
         [backends.web_search]\nprovider = \"brave\"\nbase_url = \"{backend}\"\napi_key = \"brave-key\"\n\
         [tools.web_search_medical]\ntimeout_ms = 30000\n"
    );
    let TestProxy { server, addr, dir } = TestProxy::with_upstream(&fake, &toml).await;
    let audit = dir.path().join("audit.jsonl");
    let request = admin_search_started(addr, &audit).await;
    // Running, not only started in the log: a drain that begins between its `call_started` and
    // the tool's start declines it instead (the test below).
    tokio::time::timeout(Duration::from_secs(10), asked.notified()).await.expect("the tool never asked its backend");

    let started = Instant::now();
    server.shutdown().await.unwrap();
    let report = voxgate::audit::verify(&audit, &voxgate::audit::Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    let finished: Vec<Value> =
        support::read_jsonl(&audit).into_iter().filter(|r| r["event"] == "call_finished").collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["admin"], true);
    assert_eq!(finished[0]["status"], "failed");
    let response = request.await.unwrap().expect("the admin got no answer");
    assert_eq!(response.status(), 504);
    // drain_timeout_ms, not the drain's whole wait (drain_timeout_ms + 5 s).
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
}

/// Returns once the drain has begun: the listener is closed then.
async fn drain_begun(addr: std::net::SocketAddr) {
    tokio::time::timeout(Duration::from_secs(10), async {
        while tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the listener never closed");
}

/// An admin call whose body is still arriving when the drain begins is refused with 503
/// `draining`, not dropped unanswered, and no call starts.
#[tokio::test]
async fn an_admin_call_whose_body_arrives_during_the_drain_is_refused_as_draining() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fake = FakeUpstream::start().await;
    let toml = format!("[server]\ndrain_timeout_ms = 200\nhandshake_timeout_ms = 5000\n[auth]\nadmin_token = \"{ADMIN}\"\n");
    let TestProxy { server, addr, dir } = TestProxy::with_upstream(&fake, &toml).await;
    let arguments: Value = serde_json::from_str(BMI).unwrap();
    let body = json!({"arguments": arguments, "sub": "ops"}).to_string();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST /admin/tools/calculate_medical_score/invoke HTTP/1.1\r\nhost: voxgate\r\nauthorization: Bearer {ADMIN}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    // The handler now waits for the body.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let shutdown = tokio::spawn(server.shutdown());
    drain_begun(addr).await;
    socket.write_all(body.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains(r#""code":"draining""#), "{answer:?}");
    shutdown.await.unwrap().unwrap();
    assert!(support::read_jsonl(&dir.path().join("audit.jsonl")).iter().all(|r| r["event"] == "checkpoint"));
}

/// A session request still being admitted (here: waiting on a Redis that does not answer) when the
/// drain begins is answered, not dropped with its session thread: 503 `draining`, before its
/// ticket (if any) would be spent, or, admitted before the drain was seen, a session that closes
/// with the drain (1012).
#[tokio::test]
async fn a_session_being_admitted_when_the_drain_begins_is_answered_not_dropped() {
    let redis = support::redis::RedisServer::start();
    let fake = FakeUpstream::start().await;
    let toml = format!(
        "[server]\ndrain_timeout_ms = 200\n[redis]\nurl = \"{}\"\nsession_ttl_ms = 60000\n",
        redis.url()
    );
    let TestProxy { server, addr, dir: _dir } = TestProxy::with_upstream(&fake, &toml).await;
    // Redis stops answering for a while: the admission waits for it (its bound, then local caps).
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT").arg("PAUSE").arg(2000).arg("ALL").query_async(&mut conn).await.unwrap();
    let url = format!("ws://{addr}/v1/realtime");
    let handshake = tokio::spawn(async move { Client::try_connect(&url, &["realtime"], &[]).await });
    // Within the admission's wait for Redis (500 ms).
    tokio::time::sleep(Duration::from_millis(250)).await;
    let shutdown = tokio::spawn(server.shutdown());
    match handshake.await.unwrap() {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 503),
        Ok(mut client) => assert_eq!(client.closed().await.0, 1012),
        Err(other) => panic!("the handshake was not answered: {other:?}"),
    }
    shutdown.await.unwrap().unwrap();
}

/// An admin call whose rate-limit check (on a Redis that does not answer) is under way when the
/// drain begins never starts its tool: it is declined, answered 503, and audited once.
#[tokio::test]
async fn an_admin_call_in_its_limit_check_when_the_drain_begins_never_runs_its_tool() {
    let requests = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let counter = requests.clone();
    let app = axum::Router::new().fallback(axum::routing::get(move || {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        async { ([("content-type", "application/json")], r#"{"web":{"results":[]}}"#) }
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let redis = support::redis::RedisServer::start();
    let fake = FakeUpstream::start().await;
    let toml = format!(
        "[server]\ndrain_timeout_ms = 200\n[auth]\nadmin_token = \"{ADMIN}\"\n[redis]\nurl = \"{}\"\n\
         [backends.web_search]\nprovider = \"brave\"\nbase_url = \"{backend}\"\napi_key = \"brave-key\"\n\
         [tools.web_search_medical]\nrate_limit_per_minute = 5\n",
        redis.url()
    );
    let TestProxy { server, addr, dir } = TestProxy::with_upstream(&fake, &toml).await;
    let audit = dir.path().join("audit.jsonl");
    // Redis stops answering: the limit check waits for it (its bound, 500 ms).
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT").arg("PAUSE").arg(2000).arg("ALL").query_async(&mut conn).await.unwrap();
    let request = admin_search_started(addr, &audit).await;
    server.shutdown().await.unwrap();
    let response = request.await.unwrap().expect("the admin got no answer");
    assert_eq!(response.status(), 503);
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 0, "the tool ran");
    let finished: Vec<Value> =
        support::read_jsonl(&audit).into_iter().filter(|r| r["event"] == "call_finished").collect();
    assert_eq!(finished.len(), 1, "{finished:?}");
    assert_eq!(finished[0]["status"], "declined");
    let report = voxgate::audit::verify(&audit, &voxgate::audit::Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}
