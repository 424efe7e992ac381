//! Two running instances under one `server.instance_id` (a shared config file that sets it): the
//! one that claims the id second reports the conflict (`/readyz`, `voxgate_instance_id_conflict`)
//! and keeps serving; once the other stops, it gave its claim up and the report clears.

use super::*;
use support::TestProxy;

const TWIN: &str = "[server]\ninstance_id = \"vg-twin\"\n[redis]\nurl = \"{url}\"\nsession_ttl_ms = 1500\n";

async fn reports_conflict(proxy: &TestProxy) -> bool {
    let (status, body) = proxy.http_get("/readyz").await;
    assert_eq!(status, 200, "a conflict degrades, it does not take the instance out: {body}");
    let reported = body.contains("instance_id: also claimed by another running instance");
    let gauge = proxy.http_get("/metrics").await.1.lines().any(|l| l == "voxgate_instance_id_conflict 1");
    assert_eq!(reported, gauge, "/readyz and the gauge agree");
    reported
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
        reports_conflict(&both[0]).await || reports_conflict(&both[1]).await
    })
    .await;
    let holder = if reports_conflict(&both[0]).await { 1 } else { 0 };
    assert!(!reports_conflict(&both[holder]).await, "the holder of the id reports nothing");
    let [a, b] = both;
    let (holder, twin) = if holder == 0 { (a, b) } else { (b, a) };
    // A client is still served by the twin.
    let _session = Client::try_connect(&twin.url(""), &["realtime"], &[]).await.expect("the twin still serves");
    holder.stop().await;
    eventually("the report clears once the holder has stopped", || async { !reports_conflict(&twin).await }).await;
    // A different id on the same Redis never conflicts.
    let other = TestProxy::start(&toml.replace("vg-twin", "vg-other")).await;
    assert!(!reports_conflict(&other).await);
    other.stop().await;
    twin.stop().await;
}
