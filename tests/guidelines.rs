//! `search_medical_guidelines` through the real proxy: a model call answered from the shipped corpus
//! with citations in `voxgate.tool_call.completed`, the simulated model asking for guidelines, an
//! operator corpus used instead of the shipped one, and a malformed operator corpus refusing start
//! (exit 2) with its file, line and field named.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{FakeUpstream, TestProxy, binary, model_calls};

const TOOL: &str = "search_medical_guidelines";

fn good_record(id: &str, title: &str) -> String {
    json!({
        "id": id, "title": title, "source": "Clinic", "condition": "Hyperkalemia",
        "summary": "Local protocol.", "url": "https://intranet.example.org/protocols/hyperkalemia",
        "publication_date": "2024-01-10", "last_updated": "2025-02-01",
        "text": "Calcium gluconate, insulin with dextrose, potassium binders.",
    })
    .to_string()
}

#[tokio::test]
async fn a_model_call_is_answered_with_guidelines_and_citations() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    let args = json!({"query": "lung cancer screening low-dose CT", "max_results": 3}).to_string();
    model_calls(&mut up, &[("call_gl1", TOOL, &args)]).await;

    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], TOOL);
    let citations = completed["citations"].as_array().unwrap();
    assert_eq!(citations.len(), 3, "{completed}");
    assert_eq!(citations[0]["title"], "Lung Cancer: Screening");
    assert_eq!(citations[0]["source"], "USPSTF");
    assert_eq!(
        citations[0]["url"],
        "https://www.uspreventiveservicestaskforce.org/uspstf/recommendation/lung-cancer-screening"
    );
    assert_eq!(citations[0]["date"], "2021-03-09");

    let output = up.until("conversation.item.create").await;
    assert_eq!(output["item"]["call_id"], "call_gl1");
    let result: Value = serde_json::from_str(output["item"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(result["query"], "lung cancer screening low-dose CT");
    assert_eq!(result["guidelines"][0]["id"], "uspstf-lung-cancer-screening");
    assert!(result["total_count"].as_u64().unwrap() >= 3);

    // No PHI here: the audit record keeps the arguments.
    let finished: Vec<Value> = proxy
        .audit_records()
        .into_iter()
        .filter(|r| r["call_id"] == "call_gl1" && r["event"] == "call_finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["status"], "completed");
    assert_eq!(finished[0]["phi"], false);
    proxy.stop().await;
}

#[tokio::test]
async fn the_simulated_model_looks_up_guidelines() {
    let proxy = TestProxy::start("").await;
    let mut client = proxy.client().await;
    client.until("voxgate.session.ready").await;
    client
        .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What do the CDC guidelines say about doxycycline after sex to prevent STIs?"}]}}))
        .await;
    client.send_json(json!({"type": "response.create"})).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], TOOL);
    let first = &completed["citations"][0];
    assert_eq!(first["url"], "https://www.cdc.gov/mmwr/volumes/73/rr/rr7302a1.htm", "{completed}");
    assert!(first["source"].as_str().unwrap().starts_with("CDC"));
    proxy.stop().await;
}

#[tokio::test]
async fn an_operator_corpus_is_searched_instead_of_the_shipped_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("local.jsonl");
    std::fs::write(&path, format!("{}\n", good_record("local-hyperkalemia", "Acute hyperkalemia protocol"))).unwrap();
    let mut fake = FakeUpstream::start().await;
    let toml = format!("[backends.guidelines]\ncorpus_path = \"{}\"\n", path.display());
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;
    let args = json!({"query": "hyperkalemia insulin"}).to_string();
    model_calls(&mut up, &[("call_gl2", TOOL, &args)]).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(
        completed["citations"],
        json!([{"title": "Acute hyperkalemia protocol",
        "url": "https://intranet.example.org/protocols/hyperkalemia", "source": "Clinic", "date": "2025-02-01"}])
    );
    proxy.stop().await;
}

#[tokio::test]
async fn a_malformed_operator_corpus_refuses_start_naming_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("bad-corpus.jsonl");
    let bad = good_record("second", "Second").replace("2024-01-10", "10/01/2024");
    std::fs::write(&corpus, format!("{}\n{bad}\n", good_record("first", "First"))).unwrap();
    let config = dir.path().join("voxgate.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[audit]\npath = \"{}\"\n[backends.guidelines]\ncorpus_path = \"{}\"\n",
            dir.path().join("audit.jsonl").display(),
            corpus.display()
        ),
    )
    .unwrap();
    for args in [
        vec!["check-config".to_string(), config.display().to_string()],
        vec!["--config".into(), config.display().to_string()],
    ] {
        let run = tokio::process::Command::new(binary()).args(&args).kill_on_drop(true).output();
        let out = tokio::time::timeout(Duration::from_secs(30), run).await.unwrap().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("backends.guidelines.corpus_path"), "{stderr}");
        assert!(stderr.contains(&format!("{} line 2: field `publication_date`", corpus.display())), "{stderr}");
    }
}
