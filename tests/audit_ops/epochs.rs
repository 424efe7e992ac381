//! The audit mirror's epochs, driven through the writer alone: a stream that holds another log's
//! lines is never taken for this log's, a restart finds the stream the log went to, an empty
//! Redis is caught up with only what the stream keeps, and `audit verify` passes a log whose
//! oldest rotations were archived.

use std::time::Duration;

use serde_json::Value;

use super::support::redis::RedisServer;
use super::support::{binary, read_jsonl};
use super::{command_calls, entries_in};

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
