//! A Redis that is slow for a moment (`CLIENT PAUSE`), not down: one admission that runs out its
//! time falls back to the local caps, but the next ones share the caps again within a second; and
//! an admission whose client goes away while Redis holds it leaves no registration behind.

use super::*;
use support::TestProxy;

fn toml(redis_url: &str, id: &str) -> String {
    format!(
        "[server]\ninstance_id = \"{id}\"\nmax_sessions_per_user = 2\n[auth]\nmode = \"jwt\"\njwt_secret = \"{SECRET}\"\n\
         admin_token = \"{ADMIN}\"\nuser_hash_key = \"shared-user-hash-key\"\n[redis]\nurl = \"{redis_url}\"\n"
    )
}

/// Redis holds every command for `ms` (its own clock); returns once the pause is in force.
async fn pause_redis(url: &str, ms: u64) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let () = redis::cmd("CLIENT").arg("PAUSE").arg(ms).arg("ALL").query_async(&mut conn).await.unwrap();
}

/// Until Redis answers again: a PING waits out the pause.
async fn until_redis_answers(url: &str) {
    let client = redis::Client::open(url).unwrap();
    // No response timeout of redis-rs's own: the wait is bounded here.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let answered = async {
        let mut conn = client.get_multiplexed_async_connection_with_config(&config).await.unwrap();
        let _: String = redis::cmd("PING").query_async(&mut conn).await.unwrap();
    };
    tokio::time::timeout(WAIT, answered).await.expect("Redis did not answer again");
}

/// The cluster-wide cap holds (the user's two sessions on `a`, refused on `b`); one admission on
/// `b` while Redis is paused is admitted on the local caps (`b` holds none of the user's); a
/// second after the pause, `b` asks Redis again and refuses. The refresh that would otherwise
/// notice Redis is back is 10 s away, and nothing else on `b` asks Redis meanwhile: the session
/// admitted on the local caps stays open (its end would be a release, a Redis call).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slow_redis_call_leaves_the_caps_unshared_for_a_moment_only() {
    let redis = RedisServer::start();
    let a = TestProxy::start(&toml(&redis.url(), "vg-slow-a")).await;
    let b = TestProxy::start(&toml(&redis.url(), "vg-slow-b")).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let (status, session) = degrades::open(&a.url(""), &jwt("dr.slow")).await;
        assert_eq!(status, 101);
        held.push(session);
    }
    assert_eq!(degrades::open(&b.url(""), &jwt("dr.slow")).await.0, 429, "the cap is shared");

    pause_redis(&redis.url(), 1000).await;
    let (status, fallback) = degrades::open(&b.url(""), &jwt("dr.slow")).await;
    assert_eq!(status, 101, "a Redis that does not answer in time degrades to the local caps");
    until_redis_answers(&redis.url()).await;
    // A probe is due a second after the failure.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(degrades::open(&b.url(""), &jwt("dr.slow")).await.0, 429, "the cap is shared again");
    assert!(b.http_get("/metrics").await.1.lines().any(|l| l == "voxgate_redis_up 1"));
    drop((held, fallback));
    a.stop().await;
    b.stop().await;
}

/// An admission dropped while Redis holds it (its client went away): whatever it registered once
/// Redis answers is released, so the user's place under the cap is free at once, not after the
/// entry's TTL (30 s). Driven through the library: hyper lets an upgrade request's handler run
/// to its end after its client has gone, so a server process does not show this.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admission_dropped_while_redis_holds_it_leaves_nothing_registered() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let conn = redis::aio::ConnectionManager::new(client.clone()).await.unwrap();
    let link = voxgate::cluster::RedisLink { client, conn, ttl: Duration::from_secs(30) };
    let live = voxgate::session::live::LiveSessions::new(10, 1);
    let cluster = voxgate::cluster::Cluster::start("vg-drop".into(), Some(link), live, voxgate::telemetry::metrics::Metrics::new());
    let entry = |id: &str| voxgate::cluster::SessionEntry {
        id: id.into(),
        instance: "vg-drop".into(),
        user: "user-hash".into(),
        model: "m".into(),
        started_at: 0,
    };
    // Redis learns the admission script on its first use (`EVALSHA`, then `SCRIPT LOAD` on
    // NOSCRIPT): only once it knows it does a dropped admission still register.
    // So does its release script, once the first session's release is through.
    drop(cluster.admit(entry("s-warm"), Some(("another-user-hash".into(), 1))).await.unwrap());
    eventually("the first session is released", || async { cluster.list().await.0.is_empty() }).await;
    pause_redis(&redis.url(), 1000).await;
    let dropped = tokio::time::timeout(Duration::from_millis(200), cluster.admit(entry("s-dropped"), Some(("user-hash".into(), 1)))).await;
    assert!(dropped.is_err(), "the admission was still waiting on Redis");
    until_redis_answers(&redis.url()).await;
    // Listed over the cluster's own connection: after the dropped admission's script.
    eventually("the dropped admission's entry is released", || async {
        let (listed, scope) = cluster.list().await;
        assert_eq!(scope, voxgate::cluster::ListingScope::Cluster);
        listed.is_empty()
    })
    .await;
    let seat = cluster.admit(entry("s-next"), Some(("user-hash".into(), 1))).await;
    assert!(seat.is_ok(), "the user's place under the cap is free");
}
