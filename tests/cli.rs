//! The real binary: `check-config`, refusing a bad config with exit 2, and a SIGTERM drain with an
//! open session (closing event, 1012, exit 0, audit flushed).

mod support;

use std::io::Write;
use std::time::Duration;

use serde_json::json;
use support::{Client, binary, spawn_voxgate};

fn write_config(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

#[test]
fn check_config_accepts_a_good_file_and_hides_secrets() {
    let file = write_config("[server]\nlisten = \"127.0.0.1:9999\"\n[upstream]\napi_key = \"sk-live-TOPSECRET\"\n");
    let out = std::process::Command::new(binary())
        .arg("check-config")
        .arg(file.path())
        .env("VOXGATE_AUTH__ADMIN_TOKEN", "admin-TOPSECRET-0123456789")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout} {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("server.listen = 127.0.0.1:9999"), "{stdout}");
    assert!(stdout.contains("upstream.kind = openai"), "{stdout}");
    assert!(stdout.contains("auth.admin_token = (set)"), "{stdout}");
    assert!(!stdout.contains("TOPSECRET"), "{stdout}");
}

#[test]
fn a_bad_config_names_the_key_and_exits_2() {
    let file = write_config("[server]\nmax_sessions = 0\n");
    for args in [vec!["check-config".to_string(), file.path().display().to_string()], vec!["--config".into(), file.path().display().to_string()]] {
        let out = std::process::Command::new(binary()).args(&args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("server.max_sessions"), "{stderr}");
    }
    let out = std::process::Command::new(binary())
        .arg("check-config")
        .arg("/nonexistent.toml")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = std::process::Command::new(binary())
        .env("VOXGATE_SERVER__LISTEN", "not-an-address")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.listen"));
}

#[tokio::test]
async fn sigterm_drains_an_open_session() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n",
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display()
    );
    let (mut child, addr) = spawn_voxgate(&config, dir.path()).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    client.until("voxgate.session.ready").await;
    // Ask for a calculation so the audit log has something to flush.
    client
        .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Calculate the BMI for 70 kg and 175 cm"}]}}))
        .await;
    client.send_json(json!({"type": "response.create"})).await;
    client.until("voxgate.tool_call.completed").await;

    let pid = child.id().unwrap();
    let status = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status().unwrap();
    assert!(status.success());
    let closing = client.until("voxgate.session.closing").await;
    assert_eq!(closing["reason"], "service restart");
    assert_eq!(client.closed().await.0, 1012);
    let exit = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap();
    assert!(exit.success(), "{exit:?}");
    let records = support::read_jsonl(&dir.path().join("audit.jsonl"));
    assert_eq!(records.iter().filter(|r| r["event"] == "call_finished").count(), 1);
    let verify = std::process::Command::new(binary())
        .args(["audit", "verify"])
        .arg(dir.path().join("audit.jsonl"))
        .output()
        .unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
}
