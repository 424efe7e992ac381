//! Many instances as one service (CONTRACT §11), end to end: a real nginx load-balancing WebSockets
//! over three real voxgate processes that share one real Redis and one fake upstream. Sessions
//! spread; tickets, session caps and rate limits hold across instances; the admin API lists and
//! ends sessions wherever they run; a drained instance's clients are told to reconnect and carry on
//! through nginx; a killed instance's registry entries expire; every audit file verifies.
//!
//! This file holds the shared helpers and the main scenario; the processes are in [`instance`]
//! (one voxgate) and [`nginx`] (the load balancer), the Redis outage in [`outage`], Redis away
//! from the start with in-process instances in [`degrades`], and a Redis restart's first calls and
//! kills of unregistered sessions in [`recovery`].

#[path = "../support/mod.rs"]
mod support;

mod degrades;
mod duplicate;
mod instance;
mod kills;
mod nginx;
mod outage;
mod recovery;
mod slow;
mod stalled;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::redis::RedisServer;
use support::{Client, FakeConn, FakeUpstream, spawn_voxgate};

const SECRET: &str = "an-hs256-secret-of-at-least-32-bytes!!";
const ADMIN: &str = "admin-token-0123456789abcdef";
/// Short, so a killed instance's entries vanish within the test's time.
const SESSION_TTL_MS: u64 = 1500;
const INSTANCES: usize = 3;
/// Every wait in this file is bounded by this.
const WAIT: Duration = Duration::from_secs(15);

fn jwt(sub: &str) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let claims = json!({"sub": sub, "roles": ["clinician"], "exp": exp});
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap()
}

use instance::Instance;
use nginx::Nginx;

/// A session opened through `url` with `token`, its upstream connection, and its id.
async fn open(url: &str, token: &str, fake: &mut FakeUpstream) -> (Client, FakeConn, String) {
    let protocol = format!("voxgate-token.{token}");
    let mut client = Client::connect(url, &["realtime", "voxgate.v1", &protocol]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    let ready = client.until("voxgate.session.ready").await;
    (
        client,
        up,
        ready["session_id"].as_str().unwrap().to_string(),
    )
}

/// The HTTP status of an upgrade attempt (101 when a session opened).
async fn upgrade_status(url: &str, token: &str) -> (u16, Option<Client>) {
    let protocol = format!("voxgate-token.{token}");
    match Client::try_connect(url, &["realtime", "voxgate.v1", &protocol], &[]).await {
        Ok(client) => (101, Some(client)),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            (response.status().as_u16(), None)
        }
        Err(other) => panic!("unexpected: {other}"),
    }
}

/// The model calls the BMI calculator; returns the output voxgate sends back.
async fn call_calculator(up: &mut FakeConn, call_id: &str) -> Value {
    let args = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r",
        "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id, "name": "calculate_medical_score", "arguments": args}))
        .await;
    let output = up.until("conversation.item.create").await;
    serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap()
}

/// Which instance holds each listed session.
fn owners(list: &Value) -> HashMap<String, String> {
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["id"].as_str().unwrap().to_string(),
                s["instance"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Poll `check` (bounded by [`WAIT`]) until it holds.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_behind_nginx_behave_as_one_service() {
    tokio::time::timeout(Duration::from_secs(110), scenario())
        .await
        .expect("the cluster scenario took too long");
}

async fn scenario() {
    let redis = RedisServer::start();
    let mut fake = FakeUpstream::start().await;
    let (a, b, c) = tokio::join!(
        Instance::start(0, &fake, &redis),
        Instance::start(1, &fake, &redis),
        Instance::start(2, &fake, &redis)
    );
    let mut instances = vec![a, b, c];
    let addrs: Vec<&str> = instances.iter().map(|i| i.addr.as_str()).collect();
    let nginx = Nginx::start(&addrs);
    let lb = nginx.url();

    // Sessions spread over the instances (round robin), and any instance lists them all.
    let mut sessions = Vec::new();
    for user in ["dr.a", "dr.b", "dr.c"] {
        sessions.push(open(&lb, &jwt(user), &mut fake).await);
    }
    let list = instances[0].sessions().await;
    assert_eq!(list["scope"], "cluster");
    let placed = owners(&list);
    let spread: HashSet<&String> = sessions.iter().map(|(_, _, id)| &placed[id]).collect();
    assert_eq!(spread.len(), INSTANCES, "one session per instance: {list}");
    for instance in &instances[1..] {
        assert_eq!(
            owners(&instance.sessions().await),
            placed,
            "every instance lists the same sessions"
        );
    }
    assert!(
        !list.to_string().contains("dr.a"),
        "users are keyed hashes, never the sub"
    );

    // A ticket minted by one instance is redeemed once, on any instance, and never again.
    let ticket = instances[0].mint_ticket("dr.ticket").await;
    let on_b = format!("ws://{}/v1/realtime", instances[1].addr);
    let on_c = format!("ws://{}/v1/realtime", instances[2].addr);
    let (status, ticket_client) = upgrade_status(&on_b, &ticket).await;
    assert_eq!(status, 101, "redeemed on another instance");
    let mut ticket_up = fake.accept().await;
    ticket_up.open_session().await;
    assert_eq!(
        upgrade_status(&on_c, &ticket).await.0,
        401,
        "refused on a third instance"
    );
    assert_eq!(
        upgrade_status(&lb, &ticket).await.0,
        401,
        "refused through the load balancer"
    );
    drop(ticket_client);
    let _ = ticket_up.closed().await;

    // A user's session cap (2) holds across instances, and a closed session frees its place.
    let on_a = format!("ws://{}/v1/realtime", instances[0].addr);
    let cap_token = jwt("dr.cap");
    let (cap_1, _cap_up_1, _) = open(&on_a, &cap_token, &mut fake).await;
    let (_cap_2, _cap_up_2, _) = open(&on_b, &cap_token, &mut fake).await;
    assert_eq!(
        upgrade_status(&on_c, &cap_token).await.0,
        429,
        "a third session on a third instance"
    );
    drop(cap_1);
    let deadline = tokio::time::Instant::now() + WAIT;
    let cap_3 = loop {
        match upgrade_status(&on_c, &cap_token).await {
            (101, client) => break client,
            (status, _) => assert!(
                status == 429 && tokio::time::Instant::now() < deadline,
                "the closed session's place is freed ({status})"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut cap_up_3 = fake.accept().await;
    cap_up_3.open_session().await;

    // A user's rate limit (3 a minute) holds across instances.
    let rate_token = jwt("dr.rate");
    let (_rate_a, mut rate_up_a, _) = open(&on_a, &rate_token, &mut fake).await;
    let (_rate_b, mut rate_up_b, _) = open(&on_b, &rate_token, &mut fake).await;
    for (on_a, call_id) in [(true, "call_rate_1"), (false, "call_rate_2"), (true, "call_rate_3")] {
        let up = if on_a { &mut rate_up_a } else { &mut rate_up_b };
        assert!(call_calculator(up, call_id).await.get("error").is_none(), "{call_id}");
    }
    assert_eq!(
        call_calculator(&mut rate_up_b, "call_rate_4").await["error"]["code"],
        "rate_limited"
    );

    // DELETE on one instance ends a session held by another; it is told not to reconnect.
    let placed = owners(&instances[0].sessions().await);
    let (victim_index, victim_owner) = sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (i, placed[&s.2].clone()))
        .find(|(_, o)| o == "vg-1")
        .unwrap();
    let (mut victim, mut victim_up, victim_id) = sessions.remove(victim_index);
    assert_eq!(victim_owner, "vg-1");
    assert_eq!(instances[2].delete_session(&victim_id).await, 204);
    let closing = victim.until("voxgate.session.closing").await;
    assert_eq!(closing["reconnect"], false, "{closing}");
    assert_eq!(victim.closed().await.0, 1000);
    let _ = victim_up.closed().await;
    let (first, gone) = (&instances[0], &victim_id);
    eventually("the ended session leaves the registry", || async move {
        !owners(&first.sessions().await).contains_key(gone)
    })
    .await;
    assert_eq!(
        instances[0].delete_session(&victim_id).await,
        404,
        "no instance holds it any more"
    );
    assert_eq!(
        instances[0]
            .delete_session("vgs_0123456789abcdef0123456789abcdef")
            .await,
        404
    );

    // SIGTERM to vg-0: its clients are told to reconnect, do so through nginx and carry on, while
    // the other instances keep serving.
    let placed = owners(&instances[0].sessions().await);
    let (drained_index, _) = sessions
        .iter()
        .enumerate()
        .find(|(_, s)| placed[&s.2] == "vg-0")
        .unwrap();
    let (mut drained, mut drained_up, drained_id) = sessions.remove(drained_index);
    instances[0].signal("-TERM").await;
    let closing = drained.until("voxgate.session.closing").await;
    assert_eq!(closing["reconnect"], true, "{closing}");
    assert_eq!(drained.closed().await.0, 1012);
    let _ = drained_up.closed().await;
    let other_up = &mut sessions.last_mut().unwrap().1;
    assert!(
        call_calculator(other_up, "call_while_draining")
            .await
            .get("error")
            .is_none(),
        "others keep serving"
    );
    let status = tokio::time::timeout(WAIT, instances[0].child.wait())
        .await
        .expect("drained instance exits")
        .unwrap();
    assert!(status.success(), "drain exits 0: {status}");
    let (_again, mut again_up, again_id) = open(&lb, &jwt("dr.a"), &mut fake).await;
    assert_ne!(again_id, drained_id);
    let survivor_id = owners(&instances[1].sessions().await)[&again_id].clone();
    assert_ne!(survivor_id, "vg-0", "the new session is on a live instance");
    assert!(
        call_calculator(&mut again_up, "call_after_reconnect")
            .await
            .get("error")
            .is_none(),
        "the client carries on"
    );

    // kill -9 of the other live instance: its registry entries expire; the survivor is unaffected.
    let (survivor, doomed) = if survivor_id == "vg-1" {
        (1, 2)
    } else {
        (2, 1)
    };
    let doomed_id = instances[doomed].id.clone();
    assert!(
        owners(&instances[survivor].sessions().await)
            .values()
            .any(|o| *o == doomed_id),
        "{doomed_id} holds sessions before it dies"
    );
    instances[doomed].signal("-KILL").await;
    let _ = tokio::time::timeout(WAIT, instances[doomed].child.wait())
        .await
        .expect("killed");
    let (live, dead) = (&instances[survivor], doomed_id.as_str());
    eventually("the killed instance's entries expire", || async move {
        owners(&live.sessions().await).values().all(|o| o != dead)
    })
    .await;
    assert!(
        call_calculator(&mut again_up, "call_after_kill")
            .await
            .get("error")
            .is_none(),
        "the survivor is unaffected"
    );
    let base = format!("http://{}", instances[survivor].addr);
    let metrics = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l == "voxgate_redis_up 1"),
        "{metrics}"
    );
    let info = format!("voxgate_instance_info{{instance_id=\"{survivor_id}\"}} 1");
    assert!(metrics.contains(&info), "{metrics}");
    let ready = reqwest::get(format!("{base}/readyz"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(ready.contains("redis: up"), "{ready}");

    // Every instance's audit log verifies, and every call is finished exactly once across them.
    drop((sessions, cap_3, cap_up_3, again_up));
    instances[survivor].signal("-TERM").await;
    let _ = tokio::time::timeout(WAIT, instances[survivor].child.wait())
        .await
        .expect("the survivor exits");
    let mut finished: HashMap<String, usize> = HashMap::new();
    let mut started: HashSet<String> = HashSet::new();
    for instance in &instances {
        let verify = tokio::process::Command::new(support::binary())
            .arg("audit")
            .arg("verify")
            .arg(instance.audit_path())
            .output()
            .await
            .unwrap();
        assert!(
            verify.status.success(),
            "{}: {}",
            instance.id,
            String::from_utf8_lossy(&verify.stdout)
        );
        for record in support::read_jsonl(&instance.audit_path()) {
            let call = record["call_id"].as_str().unwrap_or_default().to_string();
            match record["event"].as_str() {
                Some("call_started") => {
                    started.insert(call);
                }
                Some("call_finished") => *finished.entry(call).or_default() += 1,
                _ => {}
            }
        }
    }
    for call in [
        "call_rate_1",
        "call_rate_2",
        "call_rate_3",
        "call_rate_4",
        "call_while_draining",
        "call_after_reconnect",
        "call_after_kill",
    ] {
        assert_eq!(
            finished.get(call),
            Some(&1),
            "{call} finished exactly once: {finished:?}"
        );
        assert!(started.contains(call), "{call} started");
    }
    assert!(finished.values().all(|n| *n == 1), "{finished:?}");
    assert!(
        !nginx.error_log().contains("[emerg]"),
        "{}",
        nginx.error_log()
    );
}
