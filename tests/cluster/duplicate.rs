//! Two running instances under one `server.instance_id` (a shared config file that sets it): the
//! one that claims the id second reports the conflict (`/readyz`, `voxgate_instance_id_conflict`)
//! and keeps serving; once the other stops, it gave its claim up and the report clears.

use super::*;
use support::TestProxy;

const TWIN: &str = "[server]\ninstance_id = \"vg-twin\"\n[redis]\nurl = \"{url}\"\nsession_ttl_ms = 1500\n";

/// Whether `proxy` reports a conflict, in `/readyz` and in the gauge alike; `None` while the two
/// reads disagree (the state changed between them).
async fn conflict(proxy: &TestProxy) -> Option<bool> {
    let (status, body) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200, "a conflict degrades, it does not take the instance out: {body}");
    let reported = body.contains("instance_id: also claimed by another running instance");
    let gauge = proxy.http_get("/metrics").await.1.lines().any(|l| l == "voxgate_instance_id_conflict 1");
    (reported == gauge).then_some(reported)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_instance_under_one_id_says_so_until_the_first_is_gone() {
    let redis = RedisServer::start();
    let toml = TWIN.replace("{url}", &redis.url());
    let first = TestProxy::start(&toml).await;
    let second = TestProxy::start(&toml).await;
    // Whichever claimed the id second (each claims at its start) reports it; the other does not.
    let both = [first, second];
    eventually("one of the two reports the conflict", || async {
        matches!((conflict(&both[0]).await, conflict(&both[1]).await), (Some(true), Some(false)) | (Some(false), Some(true)))
    })
    .await;
    let holder = if conflict(&both[0]).await == Some(true) { 1 } else { 0 };
    assert_eq!(conflict(&both[holder]).await, Some(false), "the holder of the id reports nothing");
    let [a, b] = both;
    let (holder, twin) = if holder == 0 { (a, b) } else { (b, a) };
    // A client is still served by the twin.
    let _session = Client::try_connect(&twin.url(""), &["realtime"], &[]).await.expect("the twin still serves");
    // The holder gives its claim up as it stops: the twin takes the id at its next renewal.
    let mut redis_conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut claim = redis::cmd("GET");
    claim.arg("voxgate:instance:vg-twin");
    let held: Option<String> = claim.query_async(&mut redis_conn).await.unwrap();
    assert!(held.is_some(), "the holder's claim is in Redis");
    holder.stop().await;
    let after: Option<String> = claim.query_async(&mut redis_conn).await.unwrap();
    assert_ne!(after, held, "the holder gave its claim up as it stopped (it would expire only later)");
    eventually("the report clears once the holder has stopped", || async { conflict(&twin).await == Some(false) }).await;
    twin.stop().await;
}
