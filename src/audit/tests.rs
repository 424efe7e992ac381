//! Writer, recovery, rotation and verification against real files.

use super::*;
use crate::config::AuditConfig;

pub(super) fn record(event: AuditEvent, call: &str) -> AuditRecord {
    let finished = event == AuditEvent::CallFinished;
    AuditRecord {
        event,
        session_id: "vgs_1".into(),
        call_id: call.into(),
        tool: "search_pubmed".into(),
        user: "u_1".into(),
        roles: vec!["clinician".into()],
        status: finished.then_some(AuditStatus::Completed),
        error_code: None,
        confirmation: finished.then_some(Confirmation::NotRequired),
        duration_ms: finished.then_some(3),
        phi: false,
        args_sha256: "ab".repeat(32),
        arguments: Some(serde_json::json!({"query": "asthma"})),
        origin: Default::default(),
        resource: None,
    }
}

/// A `call_started` and a `call_finished` for each of `ids`, in order.
fn calls(ids: &[&str]) -> Vec<AuditRecord> {
    ids.iter().flat_map(|id| [record(AuditEvent::CallStarted, id), record(AuditEvent::CallFinished, id)]).collect()
}

pub(super) fn config(dir: &tempfile::TempDir, rotate_bytes: u64) -> AuditConfig {
    AuditConfig { path: dir.path().join("audit.jsonl"), rotate_bytes, checkpoint_records: 0, ..AuditConfig::default() }
}

pub(super) async fn write(cfg: &AuditConfig, records: Vec<AuditRecord>) {
    let (handle, writer) = open(cfg, Default::default()).await.unwrap();
    let acks: Vec<_> = records.into_iter().map(|r| handle.record(r)).collect();
    for ack in acks {
        ack.await.unwrap();
    }
    drop(handle);
    writer.join().await.unwrap();
}

pub(super) fn lines(cfg: &AuditConfig) -> Vec<serde_json::Value> {
    std::fs::read_to_string(&cfg.path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn chain_seq_and_order_survive_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, vec![record(AuditEvent::CallStarted, "c1"), record(AuditEvent::CallFinished, "c1")]).await;
    write(&cfg, vec![record(AuditEvent::CallStarted, "c2"), record(AuditEvent::CallFinished, "c2")]).await;
    let all = lines(&cfg);
    assert_eq!(all.iter().map(|l| l["seq"].as_u64().unwrap()).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!(all[0]["prev_sha256"], record::GENESIS);
    assert_eq!(all[1]["event"], "call_finished");
    assert_eq!(all[1]["status"], "completed");
    assert_eq!(all[0]["arguments"]["query"], "asthma");
    assert!(all[1].get("error_code").is_some());
    assert_eq!(all[3]["id"], "4-1");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.lines, report.calls), (4, 2));
}

#[tokio::test]
async fn many_concurrent_records_land_once_each_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    let mut acks = Vec::new();
    for i in 0..500 {
        acks.push(tokio::spawn(handle.record(record(AuditEvent::CallStarted, &format!("c{i}")))));
    }
    for ack in acks {
        ack.await.unwrap().unwrap();
    }
    drop(handle);
    writer.join().await.unwrap();
    let all = lines(&cfg);
    assert_eq!(all.len(), 500);
    let ids: Vec<&str> = all.iter().map(|l| l["call_id"].as_str().unwrap()).collect();
    let expected: Vec<String> = (0..500).map(|i| format!("c{i}")).collect();
    assert_eq!(ids, expected, "records keep the order of record() calls");
}

#[tokio::test]
async fn phi_arguments_are_never_written() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let mut r = record(AuditEvent::CallStarted, "c1");
    r.phi = true;
    write(&cfg, vec![r]).await;
    assert!(lines(&cfg)[0].get("arguments").is_none());
}

#[tokio::test]
async fn a_crash_leaves_abandoned_finishes_and_a_torn_line_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, vec![record(AuditEvent::CallStarted, "c1"), record(AuditEvent::CallStarted, "c2"), record(AuditEvent::CallFinished, "c2")]).await;
    let mut text = std::fs::read_to_string(&cfg.path).unwrap();
    text.push_str("{\"ts\":\"2026-01-01T00:00:00.000Z\",\"seq\":4,\"id\":\"4-1\",\"ev");
    std::fs::write(&cfg.path, text).unwrap();
    write(&cfg, vec![]).await;
    let all = lines(&cfg);
    assert_eq!(all.len(), 4);
    assert_eq!(all[3]["call_id"], "c1");
    assert_eq!(all[3]["status"], "abandoned");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.abandoned, 1);
}

/// What a power loss during a group commit can leave: the file's new length on disk before all
/// its pages, so a run of NULs, then the rest of the batch, each line ending in a newline. Never
/// synced, it is cut off and kept aside, and the log opens (the start used to fail on it until
/// someone edited the log by hand). A line that does not parse further back than the writer ever
/// leaves unsynced is corruption of acknowledged records: the start still fails on it.
#[tokio::test]
async fn garbage_a_power_loss_left_at_the_end_is_set_aside_and_the_log_opens() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, vec![record(AuditEvent::CallStarted, "c1"), record(AuditEvent::CallStarted, "c2"), record(AuditEvent::CallFinished, "c2")]).await;
    let durable = std::fs::read(&cfg.path).unwrap();
    let mut garbage = vec![0u8; 300];
    garbage.extend_from_slice(b"ed\",\"tool\":\"search_pubmed\"}\n{\"ts\":\"2026-01-01T00:00:00.000Z\",\"seq\":5}\n");
    std::fs::write(&cfg.path, [durable.as_slice(), &garbage].concat()).unwrap();
    write(&cfg, vec![]).await;
    let all = lines(&cfg);
    assert_eq!(all.len(), 4, "the three durable lines and c1's abandoned finish");
    assert_eq!((all[3]["call_id"].as_str(), all[3]["status"].as_str()), (Some("c1"), Some("abandoned")));
    // The set-aside lines keep the log from reading as sound until a person moved them away.
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(matches!(&report.problems[..], [only] if only.contains("audit.jsonl.torn-4-")), "{report}");
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().contains("audit.jsonl.torn-4-"))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(std::fs::read(&aside[0]).unwrap(), garbage, "the cut bytes are kept as they were");
    std::fs::rename(&aside[0], dir.path().join("inspected")).unwrap();
    assert!(verify(&cfg.path, &Chain::default()).unwrap().is_ok());

    // Further back than the writer ever leaves unsynced (it syncs every `COMMIT_PIECE_BYTES`):
    // not the crash's, the start fails.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, vec![record(AuditEvent::CallStarted, "c1")]).await;
    let mut text = std::fs::read(&cfg.path).unwrap();
    text.extend_from_slice(b"not a record\n");
    text.extend_from_slice(&vec![b'x'; files::UNSYNCED_TAIL_BYTES as usize + 1]);
    text.push(b'\n');
    std::fs::write(&cfg.path, text).unwrap();
    assert!(matches!(open(&cfg, Default::default()).await.map(|_| ()), Err(AuditError::Corrupt { line: 2 })));
}

#[tokio::test]
async fn a_second_writer_on_the_same_log_is_refused_until_the_first_ends() {
    // Two replicas on one volume: the second used to take the first's newer lines for a torn tail
    // of its own, cut them, and close the first's running calls as abandoned.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (first, writer) = open(&cfg, Default::default()).await.unwrap();
    first.record(record(AuditEvent::CallStarted, "c1")).await.unwrap();
    match open(&cfg, Default::default()).await {
        Err(AuditError::InUse(lock)) => assert!(lock.ends_with("audit.jsonl.lock"), "{lock}"),
        other => panic!("a second writer opened the log: {:?}", other.map(|_| ())),
    }
    first.record(record(AuditEvent::CallFinished, "c1")).await.unwrap();
    drop(first);
    writer.join().await.unwrap();
    // The first writer's lines are whole, none closed as abandoned; and the log opens again.
    write(&cfg, vec![record(AuditEvent::CallStarted, "c2"), record(AuditEvent::CallFinished, "c2")]).await;
    let all = lines(&cfg);
    assert_eq!(all.iter().map(|l| l["call_id"].as_str().unwrap()).collect::<Vec<_>>(), ["c1", "c1", "c2", "c2"]);
    assert_eq!(all[1]["status"], "completed");
    assert!(verify(&cfg.path, &Chain::default()).unwrap().is_ok());
}

#[tokio::test]
async fn verify_finds_tampering_gaps_and_missing_or_duplicate_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, calls(&["c1", "c2"])).await;
    let good = std::fs::read_to_string(&cfg.path).unwrap();
    let check = |text: String| {
        std::fs::write(&cfg.path, text).unwrap();
        verify(&cfg.path, &Chain::default()).unwrap()
    };
    assert!(check(good.clone()).is_ok());
    let tampered = check(good.replacen("asthma", "asthmb", 1));
    assert!(!tampered.is_ok());
    assert!(tampered.problems.iter().any(|p| p.contains("hash chain")), "{tampered}");
    let lines: Vec<&str> = good.lines().collect();
    let deleted = check(format!("{}\n{}\n{}\n", lines[0], lines[2], lines[3]));
    assert!(!deleted.is_ok(), "a deleted line breaks the chain");
    let missing_finish = check(format!("{}\n{}\n{}\n", lines[0], lines[1], lines[2]));
    assert!(missing_finish.problems.iter().any(|p| p.contains("no finish")), "{missing_finish}");
    let duplicated = check(format!("{good}{}\n", lines[3]));
    assert!(duplicated.problems.iter().any(|p| p.contains("finished twice")), "{duplicated}");
    let double_start = check(format!("{}\n{}\n", lines[0], lines[0]));
    assert!(double_start.problems.iter().any(|p| p.contains("started twice")), "{double_start}");
}

/// A call id started again after its finish is a second call under one id: a break, even with
/// the chain intact (here the writer itself linked the lines) and each start having its finish.
#[tokio::test]
async fn verify_flags_a_call_started_again_after_its_finish() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    write(&cfg, calls(&["c1", "c2", "c1"])).await;
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(!report.is_ok(), "{report}");
    assert_eq!(report.problems.len(), 1, "one break, reported once: {report}");
    assert!(report.problems[0].starts_with("audit.jsonl:5: call c1 started again after its finish"), "{report}");
    assert_eq!(report.calls, 2, "{report}");
    // The same call id in another session is another call.
    std::fs::write(&cfg.path, "").unwrap();
    let mut two = calls(&["c1", "c1"]);
    for other in &mut two[2..] {
        other.session_id = "vgs_2".into();
    }
    write(&cfg, two).await;
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

#[tokio::test]
async fn rotation_keeps_the_chain_across_files() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 1500);
    for i in 0..10 {
        let call = format!("c{i}");
        write(&cfg, vec![record(AuditEvent::CallStarted, &call), record(AuditEvent::CallFinished, &call)]).await;
    }
    let rotated = verify::rotated_files(&cfg.path).unwrap();
    assert!(rotated.len() >= 2, "{rotated:?}");
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    assert_eq!((report.lines, report.calls), (20, 10));
    // The first line of the newest file links to the last line of the one before.
    let last_old = std::fs::read_to_string(rotated.last().unwrap()).unwrap();
    let last_line = last_old.lines().last().unwrap();
    let current = std::fs::read_to_string(&cfg.path).unwrap();
    if let Some(first) = current.lines().next() {
        let first: serde_json::Value = serde_json::from_str(first).unwrap();
        assert_eq!(first["prev_sha256"], Chain::default().link(last_line.as_bytes()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_lone_call_started_is_still_made_durable_after_the_group_window() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    // Nothing follows it: the writer stops waiting for a gating record and writes it alone.
    handle.record(record(AuditEvent::CallStarted, "c1")).await.unwrap();
    assert_eq!(lines(&cfg).len(), 1, "acknowledged means on disk");
    // A gating record queued right behind one ends the wait at once; both are written.
    let started = handle.record(record(AuditEvent::CallStarted, "c2"));
    let finished = handle.record(record(AuditEvent::CallFinished, "c2"));
    finished.await.unwrap();
    started.await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    let all = lines(&cfg);
    assert_eq!(all.iter().map(|l| l["event"].as_str().unwrap()).collect::<Vec<_>>(), ["call_started", "call_started", "call_finished"]);
}

/// A session turn that starts and finishes a call hands both records over as one job: both are
/// acknowledged, in order, after a single commit (one fdatasync).
#[tokio::test]
async fn records_queued_together_are_committed_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let metrics = crate::telemetry::metrics::Metrics::new();
    let (handle, writer) = open(&cfg, OpenOptions { metrics: Some(metrics.clone()), ..Default::default() }).await.unwrap();
    let batch = vec![Box::new(record(AuditEvent::CallStarted, "c1")), Box::new(record(AuditEvent::CallFinished, "c1"))];
    for ack in handle.record_all(batch) {
        ack.await.unwrap();
    }
    assert!(handle.record_all(Vec::new()).is_empty());
    drop(handle);
    writer.join().await.unwrap();
    let all = lines(&cfg);
    let events: Vec<&str> = all.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["call_started", "call_finished"]);
    let commits = metrics.render().lines().find_map(|l| l.strip_prefix("voxgate_audit_commit_seconds_count ").map(str::to_owned));
    assert_eq!(commits.as_deref(), Some("1"), "one fdatasync for the pair");
}


/// A log written before MCP errors became `backend_error` holds `"error_code":"tool_error"`: a code
/// the list no longer has. It still opens (recovery reads every line) and still verifies.
#[tokio::test]
async fn a_log_with_a_code_no_longer_in_the_list_still_opens_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let mut failed = record(AuditEvent::CallFinished, "c1");
    failed.status = Some(AuditStatus::Failed);
    failed.error_code = Some(crate::tools::ErrorCode::BackendError);
    write(&cfg, vec![record(AuditEvent::CallStarted, "c1"), failed]).await;
    // Rewrite it as the older version wrote it, chain included.
    let chain = Chain::default();
    let mut prev = record::GENESIS.to_string();
    let mut text = String::new();
    for raw in std::fs::read_to_string(&cfg.path).unwrap().lines() {
        let mut line: serde_json::Value = serde_json::from_str(raw).unwrap();
        if line["error_code"].is_string() {
            line["error_code"] = "tool_error".into();
        }
        line["prev_sha256"] = prev.clone().into();
        let bytes = serde_json::to_vec(&line).unwrap();
        prev = chain.link(&bytes);
        text.push_str(std::str::from_utf8(&bytes).unwrap());
        text.push('\n');
    }
    assert!(text.contains(r#""error_code":"tool_error""#));
    std::fs::write(&cfg.path, text).unwrap();
    write(&cfg, vec![record(AuditEvent::CallStarted, "c2"), record(AuditEvent::CallFinished, "c2")]).await;
    assert_eq!(lines(&cfg).len(), 4);
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// A finish whose call has no start in the log (its `call_started` was refused while the backlog
/// was full) is refused too: written alone, it would be a finish without a start, which `audit
/// verify` reports as a break.
#[tokio::test]
async fn a_finish_whose_start_never_made_the_log_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    assert_eq!(handle.record(record(AuditEvent::CallFinished, "orphan")).await, Err(AuditError::Unavailable));
    assert_eq!(handle.record(record(AuditEvent::CallApproved, "orphan")).await, Err(AuditError::Unavailable));
    handle.record(record(AuditEvent::CallStarted, "c1")).await.unwrap();
    handle.record(record(AuditEvent::CallApproved, "c1")).await.unwrap();
    handle.record(record(AuditEvent::CallFinished, "c1")).await.unwrap();
    assert_eq!(handle.record(record(AuditEvent::CallFinished, "c1")).await, Err(AuditError::Unavailable), "finished once");
    handle.record(record(AuditEvent::CallStarted, "c2")).await.unwrap();
    assert_eq!(handle.record(record(AuditEvent::CallStarted, "c2")).await, Err(AuditError::Unavailable), "started once");
    handle.record(record(AuditEvent::CallFinished, "c2")).await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    assert_eq!(lines(&cfg).len(), 5);
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}

/// `verify` keeps whole only the calls still open (of a finished call, a 16-byte digest), so its
/// memory does not grow with the history's lines.
#[tokio::test]
async fn verify_keeps_only_open_calls_whole_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 0);
    let mut records = Vec::new();
    for i in 0..200 {
        let call = format!("c{i}");
        records.push(record(AuditEvent::CallStarted, &call));
        records.push(record(AuditEvent::CallFinished, &call));
    }
    records.push(record(AuditEvent::CallStarted, "open"));
    write(&cfg, records).await;
    let (report, most) = verify::check(&cfg.path, &Chain::default()).unwrap();
    assert_eq!((report.lines, report.calls), (401, 201));
    assert!(report.problems.iter().any(|p| p.contains("open has no finish")), "{report}");
    assert!(most <= 2, "kept {most} calls at once");
    // A finish after the call's record was let go is still a break.
    let text = std::fs::read_to_string(&cfg.path).unwrap();
    let second = text.lines().nth(1).unwrap();
    let mut again: serde_json::Value = serde_json::from_str(second).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    again["seq"] = (last["seq"].as_u64().unwrap() + 1).into();
    again["prev_sha256"] = Chain::default().link(text.lines().last().unwrap().as_bytes()).into();
    std::fs::write(&cfg.path, format!("{text}{again}\n")).unwrap();
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.problems.iter().any(|p| p.contains("c0 finished twice")), "{report}");
}

/// Rotated files archived away (retention): the chain starts at the first file left, which
/// `verify` reports as information, and so are finishes whose start was archived — not a break.
/// A current file missing after a crash between a rotation's rename and the new file's open is
/// empty, not an error.
#[tokio::test]
async fn verify_starts_at_the_first_file_left_and_takes_a_missing_current_file_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(&dir, 1500);
    let (handle, writer) = open(&cfg, Default::default()).await.unwrap();
    handle.record(record(AuditEvent::CallStarted, "long")).await.unwrap();
    for i in 0..10 {
        let call = format!("c{i}");
        handle.record(record(AuditEvent::CallStarted, &call)).await.unwrap();
        handle.record(record(AuditEvent::CallFinished, &call)).await.unwrap();
    }
    handle.record(record(AuditEvent::CallFinished, "long")).await.unwrap();
    drop(handle);
    writer.join().await.unwrap();
    let rotated = verify::rotated_files(&cfg.path).unwrap();
    assert!(rotated.len() >= 3, "{rotated:?}");
    let archive = tempfile::tempdir().unwrap();
    std::fs::rename(&rotated[0], archive.path().join("oldest")).unwrap();

    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
    let text = report.to_string();
    assert!(text.starts_with("OK"), "{text}");
    assert!(text.contains("earlier files not present"), "{text}");
    assert!(text.contains("call long finished"), "{text}");

    // The current file renamed as a rotation does it, and no new file opened yet.
    let current = lines(&cfg);
    if current.is_empty() {
        std::fs::remove_file(&cfg.path).unwrap();
    } else {
        let (first, last) = (current[0]["seq"].as_u64().unwrap(), current[current.len() - 1]["seq"].as_u64().unwrap());
        std::fs::rename(&cfg.path, files::rotated_name(&cfg.path, first, last)).unwrap();
    }
    let report = verify(&cfg.path, &Chain::default()).unwrap();
    assert!(report.is_ok(), "{report}");
}
