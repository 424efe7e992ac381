//! Redis away degrades, never refuses (docs/operations.md, "When Redis is down"), from the very
//! start: an instance whose Redis cannot be reached starts, serves and reports it, and connects
//! once Redis answers; only a `redis.url` that cannot be used, or whose credentials Redis refuses,
//! fails the start. And a single-use ticket is spent only by a session that is admitted: a refusal
//! for the per-user cap across instances, or a Redis that cannot answer, leaves it usable; a ticket
//! already spent, on any instance, is refused as used (401) even while its user is at the cap.

use super::*;
use support::TestProxy;

fn toml(redis_url: &str, extra: &str) -> String {
    format!(
        "[auth]\nmode = \"ticket\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\n\
         [redis]\nurl = \"{redis_url}\"\nsession_ttl_ms = 1500\n{extra}"
    )
}

/// Open a session with `token` (a JWT or a ticket); the status, and the client when it opened.
pub(super) async fn open(url: &str, token: &str) -> (u16, Option<Client>) {
    let protocol = format!("voxgate-token.{token}");
    match Client::try_connect(url, &["realtime", &protocol], &[]).await {
        Ok(client) => (101, Some(client)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => (response.status().as_u16(), None),
        Err(other) => panic!("unexpected: {other}"),
    }
}

async fn mint_ticket(addr: std::net::SocketAddr, sub: &str) -> String {
    support::mint_ticket(addr, ADMIN, json!({"sub": sub, "roles": ["clinician"], "ttl_s": 120})).await
}

/// Present `ticket` until it opens a session (bounded by [`WAIT`]); every refusal on the way must
/// have a status in `expected`.
async fn open_eventually(url: &str, ticket: &str, expected: &[u16]) -> Client {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match open(url, ticket).await {
            (101, Some(client)) => return client,
            (status, _) => {
                assert!(expected.contains(&status), "refused with {status}");
                assert!(tokio::time::Instant::now() < deadline, "still refused: {status}");
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_unreachable_redis_at_start_degrades_instead_of_refusing() {
    // Nothing listens on port 1: every connection attempt is refused.
    let proxy = TestProxy::start(&toml("redis://127.0.0.1:1", "")).await;
    assert_eq!(proxy.http_get("/healthz").await.0, 200);
    eventually("/readyz reports the outage", || async { proxy.http_get("/readyz").await.1.contains("redis: down") }).await;
    let (status, body) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200, "an outage degrades, it does not take the instance out: {body}");
    assert!(proxy.http_get("/metrics").await.1.lines().any(|l| l == "voxgate_redis_up 0"));
    // JWT sessions open on the local caps.
    let (status, session) = open(&proxy.url(""), &jwt("dr.start")).await;
    assert_eq!(status, 101);
    drop(session);
    // A ticket cannot be proven unused without Redis: refused (401), as documented.
    let ticket = mint_ticket(proxy.addr, "dr.start").await;
    assert_eq!(open(&proxy.url(""), &ticket).await.0, 401);
    proxy.stop().await;
}

/// Start a server whose `redis.url` is `url`, built without `validate` (which already refuses some
/// such URLs): the server's own checks are what is tested.
async fn start_with_redis_url(url: &str) -> Result<voxgate::server::RunningServer, voxgate::server::StartError> {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[redis]\nurl = \"{url}\"\n[audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        dir.path().join("audit.jsonl").display(),
        dir.path().join("calendar.ics").display()
    );
    let config = voxgate::config::Config::from_table(toml::from_str(&text).unwrap()).unwrap();
    voxgate::server::start(config).await
}

#[tokio::test]
async fn an_unusable_redis_url_still_fails_the_start() {
    match start_with_redis_url("http://not-redis").await {
        Err(voxgate::server::StartError::Redis(_)) => {}
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("started with an unusable redis.url"),
    }
}

/// Credentials Redis refuses are a configuration error, not an outage: the start fails, saying so
/// by kind and never repeating the URL. Checked for a wrong password, a password Redis does not
/// ask for, and none where Redis asks for one; the right password starts.
#[tokio::test]
async fn redis_credentials_that_redis_refuses_fail_the_start() {
    let locked = RedisServer::start_with_password("the-right-password");
    let open_redis = RedisServer::start();
    // What redis-rs makes of each: a refused AUTH at connection set-up, or NOAUTH for the PING.
    let wrong = |port: u16| format!("redis://:a-wrong-password@127.0.0.1:{port}");
    let cases = [
        ("a wrong password", wrong(locked.port), "AuthenticationFailed"),
        ("no password", locked.url(), "NOAUTH"),
        ("a password Redis does not ask for", wrong(open_redis.port), "AuthenticationFailed"),
    ];
    for (what, url, kind) in cases {
        match start_with_redis_url(&url).await {
            Err(err @ voxgate::server::StartError::Redis(_)) => {
                let message = err.to_string();
                assert!(message.contains("refused the credentials") && message.contains(kind), "{what}: {message}");
                assert!(!message.contains("wrong-password") && !message.contains("127.0.0.1"), "{what}: {message}");
            }
            Err(other) => panic!("{what}: wrong error: {other}"),
            Ok(_) => panic!("{what}: started with credentials Redis refuses"),
        }
    }
    let right = format!("redis://:the-right-password@127.0.0.1:{}", locked.port);
    let server = start_with_redis_url(&right).await.expect("the right password starts");
    server.shutdown().await.unwrap();
}

/// Redis down when the instance starts and when the ticket is presented: refused, not spent; Redis
/// back: the same ticket opens one session, and only one.
#[tokio::test]
async fn a_ticket_refused_while_redis_is_away_opens_a_session_once_it_is_back() {
    let mut redis = RedisServer::start();
    redis.stop();
    let proxy = TestProxy::start(&toml(&redis.url(), "")).await;
    let ticket = mint_ticket(proxy.addr, "dr.back").await;
    assert_eq!(open(&proxy.url(""), &ticket).await.0, 401, "Redis is away");
    assert_eq!(open(&proxy.url(""), &ticket).await.0, 401, "still away");

    redis.restart();
    eventually("Redis is noticed", || async { proxy.http_get("/readyz").await.1.contains("redis: up") }).await;
    let session = open_eventually(&proxy.url(""), &ticket, &[401]).await;
    assert_eq!(open(&proxy.url(""), &ticket).await.0, 401, "single use still holds");
    drop(session);
    proxy.stop().await;
}

/// The per-user cap is reached on another instance: the ticket is refused with 429 and stays
/// usable; once the other session ends, it opens a session, and only one.
#[tokio::test]
async fn a_ticket_refused_for_the_cross_instance_cap_can_be_used_again() {
    let redis = RedisServer::start();
    let config = toml(&redis.url(), "[server]\nmax_sessions_per_user = 1\n");
    let a = TestProxy::start(&config).await;
    let b = TestProxy::start(&config).await;
    let (status, on_a) = open(&a.url(""), &jwt("dr.cap")).await;
    assert_eq!(status, 101);

    let ticket = mint_ticket(a.addr, "dr.cap").await;
    assert_eq!(open(&b.url(""), &ticket).await.0, 429, "the cap is shared across instances");
    assert_eq!(open(&b.url(""), &ticket).await.0, 429, "refused for the cap again, not as used");

    drop(on_a);
    let session = open_eventually(&b.url(""), &ticket, &[429]).await;
    drop(session);
    // Spent: a reuse on any instance is a 401, whether or not the user is at the cap.
    assert_eq!(open(&a.url(""), &ticket).await.0, 401, "single use must hold on any instance");
    a.stop().await;
    b.stop().await;
}

/// A ticket spent on one instance and replayed on another while its user is at the cap: a used
/// ticket is a 401 (CONTRACT §2), not the cap's 429 or 503. The other instance has never seen the
/// ticket, so only Redis knows it is spent. Both refusals are covered: the cross-instance per-user
/// cap, and this instance's own process cap.
#[tokio::test]
async fn a_ticket_spent_on_another_instance_is_refused_as_used_while_its_user_is_at_the_cap() {
    let redis = RedisServer::start();
    let a = TestProxy::start(&toml(&redis.url(), "[server]\nmax_sessions_per_user = 1\n")).await;
    let b = TestProxy::start(&toml(&redis.url(), "[server]\nmax_sessions_per_user = 1\nmax_sessions = 1\n")).await;
    let ticket = mint_ticket(a.addr, "dr.replay").await;
    let (status, on_a) = open(&a.url(""), &ticket).await;
    assert_eq!(status, 101, "the ticket is spent on A, whose session holds the user's only seat");
    assert_eq!(open(&b.url(""), &jwt("dr.replay")).await.0, 429, "the user is at the cap");

    assert_eq!(open(&b.url(""), &ticket).await.0, 401, "replayed on B, refused by the per-user cap");
    let (status, other) = open(&b.url(""), &jwt("dr.other")).await;
    assert_eq!(status, 101, "another user takes B's only place");
    assert_eq!(open(&b.url(""), &ticket).await.0, 401, "replayed on B, refused by B's process cap");
    assert_eq!(open(&a.url(""), &ticket).await.0, 401, "replayed on A");
    drop((on_a, other));
    a.stop().await;
    b.stop().await;
}

/// A managed Redis speaks TLS (`rediss://`), checked against the system's trust store (here a test
/// CA given to the real binary by `SSL_CERT_FILE`, which the TLS stack reads like the system's):
/// tickets and the session registry work over it as over plain Redis.
#[tokio::test]
async fn redis_over_tls_is_used_like_plain_redis() {
    let redis = RedisServer::start_with_tls();
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{}\n[audit]\npath = {:?}\n",
        toml(&redis.tls_url(), ""),
        dir.path().join("audit.jsonl").display().to_string()
    );
    let (_child, addr) = support::spawn_voxgate_with_env(&config, dir.path(), &[("SSL_CERT_FILE", &redis.ca_file())]).await;
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let ticket = mint_ticket(addr, "dr.tls").await;
    // Spending a ticket needs Redis to answer (without it the ticket is refused as unavailable).
    let (status, client) = open(&format!("ws://{addr}/v1/realtime"), &ticket).await;
    assert_eq!(status, 101, "the ticket was claimed in Redis over TLS");
    let listing = support::admin_sessions(addr, ADMIN).await;
    assert_eq!(listing["scope"], "cluster", "listed from Redis: {listing}");
    assert_eq!(listing["sessions"].as_array().map(Vec::len), Some(1), "{listing}");
    drop(client);
}
