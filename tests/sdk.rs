//! The official OpenAI Python SDK as a client of voxgate: a text exchange with the simulated model,
//! a session with a client-side tool of its own against the fake upstream, and the same session
//! carried across an upstream that goes away (a resume the SDK must not notice).

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use support::{FakeConn, FakeUpstream, TestProxy};

fn python() -> PathBuf {
    let path = std::env::var_os("VOXGATE_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-test/bin/python"));
    assert!(path.exists(), "{} is missing: run scripts/test to create the test venv", path.display());
    path
}

async fn run_sdk(port: u16, prompt: &str, extra: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/py/sdk_client.py");
    let output = tokio::process::Command::new(python())
        .arg(script)
        .arg(port.to_string())
        .arg(prompt)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "sdk client failed: {}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

#[tokio::test]
async fn sdk_text_exchange_with_the_simulated_model() {
    let proxy = TestProxy::start("").await;
    let result = run_sdk(proxy.addr.port(), "Hello, can you hear me?", &[]).await;
    assert!(!result["text"].as_str().unwrap().is_empty(), "{result}");
    let seen: Vec<&str> = result["seen"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert!(seen.contains(&"session.created"), "{seen:?}");
    assert!(seen.iter().all(|t| !t.starts_with("voxgate.")), "a strict client gets no voxgate events: {seen:?}");
}

/// Answers the SDK's session like a realtime server: the first response calls the client's
/// `get_weather`, the second speaks (as text).
async fn fake_model(up: FakeConn) {
    fake_model_until(up, usize::MAX).await;
}

/// [`fake_model`], hanging up (TCP, no close frame) when `response.create` number `hang_up_at`
/// arrives, before answering it.
/// Returns how many `session.update`s this upstream answered.
async fn fake_model_until(mut up: FakeConn, hang_up_at: usize) -> usize {
    up.send_json(&json!({"type": "session.created", "event_id": "e0", "session": {"type": "realtime", "id": "sess_1"}})).await;
    let mut responses = 0;
    let mut updates = 0;
    loop {
        let event = up.next_json().await;
        match event["type"].as_str().unwrap_or_default() {
            "session.update" => {
                updates += 1;
                up.send_json(&json!({"type": "session.updated", "event_id": "e1", "session": event["session"]})).await;
            }
            "conversation.item.create" => {
                let mut item = event["item"].clone();
                // A client-chosen id is kept, as real servers do.
                if item["id"].is_null() {
                    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                    item["id"] = json!(format!("item_x{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
                }
                up.send_json(&json!({"type": "conversation.item.added", "event_id": "e2", "item": item})).await;
            }
            "response.create" => {
                responses += 1;
                if responses == hang_up_at {
                    return updates;
                }
                up.send_json(&json!({"type": "response.created", "event_id": "e3", "response": {"id": format!("resp_{responses}"), "object": "realtime.response", "status": "in_progress", "output": []}})).await;
                if responses == 1 {
                    let args = r#"{"city":"Oslo"}"#;
                    let item = json!({"id": "item_fc", "type": "function_call", "status": "completed", "name": "get_weather", "call_id": "call_weather", "arguments": args});
                    up.send_json(&json!({"type": "response.output_item.added", "event_id": "e4", "response_id": "resp_1", "output_index": 0, "item": item})).await;
                    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e5", "response_id": "resp_1", "item_id": "item_fc", "output_index": 0, "call_id": "call_weather", "name": "get_weather", "arguments": args})).await;
                    up.send_json(&json!({"type": "response.output_item.done", "event_id": "e6", "response_id": "resp_1", "output_index": 0, "item": item})).await;
                    up.send_json(&json!({"type": "response.done", "event_id": "e7", "response": {"id": "resp_1", "object": "realtime.response", "status": "completed", "output": [item]}})).await;
                } else {
                    up.send_json(&json!({"type": "response.output_text.delta", "event_id": "e8", "response_id": "resp_2", "item_id": "item_m", "output_index": 0, "content_index": 0, "delta": "It is 21 degrees in Oslo."})).await;
                    up.send_json(&json!({"type": "response.output_text.done", "event_id": "e9", "response_id": "resp_2", "item_id": "item_m", "output_index": 0, "content_index": 0, "text": "It is 21 degrees in Oslo."})).await;
                    up.send_json(&json!({"type": "response.done", "event_id": "e10", "response": {"id": "resp_2", "object": "realtime.response", "status": "completed", "output": []}})).await;
                    return updates;
                }
            }
            _ => {}
        }
    }
}

/// How long the Python SDK may take to start and connect (imports are slow on a loaded machine).
const SDK_START: Duration = Duration::from_secs(60);

#[tokio::test]
async fn sdk_with_its_own_client_tool_through_the_fake_upstream() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let port = proxy.addr.port();
    let sdk = tokio::spawn(async move { run_sdk(port, "What is the weather in Oslo?", &["--client-tool"]).await });
    let up = fake.accept_within(SDK_START).await;
    assert_eq!(up.header("authorization"), Some("Bearer sk-test-upstream-key"), "the SDK's key is not passed upstream");
    fake_model(up).await;
    let result = sdk.await.unwrap();
    assert_eq!(result["answered"], json!(["call_weather"]), "{result}");
    assert_eq!(result["text"], "It is 21 degrees in Oslo.");
    assert_eq!(result["errors"], json!([]));
}

#[tokio::test]
async fn sdk_does_not_notice_a_resume() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let port = proxy.addr.port();
    let sdk = tokio::spawn(async move { run_sdk(port, "What is the weather in Oslo?", &["--client-tool"]).await });
    // The first upstream takes the session and the question, then dies before answering.
    let updates = fake_model_until(fake.accept_within(SDK_START).await, 1).await;
    // The second gets the session, the question and the request again, and answers.
    fake_model(fake.accept().await).await;
    let result = sdk.await.unwrap();
    assert_eq!(result["answered"], json!(["call_weather"]), "{result}");
    assert_eq!(result["text"], "It is 21 degrees in Oslo.");
    assert_eq!(result["errors"], json!([]));
    let seen: Vec<&str> = result["seen"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(seen.iter().filter(|t| **t == "session.created").count(), 1, "{seen:?}");
    // The first upstream's answers, one per update it had: voxgate's tool injection and the SDK's
    // own update, or only the SDK's when it came before `session.created` (voxgate then puts its
    // tools into that update instead of sending its own). None of the restore's.
    assert!((1..=2).contains(&updates), "{updates}");
    assert_eq!(seen.iter().filter(|t| **t == "session.updated").count(), updates, "{seen:?}");
    assert_eq!(seen.iter().filter(|t| **t == "conversation.item.added").count(), 2, "the question and the tool output, once each: {seen:?}");
    assert!(seen.iter().all(|t| !t.starts_with("voxgate.")), "{seen:?}");
}
