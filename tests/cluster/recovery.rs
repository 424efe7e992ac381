//! After Redis restarts: the first Redis call of each kind succeeds (the connection that died with
//! Redis is replaced and the call tried again), and an admin kill reaches a session whose registry
//! entry is missing (Redis came back empty) through the broadcast kill channel. And an admin kill
//! waiting for its answer when the drain begins is answered, not cut.

use super::*;
use futures::StreamExt;
use redis::AsyncCommands;
use support::TestProxy;

/// A long TTL: no refresh tick runs during the test, so each request below is the first Redis
/// call after a restart.
fn toml(id: &str, redis_url: &str) -> String {
    format!(
        "[server]\ninstance_id = \"{id}\"\n[auth]\nmode = \"ticket\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\n\
         user_hash_key = \"shared-user-hash-key\"\n[redis]\nurl = \"{redis_url}\"\nsession_ttl_ms = 60000\n"
    )
}

/// Wait until `n` clients listen on `channel`.
async fn listeners(conn: &redis::aio::MultiplexedConnection, channel: &str, n: u64) {
    eventually("the kill listeners have subscribed", || {
        let mut conn = conn.clone();
        async move {
            let counts: Vec<(String, u64)> =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query_async(&mut conn).await.unwrap();
            counts.first().is_some_and(|(_, count)| *count >= n)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_redis_calls_after_a_redis_restart_succeed() {
    tokio::time::timeout(Duration::from_secs(60), first_calls()).await.expect("the restart scenario took too long");
}

async fn first_calls() {
    let mut redis = RedisServer::start();
    let proxy = TestProxy::start(&toml("vg-r", &redis.url())).await;
    assert_eq!(support::admin_sessions(proxy.addr, ADMIN).await["scope"], "cluster");

    redis.stop();
    redis.restart();
    let listed = support::admin_sessions(proxy.addr, ADMIN).await;
    assert_eq!(listed["scope"], "cluster", "the first listing after a restart: {listed}");
    assert!(proxy.http_get("/metrics").await.1.lines().any(|l| l == "voxgate_redis_up 1"));

    let ticket = support::mint_ticket(proxy.addr, ADMIN, json!({"sub": "dr.restart", "ttl_s": 120})).await;
    redis.stop();
    redis.restart();
    let (status, session) = degrades::open(&proxy.url(""), &ticket).await;
    assert_eq!(status, 101, "a valid ticket, the first Redis call after a restart");
    drop(session);

    redis.stop();
    redis.restart();
    // The kill listener's own connection subscribes again (what answers); the instance's calls
    // have not touched Redis since the restart.
    let conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    listeners(&conn, "voxgate:kill-all", 1).await;
    let status = instance::delete_session(proxy.addr, "vgs_0123456789abcdef0123456789abcdef").await;
    assert_eq!(status, 404, "a kill, the first Redis call after a restart, learns that no instance has it");
    proxy.stop().await;
}

/// Redis came back empty: the session's entry is gone until its instance's next refresh, but a
/// kill on another instance still ends it (204). An id no instance holds is a 404; a listener on
/// the broadcast channel that never answers makes it a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_reaches_a_session_missing_from_the_registry() {
    tokio::time::timeout(Duration::from_secs(60), unregistered()).await.expect("the kill scenario took too long");
}

async fn unregistered() {
    let redis = RedisServer::start();
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut fake = FakeUpstream::start().await;
    let jwt_toml = |id: &str| toml(id, &redis.url()).replace("mode = \"ticket\"", "mode = \"jwt\"");
    let a = TestProxy::with_upstream(&fake, &jwt_toml("vg-a")).await;
    let b = TestProxy::with_upstream(&fake, &jwt_toml("vg-b")).await;
    listeners(&conn, "voxgate:kill:vg-a", 1).await;
    listeners(&conn, "voxgate:kill:vg-b", 1).await;
    let (mut victim, _victim_up, id) = open(&a.url(""), &jwt("dr.gone"), &mut fake).await;

    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    let entry: Option<String> = conn.get(format!("voxgate:session:{id}")).await.unwrap();
    assert_eq!(entry, None, "Redis is empty");
    assert_eq!(instance::delete_session(b.addr, &id).await, 204, "ended by the instance holding it");
    let closing = victim.until("voxgate.session.closing").await;
    assert_eq!(closing["reconnect"], false, "{closing}");

    assert_eq!(instance::delete_session(b.addr, "vgs_nobody").await, 404, "no instance has it");

    // An operator's monitor on a pattern hears every broadcast and never answers: it is not an
    // instance, and the kill is still a 404 (it was a 503 once PUBLISH's count was waited for).
    let monitor = redis::Client::open(redis.url()).unwrap();
    let mut monitor = monitor.get_async_pubsub().await.unwrap();
    monitor.psubscribe("voxgate:*").await.unwrap();
    assert_eq!(instance::delete_session(b.addr, "vgs_nobody").await, 404, "a pattern monitor is not an instance");
    drop(monitor);

    // A listener that hears the broadcast and never answers: not every instance answered, 503.
    let silent = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = silent.get_async_pubsub().await.unwrap();
    pubsub.subscribe("voxgate:kill-all").await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(instance::delete_session(b.addr, "vgs_nobody").await, 503, "one listener did not answer");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded: {:?}", started.elapsed());
    drop(pubsub);
    a.stop().await;
    b.stop().await;
}

/// A kill waiting for its owner's answer when the drain begins is answered within the drain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_kill_in_flight_is_answered_during_the_drain() {
    tokio::time::timeout(Duration::from_secs(60), drained_kill()).await.expect("the drain scenario took too long");
}

async fn drained_kill() {
    let redis = RedisServer::start();
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let a = TestProxy::start(&toml("vg-a", &redis.url())).await;
    // An owner that hears the kill and never answers: the deleter waits for it.
    let silent = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = silent.get_async_pubsub().await.unwrap();
    pubsub.subscribe("voxgate:kill:vg-silent").await.unwrap();
    let entry = json!({"id": "vgs_waiting", "instance": "vg-silent", "user": "u", "model": "m", "started_at": 1});
    let _: () = conn.set_ex("voxgate:session:vgs_waiting", entry.to_string(), 60).await.unwrap();
    let addr = a.addr;
    let deletion = tokio::spawn(async move {
        reqwest::Client::new()
            .delete(format!("http://{addr}/admin/sessions/vgs_waiting"))
            .bearer_auth(ADMIN)
            .send()
            .await
            .map(|response| response.status().as_u16())
    });
    let heard = tokio::time::timeout(WAIT, pubsub.on_message().next()).await.expect("the kill was published");
    assert!(heard.is_some());
    a.stop().await;
    let status = deletion.await.unwrap().expect("an answer, not a cut connection");
    assert_eq!(status, 503, "not confirmed by its owner");
}
