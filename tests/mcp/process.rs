//! What an MCP server can learn from, and leave behind in, voxgate's process: its log lines (the
//! MCP client library logs whole messages), its environment (secrets), and the processes a stdio
//! server's wrapper starts. These run voxgate as a process where the environment or the log
//! output is what is checked.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::support::{Client, FakeUpstream, TestProxy, model_calls, read_jsonl, spawn_voxgate_logged, test_python};
use super::{eventually, lab_script, mcp_toml, output};

/// A made-up patient: in the tool's arguments, its progress messages, its log notification and its
/// result. It must never be in voxgate's log.
const PATIENT: &str = "Zebulon Quixote";

/// Config for voxgate as a process: the stdio lab server (files in `lab_dir`) and `fake` upstream.
fn process_config(fake: &FakeUpstream, dir: &Path, lab_dir: &Path) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-canary-key\"\n\
         [audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n{}",
        fake.addr,
        dir.join("audit.jsonl").display(),
        dir.join("cal.ics").display(),
        mcp_toml(lab_dir, false, ""),
    )
}

/// SIGTERM, then wait (bounded) for the process to end.
async fn stop(child: &mut tokio::process::Child) {
    let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().unwrap().to_string()).status();
    let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;
}

/// One call of a tool that puts the patient in its progress and log notifications, with voxgate
/// logging at `rust_log`; returns the log.
async fn log_of_a_chart_call(rust_log: Option<&str>) -> String {
    let mut fake = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let lab_dir = tempfile::tempdir().unwrap();
    let (mut child, addr, logs) =
        spawn_voxgate_logged(&process_config(&fake, dir.path(), lab_dir.path()), dir.path(), rust_log, &[]).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    let args = json!({"patient": PATIENT}).to_string();
    model_calls(&mut up, &[("call_chart", "lab__chart_progress", &args)]).await;
    let seen = client.collect_until("voxgate.tool_call.completed").await;
    // The name did travel through voxgate: in the progress events and the result.
    assert!(
        seen.iter()
            .any(|e| e["type"] == "voxgate.tool_call.progress"
                && e["message"].as_str().is_some_and(|m| m.contains(PATIENT))),
        "{seen:?}"
    );
    assert!(output(&mut up).await["text"].as_str().unwrap().contains(PATIENT));
    drop(client);
    up.closed().await;
    stop(&mut child).await;
    logs.lock().unwrap().clone()
}

/// rmcp logs every notification it receives at `info` (progress messages, the server's log
/// messages), requests at `debug`, whole messages at `trace` and unexpected ones at `warn`.
#[tokio::test]
async fn mcp_payloads_never_reach_the_log_at_any_level() {
    let (default, trace) =
        tokio::join!(log_of_a_chart_call(None), log_of_a_chart_call(Some("trace,rmcp=trace,rmcp::service=trace")));
    assert!(default.contains("MCP server connected"), "the log was captured: {default}");
    assert!(trace.contains("TRACE") || trace.contains("DEBUG"), "trace logging was on");
    for (level, logs) in [("info", &default), ("trace", &trace)] {
        for word in PATIENT.split(' ') {
            let leaked: Vec<&str> = logs.lines().filter(|l| l.contains(word)).collect();
            assert!(leaked.is_empty(), "{word} in the log at {level}: {leaked:#?}");
        }
    }
}

/// voxgate's environment holds its secrets (the upstream API key, the admin token); a stdio
/// server gets only what it needs to run plus its configured `env`.
#[tokio::test]
async fn a_stdio_server_gets_only_the_allowed_environment() {
    let fake = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let lab_dir = tempfile::tempdir().unwrap();
    let secrets =
        [("OPENAI_API_KEY", "sk-env-canary-0001"), ("VOXGATE_AUTH__ADMIN_TOKEN", "admin-env-canary-0123456789")];
    // The host's plumbing a server needs to reach anything from a hospital network.
    let plumbing = [("HTTPS_PROXY", "http://proxy.clinic.example:3128"), ("SSL_CERT_FILE", "/etc/clinic-ca.pem"), ("TZ", "Europe/Berlin")];
    let env: Vec<(&str, &str)> = secrets.iter().chain(plumbing.iter()).copied().collect();
    let (mut child, _, _) =
        spawn_voxgate_logged(&process_config(&fake, dir.path(), lab_dir.path()), dir.path(), None, &env).await;
    stop(&mut child).await;
    let started = read_jsonl(&lab_dir.path().join("started.jsonl"));
    assert!(!started.is_empty(), "the lab server never started");
    let names: Vec<&str> = started[0]["env"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert!(names.contains(&"LAB_DIR"), "the configured env is passed: {names:?}");
    assert!(names.contains(&"PATH"), "{names:?}");
    for (name, _) in plumbing {
        assert!(names.contains(&name), "{name} did not reach the MCP server: {names:?}");
    }
    for (secret, _) in secrets {
        assert!(!names.contains(&secret), "{secret} reached the MCP server: {names:?}");
    }
    assert!(!names.iter().any(|n| n.starts_with("VOXGATE_")), "{names:?}");
}

/// Is `pid` a live process (not gone, not a zombie waiting to be reaped)?
fn alive(pid: u64) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| stat.rsplit(')').next().and_then(|rest| rest.split_whitespace().next()) != Some("Z"))
}

/// A stdio server started through a wrapper (`sh -c`, npx, `uv run`) runs as a grandchild of
/// voxgate, with helpers of its own: none of them may outlive voxgate.
#[tokio::test]
async fn a_wrapped_stdio_server_leaves_no_process_behind() {
    let lab_dir = tempfile::tempdir().unwrap();
    // A helper that ignores stdin, and the server itself in the background (given the wrapper's
    // stdin through fd 3: a background job's stdin is /dev/null otherwise).
    let script = r#"sleep 300 & echo $! > "$LAB_DIR/helper.pid"; exec 3<&0; "$0" "$1" <&3 3<&- & wait"#;
    let toml = format!(
        "[mcp]\nconnect_timeout_ms = 60000\n[mcp.servers.wrapped]\ncommand = [\"sh\", \"-c\", {script:?}, {python:?}, {lab:?}]\n\
         env = {{ LAB_DIR = {dir:?} }}\nallow = [\"lookup_result\"]\n",
        python = test_python().display().to_string(),
        lab = lab_script().display().to_string(),
        dir = lab_dir.path().display().to_string(),
    );
    let proxy = TestProxy::start(&toml).await;
    let (_, body) = proxy.http_get("/readyz").await;
    assert!(!body.contains("mcp.servers.wrapped"), "the wrapped server is up: {body}");
    let helper: u64 = std::fs::read_to_string(lab_dir.path().join("helper.pid")).unwrap().trim().parse().unwrap();
    let server = read_jsonl(&lab_dir.path().join("started.jsonl"))[0]["pid"].as_u64().unwrap();
    assert!(alive(helper) && alive(server));
    proxy.stop().await;
    eventually("the wrapper's processes to end", || !alive(helper) && !alive(server)).await;
}
