//! A Redis outage and its recovery, against live instances.

use super::*;

/// Redis down: sessions are still admitted on this instance's own caps, the listing says it covers
/// this instance only, `/readyz` and `voxgate_redis_up` say so; Redis back (empty, as after a
/// restart): every live session is registered again and the listing covers every instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_degrades_to_local_caps_and_recovers() {
    tokio::time::timeout(Duration::from_secs(60), outage())
        .await
        .expect("the outage scenario took too long");
}

async fn outage() {
    let mut redis = RedisServer::start();
    let mut fake = FakeUpstream::start().await;
    let toml = |id: &str| {
        format!(
            "[server]\ninstance_id = \"{id}\"\nmax_sessions_per_user = 1\n[auth]\nmode = \"jwt\"\njwt_secret = \"{SECRET}\"\nadmin_token = \"{ADMIN}\"\nuser_hash_key = \"shared-user-hash-key\"\n[redis]\nurl = \"{}\"\nsession_ttl_ms = 1500\n",
            redis.url()
        )
    };
    let a = support::TestProxy::with_upstream(&fake, &toml("vg-a")).await;
    let b = support::TestProxy::with_upstream(&fake, &toml("vg-b")).await;
    let (_on_a, _up_a, id_a) = open(&a.url(""), &jwt("dr.out"), &mut fake).await;
    assert_eq!(
        upgrade_status(&b.url(""), &jwt("dr.out")).await.0,
        429,
        "the cap is shared while Redis is up"
    );

    redis.stop();
    eventually("the outage is noticed", || async {
        a.http_get("/readyz").await.1.contains("redis: down")
    })
    .await;
    let (status, body) = a.http_get("/readyz").await;
    assert_eq!(
        status, 200,
        "an outage degrades, it does not take the instance out: {body}"
    );
    assert!(
        a.http_get("/metrics")
            .await
            .1
            .lines()
            .any(|l| l == "voxgate_redis_up 0")
    );
    let (_on_b, _up_b, id_b) = open(&b.url(""), &jwt("dr.out"), &mut fake).await;
    let (status, _) = upgrade_status(&b.url(""), &jwt("dr.out")).await;
    assert_eq!(status, 429, "the local cap still holds");
    let listed = support::admin_sessions(a.addr, ADMIN).await;
    assert_eq!(listed["scope"], "instance", "{listed}");
    assert_eq!(
        owners(&listed),
        HashMap::from([(id_a.clone(), "vg-a".to_string())])
    );

    redis.restart();
    eventually("both sessions are registered again", || async {
        let listed = support::admin_sessions(a.addr, ADMIN).await;
        listed["scope"] == "cluster" && owners(&listed).len() == 2
    })
    .await;
    assert_eq!(
        owners(&support::admin_sessions(a.addr, ADMIN).await),
        HashMap::from([
            (id_a.clone(), "vg-a".to_string()),
            (id_b.clone(), "vg-b".to_string())
        ])
    );
    assert!(a.http_get("/readyz").await.1.contains("redis: up"));
    assert!(
        a.http_get("/metrics")
            .await
            .1
            .lines()
            .any(|l| l == "voxgate_redis_up 1")
    );
}
