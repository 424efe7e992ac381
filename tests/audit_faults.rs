//! The audit log on a bad day, against the real binary (CONTRACT §5, §11; issue 18): a full disk
//! (a small tmpfs filled during calls) with `fail_closed` and `fail_open`, `kill -9` mid-batch and
//! after a calendar write before its record, a chain recomputed after an edit under
//! `audit.chain_key`, and a trace-level log that holds no transcript or tool data.

mod support;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{Client, FakeConn, FakeUpstream, binary, model_calls, read_jsonl, spawn_voxgate};
use tokio::io::{AsyncBufReadExt, BufReader};

const BMI: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;

/// A tmpfs mounted for one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// `None` (with a message saying why the test is skipped) where mounting is not permitted.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status();
        if status.is_ok_and(|s| s.success()) {
            Some(Tmpfs(dir.to_path_buf()))
        } else {
            eprintln!(
                "SKIPPED: mounting a tmpfs is not permitted here (needs root or CAP_SYS_ADMIN)"
            );
            None
        }
    }

    /// Fill the file system; returns the filler to delete when space should come back.
    fn fill(&self) -> PathBuf {
        use std::io::Write;
        let path = self.0.join("filler");
        let mut file = std::fs::File::create(&path).unwrap();
        for chunk in [65536usize, 4096, 512, 64, 1] {
            let block = vec![b'x'; chunk];
            while file.write_all(&block).is_ok() {}
        }
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

fn config(upstream: &FakeUpstream, audit: &Path, calendar: &Path, audit_extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ninstance_id = \"itest-1\"\n\
         [upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-test\"\n\
         [audit]\npath = \"{}\"\n{audit_extra}\n[backends.calendar]\npath = \"{}\"\n",
        upstream.addr,
        audit.display(),
        calendar.display()
    )
}

async fn session(addr: &str, fake: &mut FakeUpstream) -> (Client, FakeConn) {
    let mut client = Client::connect(
        &format!("ws://{addr}/v1/realtime"),
        &["realtime", "voxgate.v1"],
    )
    .await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    (client, up)
}

/// One BMI call: the output the model got and the client's terminal event.
async fn bmi_call(client: &mut Client, up: &mut FakeConn, call_id: &str) -> (Value, Value) {
    model_calls(up, &[(call_id, "calculate_medical_score", BMI)]).await;
    let item = up.until("conversation.item.create").await;
    let output: Value = serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap();
    let events = client
        .collect_until_any(&["voxgate.tool_call.completed", "voxgate.tool_call.failed"])
        .await;
    (output, events.last().cloned().unwrap())
}

async fn readyz(addr: &str) -> u16 {
    reqwest::get(format!("http://{addr}/readyz"))
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn metrics(addr: &str) -> String {
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

async fn stop(child: &mut tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(20), child.wait())
            .await
            .unwrap()
            .unwrap()
            .success()
    );
}

fn verify(audit: &Path, env: &[(&str, &str)]) -> (bool, String) {
    let out = std::process::Command::new(binary())
        .args(["audit", "verify"])
        .arg(audit)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn finish<'a>(records: &'a [Value], call_id: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| r["event"] == "call_finished" && r["call_id"] == call_id)
        .collect()
}

trait CollectAny {
    async fn collect_until_any(&mut self, kinds: &[&str]) -> Vec<Value>;
}

impl CollectAny for Client {
    async fn collect_until_any(&mut self, kinds: &[&str]) -> Vec<Value> {
        let mut seen = Vec::new();
        loop {
            let event = self.next_json().await;
            let done = kinds.iter().any(|k| event["type"] == *k);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

/// Calls until one hits the full disk (the audit file's last page may still take a line or two).
async fn call_until_refused(
    client: &mut Client,
    up: &mut FakeConn,
    prefix: &str,
) -> (String, Value, Value) {
    for n in 0..20 {
        let call_id = format!("{prefix}{n}");
        let (output, event) = bmi_call(client, up, &call_id).await;
        if output.get("error").is_some() {
            return (call_id, output, event);
        }
    }
    panic!("the full disk never refused a record");
}

#[tokio::test]
async fn full_disk_fail_closed_withholds_results_goes_unready_and_recovers_by_itself() {
    let work = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&work.path().join("audit"), "256k") else {
        return;
    };
    let mut fake = FakeUpstream::start().await;
    let audit = disk.0.join("audit.jsonl");
    let (mut child, addr) = spawn_voxgate(
        &config(&fake, &audit, &work.path().join("cal.ics"), ""),
        work.path(),
    )
    .await;
    let (mut client, mut up) = session(&addr, &mut fake).await;

    let (output, event) = bmi_call(&mut client, &mut up, "before").await;
    assert_eq!(event["type"], "voxgate.tool_call.completed", "{output}");
    assert_eq!(readyz(&addr).await, 200);

    let filler = disk.fill();
    let (refused, output, event) = call_until_refused(&mut client, &mut up, "full").await;
    // Nothing the call produced reaches the model or the client: only the error.
    assert_eq!(output["error"]["code"], "audit_unavailable", "{output}");
    assert_eq!(output.as_object().unwrap().len(), 1, "{output}");
    assert_eq!(event["type"], "voxgate.tool_call.failed");
    assert_eq!(event["error"]["code"], "audit_unavailable");
    assert_eq!(
        readyz(&addr).await,
        503,
        "not ready while the audit cannot be written"
    );

    std::fs::remove_file(filler).unwrap();
    let mut ready = false;
    for _ in 0..100 {
        if readyz(&addr).await == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "readiness comes back on its own once space returns");
    let (output, event) = bmi_call(&mut client, &mut up, "after").await;
    assert_eq!(event["type"], "voxgate.tool_call.completed", "{output}");

    drop(client);
    stop(&mut child).await;
    let records = read_jsonl(&audit);
    let refused_finish = finish(&records, &refused);
    assert_eq!(
        refused_finish.len(),
        1,
        "the held record was written once space returned: {records:?}"
    );
    assert_eq!(refused_finish[0]["status"], "failed");
    assert_eq!(refused_finish[0]["error_code"], "audit_unavailable");
    assert!(records.iter().all(|r| r["instance"] == "itest-1"));
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "{report}");
}

#[tokio::test]
async fn full_disk_fail_open_releases_results_and_counts_the_failure() {
    let work = tempfile::tempdir().unwrap();
    let Some(disk) = Tmpfs::mount(&work.path().join("audit"), "256k") else {
        return;
    };
    let mut fake = FakeUpstream::start().await;
    let audit = disk.0.join("audit.jsonl");
    let config = config(
        &fake,
        &audit,
        &work.path().join("cal.ics"),
        "on_error = \"fail_open\"",
    );
    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (mut client, mut up) = session(&addr, &mut fake).await;
    bmi_call(&mut client, &mut up, "before").await;

    let filler = disk.fill();
    let mut counted = false;
    for n in 0..20 {
        let (output, event) = bmi_call(&mut client, &mut up, &format!("open{n}")).await;
        assert_eq!(
            event["type"], "voxgate.tool_call.completed",
            "fail_open releases the result: {output}"
        );
        assert!(output.get("error").is_none(), "{output}");
        let body = metrics(&addr).await;
        if body
            .lines()
            .any(|l| l.starts_with("voxgate_audit_errors_total") && !l.ends_with(" 0"))
        {
            counted = true;
            break;
        }
    }
    assert!(counted, "the failure is counted");
    assert_eq!(readyz(&addr).await, 200, "fail_open stays ready");

    std::fs::remove_file(filler).unwrap();
    drop(client);
    stop(&mut child).await;
    let (ok, report) = verify(&audit, &[]);
    assert!(ok, "held records are written once space returns: {report}");
    assert!(
        finish(&read_jsonl(&audit), "open0")
            .iter()
            .all(|r| r["status"] == "completed")
    );
}

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

/// With `audit.chain_key`, someone who edits a line and recomputes every later link (as one can
/// for a plain SHA-256 chain) still fails `verify`.
#[tokio::test]
async fn a_recomputed_chain_fails_verify_with_the_chain_key() {
    let work = tempfile::tempdir().unwrap();
    let mut fake = FakeUpstream::start().await;
    let audit = work.path().join("audit.jsonl");
    let config = config(
        &fake,
        &audit,
        &work.path().join("cal.ics"),
        "chain_key = \"k-3f9a1c-7d2e5b40\"\ncheckpoint_records = 3",
    );
    let (mut child, addr) = spawn_voxgate(&config, work.path()).await;
    let (_client, mut up) = session(&addr, &mut fake).await;
    for call in ["h1", "h2"] {
        model_calls(&mut up, &[(call, "calculate_medical_score", BMI)]).await;
        up.until("conversation.item.create").await;
    }
    stop(&mut child).await;
    let key = [("VOXGATE_AUDIT__CHAIN_KEY", "k-3f9a1c-7d2e5b40")];
    let (ok, report) = verify(&audit, &key);
    assert!(ok, "{report}");
    let text = std::fs::read_to_string(&audit).unwrap();
    assert!(
        text.contains("\"checkpoint\""),
        "a checkpoint every 3 records: {text}"
    );
    let (ok, _) = verify(&audit, &[]);
    assert!(!ok, "a keyed chain does not verify as plain SHA-256");

    // The attacker's edit: a completed call becomes failed, and every link is recomputed with
    // plain SHA-256, checkpoints included.
    use sha2::{Digest, Sha256};
    let mut prev = "0".repeat(64);
    let mut forged = String::new();
    for line in text.replacen("\"completed\"", "\"failed\"", 1).lines() {
        let mut value: Value = serde_json::from_str(line).unwrap();
        value["prev_sha256"] = json!(prev);
        if value["event"] == "checkpoint" {
            value["chain_head"] = json!(prev);
        }
        let bytes = serde_json::to_string(&value).unwrap();
        prev = hex::encode(Sha256::digest(bytes.as_bytes()));
        forged.push_str(&bytes);
        forged.push('\n');
    }
    std::fs::write(&audit, forged).unwrap();
    let (ok, _) = verify(&audit, &[]);
    assert!(
        ok,
        "without the key, a recomputed chain looks sound (the limit docs/audit.md states)"
    );
    let (ok, report) = verify(&audit, &key);
    assert!(!ok, "with the key it does not: {report}");
}

/// `RUST_LOG=trace,tungstenite=trace` (and a more specific `tungstenite::protocol=trace`): the
/// payload-logging crates stay capped, so neither a transcript nor a tool's arguments or result
/// reaches the log.
#[tokio::test]
async fn a_trace_log_holds_no_transcript_or_tool_data() {
    let work = tempfile::tempdir().unwrap();
    let mut fake = FakeUpstream::start().await;
    let audit = work.path().join("audit.jsonl");
    let path = work.path().join("voxgate.toml");
    std::fs::write(
        &path,
        config(&fake, &audit, &work.path().join("cal.ics"), ""),
    )
    .unwrap();
    let mut child = tokio::process::Command::new(binary())
        .arg("--config")
        .arg(&path)
        .env(
            "RUST_LOG",
            "trace,tungstenite=trace,tungstenite::protocol=trace,tokio_tungstenite=trace",
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for reader in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn tokio::io::AsyncRead + Unpin + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(reader).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let mut log = Vec::new();
    let addr = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(line) = rx.recv().await {
            let found = line.split("listening on ").nth(1).map(|rest| {
                rest.split_whitespace()
                    .next()
                    .unwrap()
                    .trim_matches('"')
                    .to_string()
            });
            log.push(line);
            if let Some(addr) = found {
                return addr;
            }
        }
        panic!("voxgate exited before listening");
    })
    .await
    .unwrap();
    let (mut client, mut up) = session(&addr, &mut fake).await;
    client.send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "TRANSCRIPT-CANARY Zebulon Quixote chest pain"}]}})).await;
    up.until("conversation.item.create").await;
    up.send_json(&json!({"type": "response.output_audio_transcript.delta", "event_id": "e1", "response_id": "r0", "item_id": "i0",
        "output_index": 0, "content_index": 0, "delta": "MODEL-CANARY spoken reply"})).await;
    client.until("response.output_audio_transcript.delta").await;
    let args = r#"{"calculator_name":"bmi","parameters":{"weight_kg":73.91717,"height_cm":166}}"#;
    model_calls(&mut up, &[("tr1", "calculate_medical_score", args)]).await;
    let item = up.until("conversation.item.create").await;
    let output = item["item"]["output"].as_str().unwrap().to_string();
    drop(client);
    stop(&mut child).await;
    while let Some(line) = rx.recv().await {
        log.push(line);
    }
    let log = log.join("\n");
    assert!(
        log.contains(" DEBUG ") || log.contains(" TRACE "),
        "verbose logging is on: {log}"
    );
    for canary in [
        "TRANSCRIPT-CANARY",
        "Zebulon",
        "MODEL-CANARY",
        "73.91717",
        "sk-test",
    ] {
        assert!(!log.contains(canary), "{canary} reached the log");
    }
    let result: Value = serde_json::from_str(&output).unwrap();
    let figure = result.to_string();
    assert!(!log.contains(&figure), "the tool result reached the log");
}
