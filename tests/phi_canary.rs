//! PHI canaries: known fake identifiers placed in tool arguments, tool results and transcripts must
//! not appear — at trace log level — in logs, error events, `/metrics`, the audit log, the spans
//! exported over OTLP to a real receiver (names, attributes, status messages, events), or any
//! request a third-party fake receives; a query tainted by an earlier PHI result is blocked.

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Query, State};
use serde_json::{Value, json};
use support::otlp::{received, start_receiver};
use support::{Client, FakeUpstream, spawn_voxgate_logged};

const CANARIES: &[&str] = &["Zebulon", "Quixote", "8675309", "555-867-5309", "1961-04-12", "zq@example.org"];

/// A PubMed E-utilities fake that records every query string it receives.
async fn fake_pubmed() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pubmed");
    let esearch = std::fs::read_to_string(fixtures.join("biopython_esearch1.xml")).unwrap_or_default();
    let efetch = std::fs::read_to_string(fixtures.join("biopython_pubmed1.xml")).unwrap_or_default();
    async fn record(State(seen): State<Arc<Mutex<Vec<String>>>>, Query(q): Query<Vec<(String, String)>>) -> Vec<(String, String)> {
        seen.lock().unwrap().push(format!("{q:?}"));
        q
    }
    let app = axum::Router::new()
        .route(
            "/esearch.fcgi",
            axum::routing::get({
                let esearch = esearch.clone();
                move |state, query| async move {
                    record(state, query).await;
                    ([("content-type", "text/xml")], esearch)
                }
            }),
        )
        .route(
            "/efetch.fcgi",
            axum::routing::get(move |state, query| async move {
                record(state, query).await;
                ([("content-type", "text/xml")], efetch)
            }),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), seen)
}

#[tokio::test]
async fn canaries_never_leave() {
    let (pubmed_url, pubmed_seen) = fake_pubmed().await;
    let mut fake = FakeUpstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut receiver = start_receiver(dir.path()).await;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nkind = \"openai\"\nurl = \"ws://{}/v1/realtime\"\napi_key = \"sk-canary-key\"\n\
         [audit]\npath = \"{}\"\n[backends.calendar]\npath = \"{}\"\n[backends.pubmed]\nbase_url = \"{pubmed_url}\"\n\
         [telemetry]\notlp_endpoint = \"http://127.0.0.1:{}\"\notlp_protocol = \"http/protobuf\"\n",
        fake.addr,
        dir.path().join("audit.jsonl").display(),
        dir.path().join("cal.ics").display(),
        receiver.port
    );
    let (mut child, addr, logs) = spawn_voxgate_logged(&config, dir.path(), Some("trace"), &[]).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    let mut client_frames = Vec::new();

    // Transcripts both ways.
    client.send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Book Zebulon Quixote, MRN 8675309, DOB 1961-04-12, phone 555-867-5309"}]}})).await;
    up.until("conversation.item.create").await;
    up.send_json(&json!({"type": "response.output_audio_transcript.delta", "event_id": "e", "response_id": "r", "item_id": "i", "output_index": 0, "content_index": 0, "delta": "Booking Zebulon Quixote"})).await;
    client_frames.push(client.next_text().await);

    // A PHI tool's arguments: the event is created (after confirmation).
    let day = chrono::Utc::now().date_naive() + chrono::Days::new(1);
    let args = json!({"title": "Follow-up Zebulon Quixote", "start_datetime": format!("{day}T14:00:00Z"), "end_datetime": format!("{day}T15:00:00Z"),
        "description": "MRN 8675309 zq@example.org"}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i1", "output_index": 0, "call_id": "call_c1", "name": "create_calendar_event", "arguments": args})).await;
    client.until("voxgate.tool_call.confirmation_requested").await;
    client.send_json(json!({"type": "voxgate.tool_call.confirm", "call_id": "call_c1", "approved": true})).await;
    client.until("voxgate.tool_call.completed").await;
    up.until("conversation.item.create").await;

    // A PHI tool's result taints the session...
    let range = json!({"start_date": day.to_string(), "end_date": day.to_string()}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i2", "output_index": 0, "call_id": "call_c2", "name": "get_calendar_events", "arguments": range})).await;
    client.until("voxgate.tool_call.completed").await;
    let listed = up.until("conversation.item.create").await;
    assert!(listed["item"]["output"].as_str().unwrap().contains("Zebulon"), "the model itself may see the result");

    // ...so a third-party query reusing a word from it is blocked before it leaves.
    let query = json!({"query": "Zebulon heart failure"}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i3", "output_index": 0, "call_id": "call_p1", "name": "search_pubmed", "arguments": query})).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "phi_blocked");
    client_frames.push(failed.to_string());
    let output = up.until("conversation.item.create").await;
    assert!(output["item"]["output"].as_str().unwrap().contains("phi_blocked"));
    // An identifier in a query is blocked too; a clean query goes through.
    let query = json!({"query": "MRN 8675309 asthma"}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i4", "output_index": 0, "call_id": "call_p2", "name": "search_pubmed", "arguments": query})).await;
    assert_eq!(client.until("voxgate.tool_call.failed").await["error"]["code"], "phi_blocked");
    let query = json!({"query": "beta blockers in heart failure", "max_results": 1}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i5", "output_index": 0, "call_id": "call_p3", "name": "search_pubmed", "arguments": query})).await;
    client.until("voxgate.tool_call.completed").await;
    // A local tool (no PHI, no third party) runs with identifiers in its query, since nothing
    // leaves; its arguments are screened all the same before the audit log holds them.
    let query = json!({"query": "statins for Mr. Quixote DOB 1961-04-12"}).to_string();
    up.send_json(&json!({"type": "response.function_call_arguments.done", "event_id": "e", "response_id": "r", "item_id": "i6", "output_index": 0, "call_id": "call_g1", "name": "search_medical_guidelines", "arguments": query})).await;
    client.until("voxgate.tool_call.completed").await;

    // A bad frame's error event carries nothing of the frame.
    client.send_text("{\"type\":\"voxgate.Zebulon\"}").await;
    let error = client.until("error").await;
    client_frames.push(error.to_string());

    let metrics = reqwest::get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    drop(client);
    // The session's end (and whatever it logs) comes before the stop: it closes the upstream.
    up.closed().await;
    let _ = std::process::Command::new("kill").arg("-TERM").arg(child.id().unwrap().to_string()).status();
    let _ = tokio::time::timeout(Duration::from_secs(15), child.wait()).await;

    // The exporter flushes on shutdown: every tool call's span, its session span and what they
    // carry (attributes, status messages, events) is at the receiver, and none of it is PHI.
    let (exported, lines) = received(&receiver.out);
    receiver.child.kill().await.unwrap();
    let spans: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "span").collect();
    assert!(spans.iter().any(|s| s["name"] == "voxgate.session"), "the session span was exported: {exported}");
    let mut traced: Vec<(&str, &str)> = spans
        .iter()
        .filter(|s| s["name"] == "voxgate.tool_call")
        .map(|s| (s["attributes"]["tool"].as_str().unwrap_or("?"), s["attributes"]["status"].as_str().unwrap_or("?")))
        .collect();
    traced.sort_unstable();
    assert_eq!(
        traced,
        [
            ("create_calendar_event", "completed"),
            ("get_calendar_events", "completed"),
            ("search_medical_guidelines", "completed"),
            ("search_pubmed", "completed"),
            ("search_pubmed", "failed"),
            ("search_pubmed", "failed"),
        ],
        "one span per tool call: {exported}"
    );
    for canary in CANARIES {
        // Byte-valued attributes reach the receiver as hex.
        let hex: String = canary.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(!exported.contains(canary) && !exported.contains(&hex), "{canary} in an exported span: {exported}");
    }

    let logs = logs.lock().unwrap().clone();
    assert!(logs.contains("tool call finished"), "trace logs were captured");
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let guideline_search = audit
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|r| r["event"] == "call_finished" && r["tool"] == "search_medical_guidelines")
        .expect("the guideline search is audited");
    assert_eq!(guideline_search["status"], "completed");
    assert!(guideline_search.get("arguments").is_none_or(Value::is_null), "{guideline_search}");
    let pubmed_requests = pubmed_seen.lock().unwrap().join("\n");
    assert!(pubmed_requests.contains("heart failure"), "the clean query reached the fake: {pubmed_requests}");
    for canary in CANARIES {
        assert!(!logs.contains(canary), "{canary} in logs");
        assert!(!metrics.contains(canary), "{canary} in /metrics");
        assert!(!audit.contains(canary), "{canary} in the audit log");
        assert!(!pubmed_requests.contains(canary), "{canary} sent to PubMed");
        for frame in &client_frames[1..] {
            assert!(!frame.contains(canary), "{canary} in a voxgate error/failed event: {frame}");
        }
    }
    let _: Value = json!(null);
}
