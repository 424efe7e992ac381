//! What ops and compliance rely on, end to end: the audit log survives `kill -9` (restart writes
//! `abandoned` finishes and `audit verify` passes), the Redis mirror loses and duplicates nothing
//! across a Redis restart, and `/metrics` moves as a scripted session says it should.

mod support;

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

fn record(event: voxgate::audit::AuditEvent, call: &str) -> voxgate::audit::AuditRecord {
    let finished = event == voxgate::audit::AuditEvent::CallFinished;
    voxgate::audit::AuditRecord {
        event,
        session_id: "vgs_1".into(),
        call_id: call.into(),
        tool: "calculate_medical_score".into(),
        user: "u_1".into(),
        roles: vec!["clinician".into()],
        status: finished.then_some(voxgate::audit::AuditStatus::Completed),
        error_code: None,
        confirmation: finished.then_some(voxgate::audit::Confirmation::NotRequired),
        duration_ms: finished.then_some(3),
        phi: false,
        args_sha256: "ab".repeat(32),
        arguments: None,
        origin: Default::default(),
        resource: None,
    }
}

/// After Redis comes back empty, the mirror catches up with what the stream keeps
/// (`audit.redis_stream_maxlen` lines), not the whole history: it starts `maxlen` lines below the
/// last durable one, so a log of any size costs the same few `XADD`s (and reads).
#[tokio::test]
async fn catching_up_an_empty_stream_sends_only_the_lines_it_keeps() {
    let dir = tempfile::tempdir().unwrap();
    let config = voxgate::config::AuditConfig {
        path: dir.path().join("audit.jsonl"),
        rotate_bytes: 8 * 1024,
        checkpoint_records: 0,
        redis_stream: Some("voxgate:audit:catchup".into()),
        redis_stream_maxlen: 20,
        ..Default::default()
    };
    // 300 lines over several rotated files, written while there was no Redis.
    let (handle, writer) = voxgate::audit::open(&config, Default::default()).await.unwrap();
    // One at a time: the writer rotates between commits.
    for i in 0..150 {
        for event in [voxgate::audit::AuditEvent::CallStarted, voxgate::audit::AuditEvent::CallFinished] {
            handle.record(record(event, &format!("c{i}"))).await.unwrap();
        }
    }
    drop(handle);
    writer.join().await.unwrap();
    assert!(voxgate::audit::verify::rotated_files(&config.path).unwrap().len() >= 3);

    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query_async(&mut conn).await.unwrap();
    let url = voxgate::config::Secret::new(redis.url());
    let metrics = voxgate::telemetry::metrics::Metrics::new();
    let options = voxgate::audit::OpenOptions { redis_url: Some(&url), instance: "itest".into(), metrics: Some(metrics.clone()), ..Default::default() };
    let (handle, writer) = voxgate::audit::open(&config, options).await.unwrap();
    let mut entries = Vec::new();
    for _ in 0..100 {
        entries = entries_in(&redis.url(), "voxgate:audit:catchup").await;
        if entries.last().is_some_and(|(id, _)| id == "300-1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(entries.last().map(|(id, _)| id.as_str()), Some("300-1"), "caught up");
    assert_eq!(entries.first().map(|(id, _)| id.as_str()), Some("281-1"), "from maxlen lines below the top");
    let added = command_calls(&mut conn, "xadd").await;
    assert_eq!(added, 20, "one XADD per line the stream keeps");
    // The stream starts here: no reader saw the earlier lines go missing, so no gap is counted
    // (a gap after lines were sent is, src/audit/mirror_tests.rs).
    assert!(metrics.render().contains("voxgate_audit_stream_skipped_lines_total 0"), "{}", metrics.render());
    drop(handle);
    writer.join().await.unwrap();
}

/// Records a start and a finish for each call, one at a time.
async fn write_calls(handle: &voxgate::audit::AuditHandle, calls: std::ops::Range<u32>) {
    for i in calls {
        for event in [voxgate::audit::AuditEvent::CallStarted, voxgate::audit::AuditEvent::CallFinished] {
            handle.record(record(event, &format!("c{i}"))).await.unwrap();
        }
    }
}

/// Wait until `stream` holds exactly the lines of the file at `path`, with their ids.
async fn wait_for_file_in(url: &str, stream: &str, path: &std::path::Path) {
    let mut last = Vec::new();
    for _ in 0..100 {
        let file: Vec<String> = std::fs::read_to_string(path).unwrap().lines().map(str::to_string).collect();
        let expected: Vec<(String, String)> = file.into_iter().enumerate().map(|(i, line)| (format!("{}-1", i + 1), line)).collect();
        last = entries_in(url, stream).await;
        if last == expected {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{stream} does not hold the file's lines: {last:?}");
}

/// A log of five calls in a temporary directory (`rotate_bytes`; 0: never rotated), and a Redis
/// whose `stream` already holds another log's line `seq`.
struct Forked {
    _dir: tempfile::TempDir,
    config: voxgate::config::AuditConfig,
    redis: RedisServer,
    conn: redis::aio::MultiplexedConnection,
    other: [(String, String); 1],
}

async fn forked(stream: &str, rotate_bytes: u64, seq: u64) -> Forked {
    let dir = tempfile::tempdir().unwrap();
    let config = voxgate::config::AuditConfig {
        path: dir.path().join("audit.jsonl"),
        rotate_bytes,
        checkpoint_records: 0,
        redis_stream: Some(stream.into()),
        ..Default::default()
    };
    let (handle, writer) = voxgate::audit::open(&config, Default::default()).await.unwrap();
    write_calls(&handle, 0..5).await;
    drop(handle);
    writer.join().await.unwrap();
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let other = [(format!("{seq}-1"), format!("another log's line {seq}"))];
    let _: String = redis::cmd("XADD").arg(stream).arg(&other[0].0).arg("record").arg(&other[0].1).query_async(&mut conn).await.unwrap();
    Forked { _dir: dir, config, redis, conn, other }
}

/// A stream whose top line is not this log's line of that number holds another epoch too (a log
/// restored from a backup and grown past the old top, a new file after enabling `chain_key`): no
/// line of this log is added to it. A restart finds the stream this log went to again.
#[tokio::test]
async fn a_stream_whose_top_line_differs_is_another_epoch_and_a_restart_finds_the_new_one() {
    let Forked { _dir, config, redis, mut conn, other } = forked("voxgate:audit:fork", 0, 3).await;
    let url = voxgate::config::Secret::new(redis.url());
    // The first start takes up a new key (counted); the restart finds it again (not counted: the
    // alert must not fire on every rollout while the old stream is kept).
    for (calls, moves) in [(5..6, 1), (6..8, 0)] {
        let metrics = voxgate::telemetry::metrics::Metrics::new();
        let options = voxgate::audit::OpenOptions { redis_url: Some(&url), instance: "itest".into(), metrics: Some(metrics.clone()), ..Default::default() };
        let (handle, writer) = voxgate::audit::open(&config, options).await.unwrap();
        write_calls(&handle, calls).await;
        wait_for_file_in(&redis.url(), "voxgate:audit:fork:epoch2", &config.path).await;
        assert_eq!(entries_in(&redis.url(), "voxgate:audit:fork").await, other, "the other epoch's stream is left as it is");
        assert!(metrics.render().contains(&format!("voxgate_audit_stream_epochs_total {moves}\n")), "{}", metrics.render());
        drop(handle);
        writer.join().await.unwrap();
    }
    let exists: u32 = redis::cmd("EXISTS").arg("voxgate:audit:fork:epoch3").query_async(&mut conn).await.unwrap();
    assert_eq!(exists, 0, "the restart went on with the same stream");
}

/// An older epoch's stream whose top line this log no longer has on the host (the rotated file
/// holding it was archived away) is not taken back: the log goes on to the newest stream holding
/// its lines, and the old one is left as it is.
#[tokio::test]
async fn an_older_epoch_whose_top_line_is_gone_from_the_host_is_not_taken_back() {
    // Rotates after every commit: each line in a file of its own.
    let Forked { _dir, config, redis, conn: _, other } = forked("voxgate:audit:back", 1, 5).await;
    let url = voxgate::config::Secret::new(redis.url());
    // The last sequence number in the log, rotated files included.
    let last_seq = |path: &std::path::Path| -> u64 {
        let mut files = voxgate::audit::verify::rotated_files(path).unwrap();
        files.push(path.to_path_buf());
        files.iter().flat_map(|file| read_jsonl(file)).filter_map(|line| line["seq"].as_u64()).max().unwrap()
    };
    for (calls, archive) in [(5..6, false), (6..8, true)] {
        if archive {
            // The rotated file holding line 5 is moved off the host.
            let name = format!("{:012}-{:012}", 5, 5);
            let files = voxgate::audit::verify::rotated_files(&config.path).unwrap();
            let file = files.iter().find(|file| file.to_str().unwrap().ends_with(&name)).unwrap();
            std::fs::remove_file(file).unwrap();
        }
        let options = voxgate::audit::OpenOptions { redis_url: Some(&url), instance: "itest".into(), ..Default::default() };
        let (handle, writer) = voxgate::audit::open(&config, options).await.unwrap();
        write_calls(&handle, calls).await;
        let top = format!("{}-1", last_seq(&config.path));
        let mut last = Vec::new();
        for _ in 0..100 {
            last = entries_in(&redis.url(), "voxgate:audit:back:epoch2").await;
            if last.last().is_some_and(|(id, _)| *id == top) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(last.last().map(|(id, _)| id.clone()), Some(top), "the log goes on in :epoch2");
        drop(handle);
        writer.join().await.unwrap();
        assert_eq!(entries_in(&redis.url(), "voxgate:audit:back").await, other, "the other epoch's stream is left as it is");
    }
}

/// A fresh log (an emptyDir pod's, after each reschedule) takes up a new key, and counts a move,
/// only once it has a line to send: a start that writes nothing moves nowhere.
#[tokio::test]
async fn a_fresh_log_takes_up_a_new_key_only_once_it_has_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = voxgate::config::AuditConfig {
        path: dir.path().join("audit.jsonl"),
        checkpoint_records: 0,
        redis_stream: Some("voxgate:audit:fresh".into()),
        ..Default::default()
    };
    let redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("XADD").arg("voxgate:audit:fresh").arg("1000-1").arg("record").arg("the last pod's line").query_async(&mut conn).await.unwrap();
    let url = voxgate::config::Secret::new(redis.url());
    let metrics = voxgate::telemetry::metrics::Metrics::new();
    let options = voxgate::audit::OpenOptions { redis_url: Some(&url), instance: "itest".into(), metrics: Some(metrics.clone()), ..Default::default() };
    let (handle, writer) = voxgate::audit::open(&config, options).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(metrics.render().contains("voxgate_audit_stream_epochs_total 0\n"), "{}", metrics.render());
    write_calls(&handle, 0..1).await;
    wait_for_file_in(&redis.url(), "voxgate:audit:fresh:epoch2", &config.path).await;
    assert!(metrics.render().contains("voxgate_audit_stream_epochs_total 1\n"), "{}", metrics.render());
    drop(handle);
    writer.join().await.unwrap();
}

/// Redis coming back empty while the log goes to `:epoch2` does not send the mirror back to the
/// plain key: the stream a reader follows stays the same.
#[tokio::test]
async fn redis_coming_back_empty_keeps_the_mirror_on_its_epochs_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = voxgate::config::AuditConfig {
        path: dir.path().join("audit.jsonl"),
        checkpoint_records: 0,
        redis_stream: Some("voxgate:audit:lost".into()),
        ..Default::default()
    };
    let mut redis = RedisServer::start();
    let client = redis::Client::open(redis.url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("XADD").arg("voxgate:audit:lost").arg("1000-1").arg("record").arg("an older log's line").query_async(&mut conn).await.unwrap();
    let url = voxgate::config::Secret::new(redis.url());
    let options = voxgate::audit::OpenOptions { redis_url: Some(&url), instance: "itest".into(), ..Default::default() };
    let (handle, writer) = voxgate::audit::open(&config, options).await.unwrap();
    write_calls(&handle, 0..2).await;
    wait_for_file_in(&redis.url(), "voxgate:audit:lost:epoch2", &config.path).await;
    redis.stop();
    redis.restart();
    write_calls(&handle, 2..4).await;
    wait_for_file_in(&redis.url(), "voxgate:audit:lost:epoch2", &config.path).await;
    assert_eq!(entries_in(&redis.url(), "voxgate:audit:lost").await, []);
    drop(handle);
    writer.join().await.unwrap();
}

/// `voxgate audit verify` on a log whose oldest rotations were archived away, and then with the
/// current file missing (a crash between a rotation's rename and the new file's open): both are
/// sound (exit 0, the chain's start reported as information); a tampered line still exits 3.
#[tokio::test]
async fn verify_passes_a_log_whose_oldest_rotations_were_archived() {
    let dir = tempfile::tempdir().unwrap();
    let config = voxgate::config::AuditConfig {
        path: dir.path().join("audit.jsonl"),
        rotate_bytes: 2 * 1024,
        checkpoint_records: 0,
        ..Default::default()
    };
    let (handle, writer) = voxgate::audit::open(&config, Default::default()).await.unwrap();
    for i in 0..20 {
        for event in [voxgate::audit::AuditEvent::CallStarted, voxgate::audit::AuditEvent::CallFinished] {
            handle.record(record(event, &format!("c{i}"))).await.unwrap();
        }
    }
    drop(handle);
    writer.join().await.unwrap();
    let rotated = voxgate::audit::verify::rotated_files(&config.path).unwrap();
    assert!(rotated.len() >= 3, "{rotated:?}");
    let archive = tempfile::tempdir().unwrap();
    for old in &rotated[..2] {
        std::fs::rename(old, archive.path().join(old.file_name().unwrap())).unwrap();
    }
    let run = || std::process::Command::new(binary()).args(["audit", "verify"]).arg(&config.path).output().unwrap();
    let verify = run();
    let report = String::from_utf8_lossy(&verify.stdout).to_string();
    assert!(verify.status.success(), "{report}");
    assert!(report.starts_with("OK") && report.contains("earlier files not present"), "{report}");

    // The current file renamed as a rotation names it; the new one never opened.
    let current = read_jsonl(&config.path);
    if current.is_empty() {
        std::fs::remove_file(&config.path).unwrap();
    } else {
        let seq = |line: &Value| line["seq"].as_u64().unwrap();
        let name = format!("audit.jsonl.{:012}-{:012}", seq(&current[0]), seq(&current[current.len() - 1]));
        std::fs::rename(&config.path, dir.path().join(name)).unwrap();
    }
    let verify = run();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));

    // A line edited in what is left still breaks the chain.
    let newest = voxgate::audit::verify::rotated_files(&config.path).unwrap().pop().unwrap();
    let text = std::fs::read_to_string(&newest).unwrap();
    std::fs::write(&newest, text.replacen("\"completed\"", "\"failed\"", 1)).unwrap();
    assert_eq!(run().status.code(), Some(3));
}
