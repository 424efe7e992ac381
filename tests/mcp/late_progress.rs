//! Progress a server sends after its call has ended (as the lab server's `late_progress` does)
//! must never become another call's. rmcp numbers progress tokens afresh on
//! each connection, so after a reconnect a new call — possibly another user's — has the old
//! call's token.

use std::time::Duration;

use serde_json::{Value, json};

use super::support::{FakeUpstream, TestProxy, model_calls, test_python};
use super::{Lab, eventually, lab_script, output};

/// A made-up patient, in the late progress message.
const PATIENT: &str = "Zebulon Quixote";

#[tokio::test]
async fn progress_that_comes_after_its_call_never_reaches_a_call_on_the_next_connection() {
    let dir = tempfile::tempdir().unwrap();
    let fake = FakeUpstream::start().await;
    let toml = format!(
        "[auth]\nadmin_token = \"admin-secret-token-0123\"\n[mcp]\nconnect_timeout_ms = 60000\n[mcp.servers.late]\n\
         command = [{python:?}, {script:?}]\nenv = {{ LAB_DIR = {dir:?} }}\nallow = [\"late_progress\", \"crash\", \"count_steps\"]\n",
        python = test_python().display().to_string(),
        script = lab_script().display().to_string(),
        dir = dir.path().display().to_string(),
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let mut lab = Lab { proxy, fake, dir };
    let (mut client, mut up, _) = lab.session().await;

    // First connection: tools/list has token 0, this call 1.
    let args = json!({"patient": PATIENT}).to_string();
    model_calls(&mut up, &[("call_late", "late__late_progress", &args)]).await;
    client.until("voxgate.tool_call.completed").await;
    output(&mut up).await;
    eventually("the late progress to be sent", || !lab.stdio_file("late.jsonl").is_empty()).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The server crashes and is restarted: a new connection.
    model_calls(&mut up, &[("call_crash", "late__crash", r#"{"tag":"boom"}"#)]).await;
    client.until("voxgate.tool_call.failed").await;
    output(&mut up).await;
    lab.until_restarted("late").await;

    // Second connection: tools/list has token 0 again, so this call has token 1, the late call's.
    model_calls(&mut up, &[("call_after", "late__count_steps", r#"{"steps":1}"#)]).await;
    let seen = client.collect_until("voxgate.tool_call.completed").await;
    let progress: Vec<&Value> = seen.iter().filter(|e| e["type"] == "voxgate.tool_call.progress").collect();
    assert!(!progress.is_empty(), "{seen:?}");
    for event in &progress {
        assert_eq!(event["call_id"], "call_after");
        assert_eq!(event["message"], "step 1 of 1", "another call's progress: {seen:?}");
    }
    assert_eq!(output(&mut up).await["text"], "counted 1 steps");
}
