//! The writer on a disk that fails, hangs or fills, through the test-only fault hooks
//! (`files::Faults`): health, refusal at accept, the backlog's limit, a rotation that cannot open
//! its new file or sync its directory, and the time a held record keeps.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::tests::{config, lines, record};
use super::*;

/// Faults that fail every commit while `failing` is set (a full or read-only disk).
fn failing_writes(failing: &Arc<AtomicBool>) -> files::Faults {
    let failing = failing.clone();
    Arc::new(move |op| {
        if op == files::FileOp::Write && failing.load(Ordering::SeqCst) {
            Err(std::io::Error::other("injected write failure"))
        } else {
            Ok(())
        }
    })
}

async fn until(what: &str, within: std::time::Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn commit_running_seconds(metrics: &crate::telemetry::metrics::Metrics) -> Option<f64> {
    metrics.render().lines().find_map(|l| l.strip_prefix("voxgate_audit_commit_running_seconds ")?.parse().ok())
}

/// A commit that never returns (a hung volume: `fdatasync` blocks) makes the writer unhealthy once
/// it has run [`writer::STALLED_AFTER`], and a gauge says how long it has been running; both clear
/// when the commit returns.
#[tokio::test]
async fn a_commit_that_hangs_makes_the_writer_unhealthy_and_is_gauged() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (release, hung) = std::sync::mpsc::channel::<()>();
    let hung = std::sync::Mutex::new(hung);
    let hang = AtomicBool::new(true);
    let faults: files::Faults = Arc::new(move |op| {
        if op == files::FileOp::Write && hang.swap(false, Ordering::SeqCst) {
            let _ = hung.lock().unwrap().recv();
        }
        Ok(())
    });
    let metrics = crate::telemetry::metrics::Metrics::new();
    let options = OpenOptions { metrics: Some(metrics.clone()), ..Default::default() };
    let (handle, writer) = writer::open_with(&cfg, options, Some(faults)).await.unwrap();
    let started = std::time::Instant::now();
    let ack = tokio::spawn(handle.record(record(AuditEvent::CallStarted, "c1")));
    let stall = writer::STALLED_AFTER + std::time::Duration::from_secs(3);
    until("unhealthy while the commit hangs", stall, || !handle.is_healthy()).await;
    assert!(started.elapsed() >= writer::STALLED_AFTER - std::time::Duration::from_millis(100));
    assert!(handle.is_stalled());
    until("the gauge shows the running commit", std::time::Duration::from_secs(3), || {
        commit_running_seconds(&metrics).is_some_and(|s| s >= writer::STALLED_AFTER.as_secs_f64() - 1.0)
    })
    .await;
    release.send(()).unwrap();
    ack.await.unwrap().unwrap();
    until("healthy again", std::time::Duration::from_secs(3), || handle.is_healthy()).await;
    until("the gauge back at 0", std::time::Duration::from_secs(3), || commit_running_seconds(&metrics) == Some(0.0)).await;
    drop(handle);
    writer.join().await.unwrap();
}

/// A call table with two quiet tools: `search_pubmed` runs at once, `create_calendar_event` asks
/// the user first.
fn quiet_table(audit: &AuditHandle) -> crate::session::calls::CallTable {
    let spec = |name, requires_confirmation| crate::tools::ToolSpec {
        name,
        description: "quiet".into(),
        parameters: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
        category: crate::tools::Category::Search,
        phi: false,
        risk: crate::tools::Risk::Low,
        requires_confirmation,
        third_party: true,
        rate_limit_per_minute: 10,
        timeout: std::time::Duration::from_secs(1),
    };
    let tools: Vec<Arc<dyn crate::tools::Tool>> = vec![
        Arc::new(crate::tools::test_support::Quiet(spec("search_pubmed", false))),
        Arc::new(crate::tools::test_support::Quiet(spec("create_calendar_event", true))),
    ];
    let registry = Arc::new(crate::tools::registry::ToolRegistry::from_tools(tools, &Default::default()).unwrap());
    let principal = crate::policy::Principal::new("dr.test", vec!["clinician".into()]);
    let timeout = std::time::Duration::from_secs(60);
    crate::session::calls::CallTable::new("vgs_1".into(), principal, "u_1".into(), true, timeout, registry).with_audit(audit.clone())
}

/// With `fail_closed` and the log not writable, a new call is finished at accept with
/// `audit_unavailable`: its tool never runs (no PHI read, nothing sent to a third party without a
/// durable trace), and the model and the client hear it like any refused call.
#[tokio::test]
async fn fail_closed_refuses_new_calls_at_accept_while_the_log_is_not_writable() {
    use crate::session::calls::Action;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let failing = Arc::new(AtomicBool::new(true));
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(failing_writes(&failing))).await.unwrap();
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "c0")).await, Err(AuditError::Unavailable));
    assert!(handle.refuses_calls());
    let mut table = quiet_table(&handle);
    let accepted = table.accept("c1", "search_pubmed", "{}", tokio::time::Instant::now());
    assert!(!accepted.iter().any(|a| matches!(a, Action::CheckLimit { .. } | Action::Spawn { .. })), "{accepted:?}");
    let finish = accepted.iter().find_map(|a| match a {
        Action::Audit { record, gates } if record.event == AuditEvent::CallFinished => Some((record, gates)),
        _ => None,
    });
    let (finish, gates) = finish.expect("the call is finished at accept");
    assert_eq!((finish.status, finish.error_code), (Some(AuditStatus::Failed), Some(crate::tools::ErrorCode::AuditUnavailable)));
    // Its finish record cannot be made durable either, and nothing ran: the model and the client
    // are told at once, not when the writer answers (see the hung log below).
    assert_eq!(gates.as_deref(), None);
    assert_refused_at_once(&accepted);

    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    assert!(!handle.refuses_calls());
    let accepted = table.accept("c2", "search_pubmed", "{}", tokio::time::Instant::now());
    assert!(accepted.iter().any(|a| matches!(a, Action::CheckLimit { .. })), "{accepted:?}");
    drop((table, handle));
    writer.join().await.unwrap();
}

/// The model and the client are told `audit_unavailable` by `actions` themselves, with no record
/// waited for and nothing run.
fn assert_refused_at_once(actions: &[crate::session::calls::Action]) {
    use crate::session::calls::Action;
    assert!(actions.iter().any(|a| matches!(a, Action::Output { output, .. } if output.contains("audit_unavailable"))), "{actions:?}");
    assert!(actions.iter().any(|a| matches!(a, Action::Client(event) if event.contains("audit_unavailable"))), "{actions:?}");
    assert!(!actions.iter().any(|a| matches!(a, Action::Audit { gates: Some(_), .. } | Action::Spawn { .. })), "{actions:?}");
}

/// A hung log (`fdatasync` never returns) refuses calls as a failing one does, and at once: a new
/// call, a parked call the user approves, and a call whose rate limit was being checked when the
/// log hung. Each used to wait for its record's acknowledgement, which comes only when the disk
/// does: the model and the client heard nothing.
#[tokio::test]
async fn a_hung_log_refuses_calls_at_once() {
    use crate::session::calls::Action;
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (release, hung) = std::sync::mpsc::channel::<()>();
    let hung = std::sync::Mutex::new(hung);
    let faults: files::Faults = Arc::new(move |op| {
        if op == files::FileOp::Write {
            let _ = hung.lock().unwrap().recv();
        }
        Ok(())
    });
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(faults)).await.unwrap();
    let mut table = quiet_table(&handle);
    // Every record the table makes goes to the writer, as a session hands it over (not awaited).
    let hand_over = |actions: &[Action]| {
        let records = actions.iter().filter_map(|a| match a {
            Action::Audit { record, .. } => Some(record.clone()),
            _ => None,
        });
        drop(handle.record_all(records.collect()));
    };
    let now = tokio::time::Instant::now();
    // Parked before the log hangs (its records are what the writer hangs on).
    hand_over(&table.accept("parked", "create_calendar_event", "{}", now));
    let asked = table.on_limit_checked("parked", Ok(()), 0);
    assert!(asked.iter().any(|a| matches!(a, Action::Expire { .. })), "{asked:?}");
    // Accepted before, its limit answered after.
    let checking = table.accept("checking", "search_pubmed", "{}", now);
    assert!(checking.iter().any(|a| matches!(a, Action::CheckLimit { .. })), "{checking:?}");
    hand_over(&checking);
    until("stalled", writer::STALLED_AFTER + std::time::Duration::from_secs(3), || handle.is_stalled()).await;
    assert!(handle.refuses_calls());

    for refused in [
        table.accept("new", "search_pubmed", "{}", now),
        table.on_confirm("parked", true).unwrap(),
        table.on_limit_checked("checking", Ok(()), 0),
    ] {
        assert_refused_at_once(&refused);
        hand_over(&refused);
    }
    assert_eq!(table.unfinished(), 0, "every call answered");

    drop((table, handle));
    // The disk comes back: every write goes through from now on.
    drop(release);
    writer.join().await.unwrap();
    // Every record landed once the disk came back: three calls refused, each started once and
    // finished once, and the log verifies.
    let all = lines(&cfg);
    for call in ["parked", "checking", "new"] {
        let of = |event: &str| all.iter().filter(|l| l["call_id"] == call && l["event"] == event).count();
        assert_eq!((of("call_started"), of("call_finished")), (1, 1), "{call}: {all:?}");
    }
    let finished: Vec<_> = all.iter().filter(|l| l["event"] == "call_finished").collect();
    assert!(finished.iter().all(|l| l["error_code"] == "audit_unavailable"), "{finished:?}");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A full backlog refuses new calls, never the approval or the finish of a call whose start is
/// held: once the disk takes writes again, that call has its start and its one finish.
#[tokio::test]
async fn a_full_backlog_still_admits_the_finish_of_a_held_call() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let failing = Arc::new(AtomicBool::new(true));
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(failing_writes(&failing))).await.unwrap();
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "held")).await, Err(AuditError::Unavailable));
    let fill: Vec<Box<AuditRecord>> = (1..writer::MAX_BACKLOG)
        .map(|i| {
            let mut r = record(AuditEvent::CallStarted, &format!("f{i}"));
            r.arguments = None;
            Box::new(r)
        })
        .collect();
    let last = handle.record_all(fill).pop().unwrap();
    assert_eq!(last.await, Err(AuditError::Unavailable), "held: the backlog is now full");
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "late")).await, Err(AuditError::Unavailable), "refused");
    // Refused, or held and not yet durable: the log tells which.
    assert_eq!(handle.record(record(AuditEvent::CallFinished, "held")).await, Err(AuditError::Unavailable));
    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(30), || handle.is_healthy()).await;
    drop(handle);
    writer.join().await.unwrap();
    let text = std::fs::read_to_string(&cfg.path).unwrap();
    let events = |call: &str| -> Vec<String> {
        let tag = format!("\"call_id\":\"{call}\"");
        text.lines().filter(|l| l.contains(&tag)).map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(events("held"), ["call_started", "call_finished"]);
    assert!(events("late").is_empty());
}

/// A rotation whose new file cannot be opened (EMFILE) must not leave the writer appending to the
/// file just renamed, past the last seq its name gives: the next commit opens the new file.
#[tokio::test]
async fn a_rotation_that_cannot_open_the_new_file_writes_nothing_into_the_rotated_one() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 1500);
    let fail_open = Arc::new(AtomicBool::new(true));
    let faults: files::Faults = {
        let fail_open = fail_open.clone();
        Arc::new(move |op| {
            if op == files::FileOp::Open && fail_open.swap(false, Ordering::SeqCst) {
                Err(std::io::Error::other("injected: too many open files"))
            } else {
                Ok(())
            }
        })
    };
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(faults)).await.unwrap();
    let mut n = 0;
    while fail_open.load(Ordering::SeqCst) {
        let call = format!("c{n}");
        n += 1;
        handle.record(record(AuditEvent::CallStarted, &call)).await.unwrap();
        handle.record(record(AuditEvent::CallFinished, &call)).await.unwrap();
        assert!(n < 20, "no rotation");
    }
    // Whether this first attempt is held or written, it ends up after the rotated file.
    let _ = handle.record(record(AuditEvent::CallStarted, "after")).await;
    until("writable", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    handle.record(record(AuditEvent::CallFinished, "after")).await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    for rotated in verify::rotated_files(&cfg.path).unwrap() {
        let name = rotated.to_str().unwrap().to_string();
        let last: u64 = name.rsplit('-').next().unwrap().parse().unwrap();
        let text = std::fs::read_to_string(&rotated).unwrap();
        let seq = serde_json::from_str::<serde_json::Value>(text.lines().last().unwrap()).unwrap()["seq"].as_u64().unwrap();
        assert_eq!(seq, last, "{name} ends where its name says");
    }
    let current = lines(&cfg);
    assert_eq!(current.iter().filter(|l| l["call_id"] == "after").count(), 2, "{current:?}");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// `ts` is when the record was made, not when a retry finally wrote it.
#[tokio::test]
async fn a_record_held_through_an_outage_keeps_the_time_it_was_made() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let failing = Arc::new(AtomicBool::new(true));
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(failing_writes(&failing))).await.unwrap();
    let made = chrono::Utc::now();
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "c1")).await, Err(AuditError::Unavailable));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let healed = chrono::Utc::now();
    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    drop(handle);
    writer.join().await.unwrap();
    let ts: chrono::DateTime<chrono::Utc> = lines(&cfg)[0]["ts"].as_str().unwrap().parse().unwrap();
    assert!(ts < healed, "{ts} is when it was written, not made ({made})");
    assert!(ts >= made - chrono::Duration::milliseconds(1));
}

/// A rotation's new file whose name cannot be made durable (the directory's fsync fails) is not
/// written to: a power loss could lose the name and the records with it. The next commit is held,
/// like one after a failed open, and lands once the directory syncs.
#[tokio::test]
async fn a_failed_directory_sync_after_rotation_holds_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 1500);
    let fail_sync = Arc::new(AtomicBool::new(true));
    let faults: files::Faults = {
        let fail_sync = fail_sync.clone();
        Arc::new(move |op| {
            if op == files::FileOp::SyncDir && fail_sync.load(Ordering::SeqCst) {
                Err(std::io::Error::other("injected: directory fsync failed"))
            } else {
                Ok(())
            }
        })
    };
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(faults)).await.unwrap();
    let mut n = 0;
    while verify::rotated_files(&cfg.path).unwrap().is_empty() {
        let call = format!("c{n}");
        n += 1;
        handle.record(record(AuditEvent::CallStarted, &call)).await.unwrap();
        handle.record(record(AuditEvent::CallFinished, &call)).await.unwrap();
        assert!(n < 20, "no rotation");
    }
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "after")).await, Err(AuditError::Unavailable));
    assert!(!handle.is_healthy());
    fail_sync.store(false, Ordering::SeqCst);
    until("writable", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    handle.record(record(AuditEvent::CallFinished, "after")).await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    let current = lines(&cfg);
    assert_eq!(current.iter().filter(|l| l["call_id"] == "after").count(), 2, "{current:?}");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// Runs `CALLS` calls (a start and a finish each, one commit per call) against a disk that refuses
/// every write, then lets it take writes again. Returns how many lines the writer serialised, and
/// the log's lines once it stopped.
async fn outage(on_error: crate::config::AuditOnError) -> (usize, Vec<serde_json::Value>, tempfile::TempDir) {
    const CALLS: usize = 40;
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints every 4 records: their lines sit among the held ones and must chain too.
    let cfg = crate::config::AuditConfig { checkpoint_records: 4, on_error, ..config(&dir, 0) };
    let failing = Arc::new(AtomicBool::new(true));
    let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let faults: files::Faults = {
        let (failing, made) = (failing.clone(), made.clone());
        Arc::new(move |op| match op {
            files::FileOp::Serialise => {
                made.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
            files::FileOp::Write if failing.load(Ordering::SeqCst) => Err(std::io::Error::other("injected: disk full")),
            _ => Ok(()),
        })
    };
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(faults)).await.unwrap();
    for i in 0..CALLS {
        let call = format!("c{i}");
        let turn = vec![Box::new(record(AuditEvent::CallStarted, &call)), Box::new(record(AuditEvent::CallFinished, &call))];
        for ack in handle.record_all(turn) {
            assert_eq!(ack.await, Err(AuditError::Unavailable));
        }
    }
    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    drop(handle);
    writer.join().await.unwrap();
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.calls, CALLS as u64);
    let written = lines(&cfg);
    assert!(written.iter().any(|l| l["event"] == "checkpoint"), "no checkpoint among the held lines");
    (made.load(Ordering::SeqCst), written, dir)
}

/// While the disk refuses writes, every commit used to serialise the whole held backlog again
/// (quadratic in the outage: 40 calls made about 1,700 lines for 100 written). Each held line is
/// now made once and every retry writes those bytes; the chain still verifies after the outage.
#[tokio::test]
async fn held_records_are_serialised_once_and_still_chain_after_the_outage() {
    let (made, written, _dir) = outage(crate::config::AuditOnError::FailOpen).await;
    assert_eq!(made, written.len(), "lines made for {} written", written.len());
    assert!(written.iter().filter(|l| l["event"] == "call_finished").all(|l| l["status"] == "completed"));

    // `fail_closed` rewrites a finish that missed its first write as `audit_unavailable`: that
    // batch's lines are made again once, never once per retry.
    let (made, written, _dir) = outage(crate::config::AuditOnError::FailClosed).await;
    assert!(made <= 2 * written.len(), "{made} lines made for {} written", written.len());
    let finishes: Vec<_> = written.iter().filter(|l| l["event"] == "call_finished").collect();
    assert!(finishes.iter().all(|l| l["status"] == "failed" && l["error_code"] == "audit_unavailable"), "{finishes:?}");
}

/// A log with a timed checkpoint every second, and the switch that makes its writes fail.
fn timed_checkpoints() -> (tempfile::TempDir, crate::config::AuditConfig, Arc<AtomicBool>) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = crate::config::AuditConfig { checkpoint_interval_s: 1, ..config(&dir, 0) };
    (dir, cfg, Arc::new(AtomicBool::new(false)))
}

/// A commit whose only line is a timed checkpoint, failed, is retried like any held record: the
/// writer is healthy again once the disk is (it held the checkpoint and never wrote it, and fail
/// closed kept refusing calls), and the log ends with that one checkpoint.
#[tokio::test]
async fn a_failed_checkpoint_alone_is_retried_and_health_comes_back() {
    let (_dir, cfg, failing) = timed_checkpoints();
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(failing_writes(&failing))).await.unwrap();
    handle.record(record(AuditEvent::CallStarted, "c1")).await.unwrap();
    failing.store(true, Ordering::SeqCst);
    // The ticker's checkpoint (due a second after the record) fails.
    until("the checkpoint's write failed", std::time::Duration::from_secs(5), || !handle.is_healthy()).await;
    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    assert!(!handle.refuses_calls());
    drop(handle);
    writer.join().await.unwrap();
    let written = lines(&cfg);
    let checkpoints = written.iter().filter(|l| l["event"] == "checkpoint").count();
    assert_eq!((written.len(), checkpoints), (2, 1), "{written:?}");
}

/// Through an outage longer than the interval, one timed checkpoint is held, not one per commit.
#[tokio::test]
async fn an_outage_holds_one_timed_checkpoint() {
    let (_dir, cfg, failing) = timed_checkpoints();
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(failing_writes(&failing))).await.unwrap();
    failing.store(true, Ordering::SeqCst);
    let mut held = Vec::new();
    for i in 0..8 {
        held.push(tokio::spawn(handle.record(record(AuditEvent::CallStarted, &format!("c{i}")))));
        tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    }
    failing.store(false, Ordering::SeqCst);
    until("writable again", std::time::Duration::from_secs(5), || handle.is_healthy()).await;
    drop(handle);
    writer.join().await.unwrap();
    let written = lines(&cfg);
    let checkpoints = written.iter().filter(|l| l["event"] == "checkpoint").count();
    assert!(checkpoints <= 2, "{checkpoints} checkpoints in {} lines", written.len());
    drop(held);
}

/// A log cut outside voxgate (a `copytruncate` rotation) lost durable records: the writer goes on
/// at its new end, its sequence and chain unbroken on its side so `verify` shows the cut where it
/// is. It used to pad the file back to its old length with NULs, a line no parser reads, which
/// stopped the next start.
#[tokio::test]
async fn a_log_cut_outside_voxgate_is_appended_to_never_padded() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    handle.record(record(AuditEvent::CallStarted, "c1")).await.unwrap();
    handle.record(record(AuditEvent::CallFinished, "c1")).await.unwrap();
    std::fs::OpenOptions::new().write(true).open(&cfg.path).unwrap().set_len(0).unwrap();
    handle.record(record(AuditEvent::CallStarted, "c2")).await.unwrap();
    let bytes = std::fs::read(&cfg.path).unwrap();
    assert!(!bytes.contains(&0), "no NUL padding: {bytes:?}");
    let all = lines(&cfg);
    assert_eq!((all.len(), all[0]["seq"].as_u64()), (1, Some(3)), "the sequence goes on: {all:?}");
    // Cut in the middle of a line (`truncate -s`): the next line goes after the last whole one,
    // not glued onto the cut one (a line no parser reads).
    let first_line = std::fs::read(&cfg.path).unwrap().len() as u64;
    handle.record(record(AuditEvent::CallFinished, "c2")).await.unwrap();
    std::fs::OpenOptions::new().write(true).open(&cfg.path).unwrap().set_len(first_line + 10).unwrap();
    handle.record(record(AuditEvent::CallStarted, "c3")).await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    let all = lines(&cfg);
    let seqs: Vec<_> = all.iter().map(|l| l["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, [3, 5], "{all:?}");
    // And the log opens again as it is: nothing set aside, nothing refused.
    super::tests::write(&cfg, vec![]).await;
    assert!(std::fs::read_dir(dir.path()).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("torn")));
}

/// A backlog written once the disk is back is written and synced in pieces of at most
/// `COMMIT_PIECE_BYTES`, each ending at a line's end: a power loss during that catch-up leaves at
/// most one piece unsynced at the end, which the next start can set aside (a single write of the
/// whole backlog left megabytes, which stopped every start).
#[tokio::test]
async fn a_large_backlog_is_written_in_synced_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let failing = Arc::new(AtomicBool::new(true));
    let writes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let faults: files::Faults = {
        let (failing, writes) = (failing.clone(), writes.clone());
        Arc::new(move |op| {
            if op != files::FileOp::Write {
                return Ok(());
            }
            if failing.load(Ordering::SeqCst) {
                return Err(std::io::Error::other("injected write failure"));
            }
            writes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    };
    let (handle, writer) = writer::open_with(&cfg, Default::default(), Some(faults)).await.unwrap();
    // About 1.2 MB of records (4 KiB of arguments each), held while the disk refuses them.
    let acks: Vec<_> = (0..300)
        .map(|i| {
            let mut r = record(AuditEvent::CallStarted, &format!("c{i}"));
            r.arguments = Some(serde_json::json!({"query": "x".repeat(4000)}));
            handle.record(r)
        })
        .collect();
    for ack in acks {
        let _ = ack.await;
    }
    failing.store(false, Ordering::SeqCst);
    let line_count = || std::fs::read(&cfg.path).map_or(0, |b| b.iter().filter(|&&c| c == b'\n').count());
    until("written", std::time::Duration::from_secs(5), || line_count() == 300).await;
    let bytes = std::fs::read(&cfg.path).unwrap().len();
    assert!(bytes > 2 * files::COMMIT_PIECE_BYTES, "{bytes}");
    assert!(writes.load(Ordering::SeqCst) >= bytes.div_ceil(files::COMMIT_PIECE_BYTES), "{} pieces", writes.load(Ordering::SeqCst));
    drop(handle);
    writer.join().await.unwrap();
    // The chain holds across the pieces (the calls have no finish: that is all verify reports).
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert_eq!(report.lines, 300, "{report}");
    assert!(report.problems.iter().all(|p| p.contains("has no finish")), "{report}");
}
