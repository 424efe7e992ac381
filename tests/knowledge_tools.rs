//! The knowledge tools through the real proxy: a FakeUpstream model calls them, fake Brave and
//! evidence servers on 127.0.0.1 answer, and the client sees citations in
//! `voxgate.tool_call.completed`. A PHI-carrying query is blocked before it reaches the fake.

mod support;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::Uri;
use axum::routing::get;
use serde_json::{Value, json};
use support::{FakeUpstream, TestProxy, model_calls};

const BRAVE: &str =
    include_str!("fixtures/search/semantic-kernel_brave_what_is_the_semantic_kernel.json");

/// A fake HTTP service answering every GET with `body`, recording the request URIs.
async fn fake_service(body: String) -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let state = (body, seen.clone());
    let app = Router::new()
        .fallback(get(
            |State((body, seen)): State<(String, Arc<Mutex<Vec<String>>>)>, uri: Uri| async move {
                seen.lock().unwrap().push(uri.to_string());
                ([("content-type", "application/json")], body)
            },
        ))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn output_of(item: &Value) -> Value {
    serde_json::from_str(item["item"]["output"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn knowledge_tools_answer_with_citations_and_phi_never_leaves() {
    let (brave, brave_seen) = fake_service(BRAVE.to_string()).await;
    let evidence_answer = json!({"results": [{"title": "Beta-blockers in HFrEF: meta-analysis", "summary": "Mortality falls.",
        "evidence_level": "high", "source": "Lancet", "pubmed_id": "24950843", "url": "https://pubmed.ncbi.nlm.nih.gov/24950843/",
        "date": "2014-06-19"}], "total_count": 1});
    let (evidence, evidence_seen) = fake_service(evidence_answer.to_string()).await;
    let mut fake = FakeUpstream::start().await;
    let toml = format!(
        "[backends.web_search]\nprovider = \"brave\"\nbase_url = \"{brave}\"\napi_key = \"brave-key\"\n\
         allowed_domains = [\"microsoft.com\", \"github.com\"]\n\
         [backends.evidence]\nbase_url = \"{evidence}/v1\"\napi_key = \"evidence-key\"\n"
    );
    let proxy = TestProxy::with_upstream(&fake, &toml).await;
    let (mut client, mut up) = proxy.ready_session(&mut fake).await;

    // An identifier in the query: blocked before anything is sent.
    let phi = json!({"query": "MRN 84736251 chest pain"}).to_string();
    model_calls(&mut up, &[("call_w1", "web_search_medical", &phi)]).await;
    let failed = client.until("voxgate.tool_call.failed").await;
    assert_eq!(failed["error"]["code"], "phi_blocked");
    assert!(
        output_of(&up.until("conversation.item.create").await)["error"]["code"] == "phi_blocked"
    );
    assert!(
        brave_seen.lock().unwrap().is_empty(),
        "the blocked query never reached the provider"
    );

    let clean = json!({"query": "what is the semantic kernel", "max_results": 3}).to_string();
    model_calls(&mut up, &[("call_w2", "web_search_medical", &clean)]).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "web_search_medical");
    let citations = completed["citations"].as_array().unwrap();
    assert_eq!(citations.len(), 3);
    assert_eq!(
        citations[0]["url"],
        "https://learn.microsoft.com/en-us/semantic-kernel/overview/"
    );
    assert_eq!(citations[0]["source"], "learn.microsoft.com");
    let result = output_of(&up.until("conversation.item.create").await);
    assert_eq!(result["results"].as_array().unwrap().len(), 3);
    assert_eq!(brave_seen.lock().unwrap().len(), 1);

    let question = json!({"query": "beta blockers in heart failure"}).to_string();
    model_calls(&mut up, &[("call_e1", "search_openevidence", &question)]).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "search_openevidence");
    assert_eq!(
        completed["citations"][0],
        json!({"title": "Beta-blockers in HFrEF: meta-analysis", "url": "https://pubmed.ncbi.nlm.nih.gov/24950843/",
            "source": "Lancet", "pmid": "24950843", "evidence_level": "high", "date": "2014-06-19"})
    );
    assert!(
        evidence_seen.lock().unwrap()[0]
            .starts_with("/v1/search?q=beta+blockers+in+heart+failure&limit=5")
    );

    let case = json!({"chief_complaint": "chest pain", "symptoms": ["substernal chest pressure", "shortness of breath",
        "diaphoresis", "pain radiating to left arm"], "patient_age": 65, "patient_sex": "M",
        "relevant_history": ["hypertension", "diabetes", "smoking history"], "max_results": 5})
    .to_string();
    model_calls(
        &mut up,
        &[("call_d1", "generate_differential_diagnosis", &case)],
    )
    .await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "generate_differential_diagnosis");
    let result = loop {
        let item = up.until("conversation.item.create").await;
        if item["item"]["call_id"] == "call_d1" {
            break output_of(&item);
        }
    };
    assert!(
        result["diagnoses"][0]["diagnosis"]
            .as_str()
            .unwrap()
            .starts_with("Acute coronary syndrome")
    );

    // The differential handles PHI: its arguments are not in the audit log.
    let finished: Vec<Value> = proxy
        .audit_records()
        .into_iter()
        .filter(|r| r["call_id"] == "call_d1" && r["event"] == "call_finished")
        .collect();
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0]["phi"], true);
    assert!(finished[0].get("arguments").is_none_or(Value::is_null));
    assert!(
        !std::fs::read_to_string(proxy.audit_path())
            .unwrap()
            .contains("84736251")
    );
}

#[tokio::test]
async fn unconfigured_third_party_tools_are_not_offered() {
    let mut fake = FakeUpstream::start().await;
    let proxy = TestProxy::with_upstream(&fake, "").await;
    let mut client = proxy.client().await;
    let mut up = fake.accept().await;
    up.open_session().await;
    let ready = client.until("voxgate.session.ready").await;
    let names: Vec<&str> = ready["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"generate_differential_diagnosis"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"web_search_medical") && !names.contains(&"search_openevidence"),
        "{names:?}"
    );
}

#[tokio::test]
async fn the_simulated_model_asks_for_a_differential_and_speaks_the_answer() {
    let proxy = TestProxy::start("").await;
    let mut client = proxy.client().await;
    client.until("voxgate.session.ready").await;
    let request = "Differential for a 65 year old man with chest pain, shortness of breath, sweating and pain \
                   radiating to the left arm; history of hypertension, diabetes and smoking";
    client
        .send_json(json!({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": request}]}}))
        .await;
    client.send_json(json!({"type": "response.create"})).await;
    let completed = client.until("voxgate.tool_call.completed").await;
    assert_eq!(completed["name"], "generate_differential_diagnosis");
    loop {
        let frame = client.next_text().await;
        if frame.contains("The leading diagnosis is Acute coronary syndrome") {
            assert!(frame.contains("Do not miss"), "{frame}");
            break;
        }
    }
}
