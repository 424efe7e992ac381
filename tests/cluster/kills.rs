//! `DELETE /admin/sessions/{id}` answers 204 only for a session that ended (CONTRACT §11): a
//! registry entry no instance answers for (its instance restarted within the TTL, under the same
//! `instance_id`) is released and answered 404, whether it names this instance or another, and an
//! owner that does not confirm the kill in time (a subscription gone half-open) is answered 503.

use super::*;
use redis::AsyncCommands;
use support::TestProxy;

fn toml(id: &str, redis_url: &str) -> String {
    // A long TTL: the stale entries written below must not expire during the test by themselves.
    format!(
        "[server]\ninstance_id = \"{id}\"\n[auth]\nmode = \"jwt\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\n\
         user_hash_key = \"shared-user-hash-key\"\n[redis]\nurl = \"{redis_url}\"\nsession_ttl_ms = 60000\n"
    )
}

/// A registry entry for `id` naming `instance`, as that instance would have written it.
async fn stale_entry(conn: &mut redis::aio::MultiplexedConnection, id: &str, instance: &str) {
    let entry = json!({"id": id, "instance": instance, "user": "u", "model": "m", "started_at": 1});
    let _: () = conn.set_ex(format!("voxgate:session:{id}"), entry.to_string(), 60).await.unwrap();
    let _: () = conn.zadd("voxgate:sessions", id, u64::MAX / 2).await.unwrap();
}

/// Wait until `instance`'s kill listener has subscribed.
async fn subscribed(conn: &redis::aio::MultiplexedConnection, instance: &str) {
    let channel = format!("voxgate:kill:{instance}");
    eventually("the kill listener has subscribed", || {
        let (mut conn, channel) = (conn.clone(), channel.clone());
        async move {
            let counts: Vec<(String, u64)> =
                redis::cmd("PUBSUB").arg("NUMSUB").arg(&channel).query_async(&mut conn).await.unwrap();
            counts.first().is_some_and(|(_, n)| *n > 0)
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_kill_answers_204_only_for_a_session_that_ended() {
    tokio::time::timeout(Duration::from_secs(60), kills()).await.expect("the kill scenario took too long");
}

async fn kills() {
    let redis = RedisServer::start();
    let mut conn = redis::Client::open(redis.url()).unwrap().get_multiplexed_async_connection().await.unwrap();
    let mut fake = FakeUpstream::start().await;
    let a = TestProxy::with_upstream(&fake, &toml("vg-a", &redis.url())).await;
    let b = TestProxy::with_upstream(&fake, &toml("vg-b", &redis.url())).await;
    subscribed(&conn, "vg-a").await;
    subscribed(&conn, "vg-b").await;

    // A stale entry naming this very instance: nothing to end; released, 404.
    stale_entry(&mut conn, "vgs_ghost_own", "vg-a").await;
    assert_eq!(instance::delete_session(a.addr, "vgs_ghost_own").await, 404, "an entry of a session vg-a does not have");
    let left: Option<String> = conn.get("voxgate:session:vgs_ghost_own").await.unwrap();
    assert_eq!(left, None, "the stale entry is released");
    assert!(!support::admin_sessions(a.addr, ADMIN).await.to_string().contains("vgs_ghost_own"));

    // A stale entry naming another live instance: it answers that it has no such session; 404.
    stale_entry(&mut conn, "vgs_ghost_peer", "vg-b").await;
    assert_eq!(instance::delete_session(a.addr, "vgs_ghost_peer").await, 404, "an entry of a session vg-b does not have");
    let left: Option<String> = conn.get("voxgate:session:vgs_ghost_peer").await.unwrap();
    assert_eq!(left, None, "the stale entry is released");

    // An owner that hears the kill but never confirms it (a half-open subscription looks so to
    // Redis): not confirmed, so 503, and within the bounded wait.
    let silent = redis::Client::open(redis.url()).unwrap();
    let mut pubsub = silent.get_async_pubsub().await.unwrap();
    pubsub.subscribe("voxgate:kill:vg-silent").await.unwrap();
    stale_entry(&mut conn, "vgs_unconfirmed", "vg-silent").await;
    let started = std::time::Instant::now();
    assert_eq!(instance::delete_session(a.addr, "vgs_unconfirmed").await, 503, "the owner never confirmed");
    assert!(started.elapsed() < Duration::from_secs(5), "bounded: {:?}", started.elapsed());
    let left: Option<String> = conn.get("voxgate:session:vgs_unconfirmed").await.unwrap();
    assert!(left.is_some(), "an unconfirmed kill leaves the entry to its owner");

    // A live session on the other instance: ended, confirmed, 204; told not to reconnect.
    let (mut victim, _victim_up, id) = open(&b.url(""), &jwt("dr.kill"), &mut fake).await;
    assert_eq!(instance::delete_session(a.addr, &id).await, 204);
    let closing = victim.until("voxgate.session.closing").await;
    assert_eq!(closing["reconnect"], false, "{closing}");
    // And a live session on this instance.
    let (mut local, _local_up, id) = open(&a.url(""), &jwt("dr.local"), &mut fake).await;
    assert_eq!(instance::delete_session(a.addr, &id).await, 204);
    assert_eq!(local.until("voxgate.session.closing").await["reconnect"], false);
    drop(pubsub);
    a.stop().await;
    b.stop().await;
}
