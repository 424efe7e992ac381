//! What ops and compliance rely on, end to end: the audit log survives `kill -9` (restart writes
//! `abandoned` finishes and `audit verify` passes), the Redis mirror loses and duplicates nothing
//! across a Redis restart, and `/metrics` moves as a scripted session says it should.

mod support;
// The mirror's epochs, driven through the audit writer alone (no proxy).
#[path = "audit_ops/epochs.rs"]
mod epochs;

use std::time::Duration;

use serde_json::{Value, json};
use support::redis::RedisServer;
use support::{Client, FakeUpstream, TestProxy, binary, model_calls, read_jsonl, spawn_voxgate};

const BMI: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;

fn event_args_for_tomorrow(title: &str) -> String {
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    json!({"title": title, "start_datetime": format!("{day}T14:00:00Z"), "end_datetime": format!("{day}T15:00:00Z")}).to_string()
}

fn finishes<'a>(records: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["event"] == "call_finished" && r["call_id"] == call_id).collect()
}

#[tokio::test]
async fn kill_9_mid_calls_then_restart_records_abandoned_calls_and_verifies() {
    let mut fake = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-test\"\n\
         [audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        fake.addr,
        audit.display(),
        dir.path().join("cal.ics").display()
    );
    let (mut child, addr) = spawn_voxgate(&config, dir.path()).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    // One call parked for confirmation, one inline call that completes.
    model_calls(&mut up, &[("call_parked", "create_calendar_event", &event_args_for_tomorrow("Ward round")), ("call_done", "calculate_medical_score", BMI)]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    up.until("conversation.item.create").await;

    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let before = read_jsonl(&audit);
    assert_eq!(finishes(&before, "call_parked").len(), 0, "the parked call was open at the crash");
    assert_eq!(finishes(&before, "call_done").len(), 1);

    // The restart closes what the crash left open, exactly once.
    let (mut child, _) = spawn_voxgate(&config, dir.path()).await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap().success());

    let after = read_jsonl(&audit);
    let parked = finishes(&after, "call_parked");
    assert_eq!(parked.len(), 1, "{after:?}");
    assert_eq!(parked[0]["status"], "abandoned");
    assert_eq!(finishes(&after, "call_done").len(), 1);
    let verify = std::process::Command::new(binary()).args(["audit", "verify"]).arg(&audit).output().unwrap();
    let report = String::from_utf8_lossy(&verify.stdout);
    assert!(verify.status.success(), "{report}");
    assert!(report.contains("1 abandoned"), "{report}");

    // A tampered line breaks the chain.
    let text = std::fs::read_to_string(&audit).unwrap();
    std::fs::write(&audit, text.replacen("\"completed\"", "\"failed\"", 1)).unwrap();
    let verify = std::process::Command::new(binary()).args(["audit", "verify"]).arg(&audit).output().unwrap();
    assert_eq!(verify.status.code(), Some(3), "{}", String::from_utf8_lossy(&verify.stdout));
}

/// The stream `audit.redis_stream` defaults to for `server.instance_id = "itest"`.
const STREAM: &str = "voxgate:audit:itest";

async fn stream_entries(url: &str) -> Vec<(String, String)> {
    entries_in(url, STREAM).await
}

async fn entries_in(url: &str, stream: &str) -> Vec<(String, String)> {
    let client = redis::Client::open(url).unwrap();
    let Ok(mut conn) = client.get_multiplexed_async_connection().await else { return Vec::new() };
    let entries: Vec<(String, Vec<(String, String)>)> =
        redis::cmd("XRANGE").arg(stream).arg("-").arg("+").query_async(&mut conn).await.unwrap_or_default();
    entries.into_iter().map(|(id, mut fields)| (id, fields.pop().map(|(_, v)| v).unwrap_or_default())).collect()
}

/// Wait until the stream holds exactly the file's lines, in order, each once.
async fn assert_mirrored(proxy: &TestProxy, url: &str) {
    assert_mirrored_in(proxy, url, STREAM).await;
}

async fn assert_mirrored_in(proxy: &TestProxy, url: &str, stream: &str) {
    let mut last = Vec::new();
    // Longer than the mirror's longest back-off (10 s), which it always waits out.
    for _ in 0..250 {
        let file: Vec<String> = std::fs::read_to_string(proxy.audit_path()).unwrap().lines().map(str::to_string).collect();
        last = entries_in(url, stream).await;
        let ids: Vec<String> = (1..=file.len()).map(|seq| format!("{seq}-1")).collect();
        if last.iter().map(|(id, _)| id.clone()).collect::<Vec<_>>() == ids && last.iter().map(|(_, l)| l.clone()).collect::<Vec<_>>() == file {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("stream does not match the file: {last:?}");
}

#[tokio::test]
async fn the_redis_mirror_survives_a_redis_restart_without_loss_or_duplicates() {
    let mut redis = RedisServer::start();
    let mut fake = FakeUpstream::start().await;
    let toml = format!("[server]\ninstance_id = \"itest\"\n[redis]\nurl = \"{}\"\n", redis.url());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (_client, mut up) = proxy.ready_session(&mut fake).await;

    for call in ["m1", "m2"] {
        model_calls(&mut up, &[(call, "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    assert_mirrored(&proxy, &redis.url()).await;

    // Redis goes away (and comes back empty: no persistence). Calls go on; nothing is lost.
    redis.stop();
    for call in ["m3", "m4"] {
        model_calls(&mut up, &[(call, "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    redis.restart();
    model_calls(&mut up, &[("m5", "calculate_medical_score", BMI)]).await;
    up.until("conversation.item.create").await;
    assert_mirrored(&proxy, &redis.url()).await;
    assert_eq!(proxy.audit_records().len(), 10, "five calls, a start and a finish each");
}

fn metric(body: &str, series: &str) -> f64 {
    body.lines()
        .find_map(|line| line.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
        .unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_move_as_a_scripted_session_says() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;

    model_calls(&mut up, &[("c1", "calculate_medical_score", BMI), ("c2", "create_calendar_event", &event_args_for_tomorrow("Ward round"))]).await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "c2", "approved": false})).await;
    client.until("voxgate.tool_call.declined").await;
    model_calls(&mut up, &[("c3", "no_such_tool", "{}")]).await;
    client.send_text("not json").await;
    client.until("error").await;
    let audio = json!({"type": "input_audio_buffer.append", "audio": "AAAA"}).to_string();
    for _ in 0..5 {
        client.send_text(&audio).await;
    }
    for _ in 0..5 {
        up.until("input_audio_buffer.append").await;
    }

    let (status, body) = proxy.http_get("/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(metric(&body, "voxgate_sessions_active"), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_calls_total{tool="calculate_medical_score",status="completed"}"#), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_calls_total{tool="create_calendar_event",status="declined"}"#), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_confirmations_total{tool="create_calendar_event",decision="declined"}"#), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_duration_seconds_count{tool="calculate_medical_score"}"#), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_duration_seconds_bucket{le="+Inf",tool="calculate_medical_score"}"#), 1.0, "{body}");
    assert_eq!(metric(&body, r#"voxgate_tool_duration_seconds_bucket{le="1.0",tool="calculate_medical_score"}"#), 1.0, "a local calculation is fast: {body}");
    assert!(metric(&body, r#"voxgate_tool_errors_total{tool="other",code="unknown_tool"}"#) >= 1.0, "{body}");
    assert_eq!(metric(&body, "voxgate_upstream_connect_seconds_count"), 1.0, "{body}");
    assert!(metric(&body, r#"voxgate_client_errors_total{code="voxgate_invalid_json"}"#) >= 1.0, "{body}");
    assert!(metric(&body, r#"voxgate_audit_records_total{event="call_finished"}"#) >= 3.0, "{body}");
    // Every record above reached the disk in some group commit, each one timed.
    let commits = metric(&body, "voxgate_audit_commit_seconds_count");
    let records = metric(&body, r#"voxgate_audit_records_total{event="call_started"}"#)
        + metric(&body, r#"voxgate_audit_records_total{event="call_finished"}"#);
    assert!(commits >= 1.0 && commits <= records, "{body}");
    assert_eq!(metric(&body, r#"voxgate_audit_commit_seconds_bucket{le="+Inf"}"#), commits, "{body}");

    drop(client);
    for _ in 0..50 {
        let (_, body) = proxy.http_get("/metrics").await;
        if metric(&body, "voxgate_sessions_active") == 0.0 {
            assert_eq!(metric(&body, r#"voxgate_sessions_total{outcome="client_closed"}"#), 1.0, "{body}");
            // A live session publishes its frame counts in batches; all of them by its end.
            assert!(metric(&body, r#"voxgate_frames_total{direction="client_to_upstream"}"#) >= 5.0, "{body}");
            assert!(metric(&body, r#"voxgate_frames_total{direction="upstream_to_client"}"#) >= 1.0, "{body}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the session did not end");
}

/// A proxy that mirrors to a Redis whose stream key holds a string, so that every `XADD` is
/// refused (WRONGTYPE) until the test deletes the key; a session on it, and a connection to Redis.
struct Refusing {
    redis: RedisServer,
    conn: redis::aio::MultiplexedConnection,
    proxy: TestProxy,
    up: support::FakeConn,
    _client: Client,
    _fake: FakeUpstream,
}

impl Refusing {
    async fn start() -> Self {
        let redis = RedisServer::start();
        let client = redis::Client::open(redis.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SET").arg(STREAM).arg("not a stream").query_async(&mut conn).await.unwrap();
        let mut fake = FakeUpstream::start().await;
        let toml = format!("[server]\ninstance_id = \"itest\"\n[redis]\nurl = \"{}\"\n", redis.url());
        let proxy = TestProxy::with_upstream(&fake, &toml).await;
        let (client, up) = proxy.ready_session(&mut fake).await;
        Refusing { redis, conn, proxy, up, _client: client, _fake: fake }
    }
}

/// Only Redis's exact "ID equal or smaller" answer means a line is already in the stream: any
/// other refusal (here WRONGTYPE, the key holding a string) is a failure the mirror retries, so
/// once the key is fixed every line arrives — none is skipped as "already mirrored".
#[tokio::test]
async fn only_the_exact_already_added_error_counts_as_mirrored() {
    let Refusing { redis, mut conn, proxy, mut up, _client: _session, _fake: _upstream } = Refusing::start().await;
    model_calls(&mut up, &[("w1", "calculate_medical_score", BMI)]).await;
    up.until("conversation.item.create").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await.unwrap();
    model_calls(&mut up, &[("w2", "calculate_medical_score", BMI)]).await;
    up.until("conversation.item.create").await;
    assert_mirrored(&proxy, &redis.url()).await;
}

/// The count of `cmd` Redis has served since its statistics were reset.
async fn command_calls(conn: &mut redis::aio::MultiplexedConnection, cmd: &str) -> u64 {
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    let prefix = format!("cmdstat_{cmd}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// While Redis refuses the mirror's writes, new audit lines do not cut its back-off short: a
/// busy instance retries on the back-off's schedule (200 ms, doubling), not once per flush, each
/// time re-reading its log from the start.
#[tokio::test]
async fn a_refusing_redis_is_retried_on_the_back_off_not_on_every_flush() {
    let Refusing { redis, mut conn, proxy, mut up, _client: _session, _fake: _upstream } = Refusing::start().await;
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
    let started = std::time::Instant::now();
    // 20 calls, one after another: 20 or more flushes in about a second.
    for i in 0..20 {
        model_calls(&mut up, &[(&format!("b{i}"), "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed();
    let attempts = command_calls(&mut conn, "xrevrange").await;
    // 200 + 400 + 800 + 1,600 ms: at most five attempts in the first 3 s.
    let bound = if elapsed < Duration::from_secs(3) { 5 } else { 5 + elapsed.as_secs() };
    assert!(attempts <= bound, "{attempts} catch-up attempts in {elapsed:?}");
    let _: () = redis::cmd("DEL").arg(STREAM).query_async(&mut conn).await.unwrap();
    assert_mirrored(&proxy, &redis.url()).await;
}

/// `audit.redis_stream_maxlen` keeps the stream from growing without bound in a Redis that also
/// holds tickets and rate limits: older entries are trimmed (the file keeps every line).
#[tokio::test]
async fn the_stream_is_trimmed_to_its_configured_length() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    // Trimming with `~` removes whole nodes: small nodes make it visible with few lines.
    let _: () = redis::cmd("CONFIG").arg("SET").arg("stream-node-max-entries").arg(4).query_async(&mut conn).await.unwrap();
    let mut fake = FakeUpstream::start().await;
    let toml = format!(
        "[server]\ninstance_id = \"itest\"\n[audit]\nredis_stream_maxlen = 8\n[redis]\nurl = \"{}\"\n",
        redis.url()
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (_client, mut up) = proxy.ready_session(&mut fake).await;
    for i in 0..15 {
        model_calls(&mut up, &[(&format!("t{i}"), "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    let file = read_jsonl(&proxy.audit_path());
    assert!(file.len() >= 30, "the file keeps every line: {}", file.len());
    let last_seq = file.last().and_then(|line| line["seq"].as_u64()).unwrap();
    for _ in 0..100 {
        let entries = stream_entries(&redis.url()).await;
        let top = entries.last().and_then(|(id, _)| id.split('-').next()?.parse::<u64>().ok()).unwrap_or(0);
        if top >= last_seq {
            assert!(entries.len() <= 8 + 4, "trimmed to about 8 entries: {}", entries.len());
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the stream did not catch up");
}

/// A stream whose top is above the log's sequence holds another epoch of the log (a new file after
/// enabling `audit.chain_key`, a restore from backup, a recreated volume): its lines are never
/// taken for this log's. They are left as they are, and this log's lines go to a stream of their
/// own (`<stream>:epoch2`) instead of being skipped as "already mirrored" until the sequence
/// passes the old top.
#[tokio::test]
async fn a_stream_ahead_of_the_log_is_left_alone_and_the_log_mirrors_to_a_new_epoch() {
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("XADD").arg(STREAM).arg("1000-1").arg("record").arg("an older log's line").query_async(&mut conn).await.unwrap();
    let mut fake = FakeUpstream::start().await;
    let toml = format!("[server]\ninstance_id = \"itest\"\n[redis]\nurl = \"{}\"\n", redis.url());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (_client, mut up) = proxy.ready_session(&mut fake).await;
    for call in ["e1", "e2", "e3"] {
        model_calls(&mut up, &[(call, "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    assert_mirrored_in(&proxy, &redis.url(), &format!("{STREAM}:epoch2")).await;
    assert_eq!(stream_entries(&redis.url()).await, [("1000-1".to_string(), "an older log's line".to_string())]);
    let (_, metrics) = proxy.http_get("/metrics").await;
    assert!(metrics.contains("voxgate_audit_stream_epochs_total 1"), "{metrics}");
}
