//! A soak of the real binary against its simulated model: many sessions at once, each looping
//! through a tool call, a barge-in (`response.cancel` mid-response) and a reconnect, for a while.
//! Afterwards: resident memory and open descriptors flat after warm-up, and every call audited
//! exactly once.
//!
//! Too long for CI, so it is opt-in: `VOXGATE_SOAK=1 cargo nextest run --test soak --run-ignored all`
//! (`VOXGATE_SOAK_SESSIONS`, default 200; `VOXGATE_SOAK_SECS`, default 600). docs/reliability.md
//! records the runs made.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Client, spawn_voxgate};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// One session's life until `until`: calls, barge-ins, reconnects. Returns the calls it completed.
async fn user(url: String, until: Instant) -> u64 {
    let mut calls = 0;
    while Instant::now() < until {
        let mut client = Client::connect(&url, &["realtime", "voxgate.v1"]).await;
        client.until("voxgate.session.ready").await;
        for _ in 0..3 {
            client
                .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": "Calculate the BMI for 70 kg and 175 cm"}]}}))
                .await;
            client.send_json(json!({"type": "response.create"})).await;
            loop {
                let event = client.next_json().await;
                match event["type"].as_str() {
                    Some("voxgate.tool_call.completed") => break,
                    Some("voxgate.tool_call.failed" | "voxgate.tool_call.declined") => panic!("the call did not complete: {event}"),
                    _ => {}
                }
            }
            calls += 1;
            // Barge in on the answer to the result.
            client.until("response.created").await;
            client.send_json(json!({"type": "response.cancel"})).await;
            client.until("response.done").await;
        }
        // Reconnect.
        let _ = client.ws.close(None).await;
    }
    calls
}

#[tokio::test]
#[ignore = "a long soak: VOXGATE_SOAK=1 and --run-ignored all"]
async fn soak_sessions_calls_barge_ins_and_reconnects() {
    if std::env::var_os("VOXGATE_SOAK").is_none() {
        return;
    }
    let sessions = env_or("VOXGATE_SOAK_SESSIONS", 200);
    let secs = env_or("VOXGATE_SOAK_SECS", 600);
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.jsonl");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nmax_sessions = {}\n[audit]\npath = \"{}\"\nrotate_bytes = 0\n[backends.calendar]\npath = \"{}\"\n\
         [tools.calculate_medical_score]\nrate_limit_per_minute = 100000\n",
        sessions * 2,
        audit.display(),
        dir.path().join("cal.ics").display()
    );
    let (child, addr) = spawn_voxgate(&config, dir.path()).await;
    let pid = child.id().unwrap();
    let url = format!("ws://{addr}/v1/realtime");
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let users: Vec<_> = (0..sessions)
        .map(|_| tokio::spawn(user(url.clone(), until)))
        .collect();

    // Warm-up: a tenth of the run; then sample every few seconds.
    tokio::time::sleep(Duration::from_secs(secs / 10)).await;
    let warm = (vm_rss_kib(pid), open_fds(pid));
    let mut peak = warm;
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(5)).await;
        peak = (peak.0.max(vm_rss_kib(pid)), peak.1.max(open_fds(pid)));
    }
    let mut calls = 0;
    for user in users {
        calls += tokio::time::timeout(Duration::from_secs(120), user)
            .await
            .expect("a user hung")
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let end = (vm_rss_kib(pid), open_fds(pid));
    eprintln!(
        "soak: {sessions} sessions x {secs} s, {calls} calls; VmRSS warm {} KiB, peak {} KiB, end {} KiB; fds warm {}, peak {}, end {}",
        warm.0, peak.0, end.0, warm.1, peak.1, end.1
    );
    let mut finished: HashMap<String, usize> = HashMap::new();
    let mut started_calls = 0;
    for record in support::read_jsonl(&audit) {
        match record["event"].as_str() {
            Some("call_started") => started_calls += 1,
            Some("call_finished") => {
                *finished
                    .entry(record["call_id"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1
            }
            _ => {}
        }
    }
    assert!(
        finished.values().all(|n| *n == 1),
        "a call was finished twice"
    );
    assert_eq!(
        finished.len() as u64,
        calls,
        "every completed call audited once"
    );
    assert_eq!(started_calls, calls, "no call started that did not finish");
    // Flat after warm-up: no more than a quarter above the warm figure, and descriptors back down.
    assert!(
        peak.0 < warm.0 + warm.0 / 4 + 16 * 1024,
        "RSS grew: warm {} KiB, peak {} KiB",
        warm.0,
        peak.0
    );
    assert!(
        end.1 <= warm.1 + 8,
        "descriptors leaked: warm {}, end {}",
        warm.1,
        end.1
    );
}
