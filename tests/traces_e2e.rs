//! Traces from the real binary: a session through voxgate exports its session span, the upstream
//! connect span and one child span per tool call to a real OTLP receiver (the Jaeger stand-in),
//! the third-party tool's HTTP requests (answered with NCBI's recorded E-utilities XML, so the
//! search completes) carry the tool span's W3C trace context, and no span carries the session's
//! patient data (tool arguments and results with PHI are checked in `phi_canary.rs`).

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::otlp::{received, start_receiver};
use support::{Client, FakeUpstream, model_calls, spawn_voxgate};

const BMI: &str = r#"{"calculator_name":"bmi","parameters":{"weight_kg":70,"height_cm":175}}"#;
const PATIENT: &str = "Zebulon Quixote";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_exports_session_and_tool_spans_with_trace_context_on_tool_requests() {
    let dir = tempfile::tempdir().unwrap();
    let mut receiver = start_receiver(dir.path()).await;
    let mut fake = FakeUpstream::start().await;
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstream]\nkind = \"openai\"\nurl = \"ws://{up}/v1/realtime\"\napi_key = \"sk-test\"\nmodel = \"gpt-realtime\"\n\
         [audit]\npath = \"{audit}\"\n[backends.calendar]\npath = \"{cal}\"\n[backends.pubmed]\nbase_url = \"http://127.0.0.1:{port}/eutils\"\n\
         [telemetry]\notlp_endpoint = \"http://127.0.0.1:{port}\"\notlp_protocol = \"http/protobuf\"\n",
        up = fake.addr,
        audit = dir.path().join("audit.jsonl").display(),
        cal = dir.path().join("cal.ics").display(),
        port = receiver.port,
    );
    let (mut child, addr) = spawn_voxgate(&config, dir.path()).await;
    let mut client = Client::connect(&format!("ws://{addr}/v1/realtime"), &["realtime", "voxgate.v1"]).await;
    let mut up = fake.accept().await;
    up.open_session().await;
    client.until("voxgate.session.ready").await;
    // Patient data in the transcript: it must not become part of any span.
    client
        .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": format!("BMI for {PATIENT}")}]}}))
        .await;
    up.until("conversation.item.create").await;
    let query = json!({"query": "beta blockers in heart failure", "max_results": 1}).to_string();
    model_calls(&mut up, &[("call_bmi", "calculate_medical_score", BMI), ("call_lit", "search_pubmed", &query)]).await;
    let mut outputs = Vec::new();
    for _ in 0..2 {
        outputs.push(up.until("conversation.item.create").await);
    }
    // The receiver answers the tool's E-utilities requests with NCBI's recorded XML, so the
    // search really completes (with the efetch fixture's article), not just fails fast.
    let lit_output = outputs.iter().find(|o| o["item"]["call_id"] == "call_lit").expect("search_pubmed answered");
    assert!(lit_output["item"]["output"].as_str().unwrap().contains("12091962"), "{lit_output}");
    drop(client);
    // The session has ended as the client left (outcome `client_closed`) once it closes the
    // upstream; only then is the process stopped.
    up.closed().await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    assert!(tokio::time::timeout(Duration::from_secs(20), child.wait()).await.unwrap().unwrap().success());

    let mut spans = Vec::new();
    let mut lines = Vec::new();
    for _ in 0..50 {
        let (text, all) = received(&receiver.out);
        assert!(!text.contains("Zebulon") && !text.contains("Quixote"), "PHI reached the collector");
        lines = all;
        spans = lines.iter().filter(|l| l["kind"] == "span").cloned().collect::<Vec<Value>>();
        if spans.iter().any(|s| s["name"] == "voxgate.session") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let find = |name: &str, attr: (&str, &str)| -> Value {
        let found: Vec<&Value> = spans.iter().filter(|s| s["name"] == name && s["attributes"][attr.0] == attr.1).collect();
        assert_eq!(found.len(), 1, "one {name} span with {attr:?} in {spans:?}");
        found[0].clone()
    };
    let session = find("voxgate.session", ("model", "gpt-realtime"));
    assert!(session["attributes"]["session.id"].as_str().unwrap().starts_with("vgs_"));
    assert_eq!(session["attributes"]["outcome"], "client_closed");
    let trace_id = session["trace_id"].as_str().unwrap().to_string();
    let connect = find("voxgate.upstream_connect", ("upstream.kind", "openai"));
    assert_eq!(connect["parent_span_id"], session["span_id"]);
    let bmi = find("voxgate.tool_call", ("tool", "calculate_medical_score"));
    assert_eq!(bmi["parent_span_id"], session["span_id"]);
    assert_eq!(bmi["attributes"]["status"], "completed");
    assert_eq!(bmi["attributes"]["confirmation"], "not_required");
    let lit = find("voxgate.tool_call", ("tool", "search_pubmed"));
    assert_eq!(lit["parent_span_id"], session["span_id"]);
    assert_eq!(lit["trace_id"], trace_id.as_str());
    assert_eq!(lit["attributes"]["status"], "completed", "{lit}");

    // The tool's request to "NCBI" (the receiver records every request) carried its context.
    let esearch = lines
        .iter()
        .find(|l| l["kind"] == "request" && l["path"].as_str().is_some_and(|p| p.starts_with("/eutils/esearch.fcgi")))
        .expect("the tool's request reached the fake");
    let traceparent = esearch["headers"]["traceparent"].as_str().expect("traceparent header");
    assert!(traceparent.starts_with(&format!("00-{trace_id}-")), "{traceparent} not in trace {trace_id}");
    assert!(
        lines.iter().any(|l| l["kind"] == "request" && l["path"].as_str().is_some_and(|p| p.starts_with("/eutils/efetch.fcgi"))),
        "the search went on to fetch the article"
    );
    receiver.child.kill().await.unwrap();
}
