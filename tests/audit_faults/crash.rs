//! `kill -9` mid-batch and between a calendar write and its record.

use serde_json::json;

use crate::helpers::*;
use crate::support::{FakeUpstream, model_calls, read_jsonl, spawn_voxgate};

/// kill -9 while batches are being written: the restart cuts a torn line, sequence numbers go on
/// without reuse, and the log verifies.
#[tokio::test]
async fn kill_9_during_batch_writes_leaves_a_log_that_verifies() {
    let work = tempfile::tempdir().unwrap();
    let mut fake = FakeUpstream::start().await;
    let audit = work.path().join("audit.jsonl");
    let config = config(&fake, &audit, &work.path().join("cal.ics"), "");
    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (_client, mut up) = session(&addr, &mut fake).await;
    let calls: Vec<(String, &str, &str)> = (0..40)
        .map(|n| (format!("k{n}"), "calculate_medical_score", BMI))
        .collect();
    let calls: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|(id, name, args)| (id.as_str(), *name, *args))
        .collect();
    model_calls(&mut up, &calls).await;
    up.until("conversation.item.create").await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    // What a crash inside write(2) leaves: the start of a line without its end.
    let mut text = std::fs::read(&audit).unwrap();
    text.extend_from_slice(
        br#"{"ts":"2026-01-01T00:00:00.000Z","seq":99999,"id":"99999-1","event":"call_fini"#,
    );
    std::fs::write(&audit, text).unwrap();

    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (_client, mut up) = session(&addr, &mut fake).await;
    model_calls(&mut up, &[("after", "calculate_medical_score", BMI)]).await;
    up.until("conversation.item.create").await;
    stop(&mut child).await;
    let records = read_jsonl(&audit);
    let seqs: Vec<u64> = records.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "no gap, no reuse"
    );
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "{report}");
}

/// kill -9 after the calendar write but before its `call_finished`: the approval was on disk, the
/// restart finds the event under the call's UID and records the call `completed` (not
/// `abandoned`), naming the event; no temp copy of the calendar survives the restart.
#[tokio::test]
async fn kill_9_after_a_calendar_write_records_what_really_happened() {
    let work = tempfile::tempdir().unwrap();
    let mut fake = FakeUpstream::start().await;
    let audit = work.path().join("audit.jsonl");
    let calendar = work.path().join("cal.ics");
    let config = config(&fake, &audit, &calendar, "");
    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (mut client, mut up) = session(&addr, &mut fake).await;
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    let args = json!({"title": "Ward round", "start_datetime": format!("{day}T14:00:00Z"), "end_datetime": format!("{day}T15:00:00Z")}).to_string();
    model_calls(&mut up, &[("cal1", "create_calendar_event", &args)]).await;
    client
        .until("voxgate.tool_call.confirmation_requested")
        .await;
    client
        .send_json(
            json!({"type": "voxgate.tool_call.confirm", "call_id": "cal1", "approved": true}),
        )
        .await;
    client.until("voxgate.tool_call.completed").await;
    child.start_kill().unwrap();
    child.wait().await.unwrap();

    // The crash point under test: the event is in the calendar, its finish never reached the log
    // (cut here, as the writer had not flushed it), and a temp copy of the calendar was left.
    let lines: Vec<String> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let last = lines
        .iter()
        .rposition(|l| l.contains("\"call_finished\"") && l.contains("\"cal1\""))
        .unwrap();
    let approved = lines
        .iter()
        .position(|l| l.contains("\"call_approved\"") && l.contains("\"cal1\""));
    assert!(
        approved.is_some_and(|a| a < last),
        "the approval was written before the tool ran"
    );
    std::fs::write(
        &audit,
        lines[..last]
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>(),
    )
    .unwrap();
    let temp = work.path().join(".cal.ics.4242.0.tmp");
    std::fs::write(&temp, std::fs::read(&calendar).unwrap()).unwrap();

    let (mut child, _) = spawn_voxgate(&config, work.path()).await;
    stop(&mut child).await;
    assert!(
        !temp.exists(),
        "the temp copy of the calendar was removed at start"
    );
    let records = read_jsonl(&audit);
    let finished = finish(&records, "cal1");
    assert_eq!(finished.len(), 1, "{records:?}");
    assert_eq!(
        finished[0]["status"], "completed",
        "the event exists: the call completed"
    );
    assert_eq!(finished[0]["confirmation"], "approved");
    assert!(
        finished[0]["resource"]
            .as_str()
            .is_some_and(|uid| std::fs::read_to_string(&calendar).unwrap().contains(uid))
    );
    assert!(
        !std::fs::read_to_string(&audit)
            .unwrap()
            .contains("Ward round"),
        "never content"
    );
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "{report}");
}
