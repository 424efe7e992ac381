//! Trace-level logs hold no transcript or tool data.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::*;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{FakeUpstream, binary, model_calls};

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
